"""``celery -A APP bridge ...``: the management commands, over :class:`bridge.api.Bridge`.

Times are shown in the local zone with their UTC offset; ``--json`` gives
ISO-8601 UTC. Every failure exits non-zero with a one-line reason.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import click
from sqlalchemy.exc import DBAPIError, OperationalError

from .api import Bridge, Run, Schedule
from .database import error_reason
from .errors import BridgeError
from .policy import Overlap

F = TypeVar("F", bound=Callable[..., Any])


def _bridge(ctx: click.Context) -> Bridge:
    app = getattr(ctx.obj, "app", None)
    return Bridge(app)


def fails_in_one_line(command: F) -> F:
    """Turn the bridge's refusals and database errors into ``Error: <reason>`` and exit 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BridgeError as exc:
            raise click.ClickException(str(exc)) from None
        except (OperationalError, DBAPIError) as exc:
            raise click.ClickException(f"database error: {error_reason(exc)}") from None

    return wrapper  # type: ignore[return-value]


def local(value: datetime | None) -> str:
    """A time in the machine's zone with its offset, to the second; '-' for none."""
    return "-" if value is None else value.astimezone().isoformat(sep=" ", timespec="seconds")


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    for line in (headers, *rows):
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def state(schedule: Schedule) -> str:
    if schedule.broken:
        return "BROKEN"
    return "yes" if schedule.enabled else "paused"


# -- options shared by add and edit ---------------------------------------------


def definition_options(command: F) -> F:
    for option in reversed(
        [
            click.option("--task", help="Registered Celery task name."),
            click.option("--timer", help="'*/5 * * * *', '@daily', 'every 30s', 'at <ISO time>'."),
            click.option(
                "--args", "args_json", metavar="JSON", help="Positional arguments, a JSON list."
            ),
            click.option(
                "--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments, a JSON object."
            ),
            click.option("--timezone", help="IANA zone the timer is read in."),
            click.option("--queue", help="Queue to send runs to."),
            click.option(
                "--options",
                "options_json",
                metavar="JSON",
                help="apply_async options, a JSON object (queue, priority, expires, headers...).",
            ),
            click.option(
                "--overlap",
                type=click.Choice([o.value for o in Overlap]),
                help="What to do while a previous run is not final.",
            ),
            click.option(
                "--allow-unknown-task",
                is_flag=True,
                help="Accept a task name this app does not register (only the workers import it).",
            ),
        ]
    ):
        command = option(command)
    return command


@click.group(name="bridge")
def bridge() -> None:
    """Manage the bridge's schedules and read their runs."""


@bridge.command()
@click.pass_context
@fails_in_one_line
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the bridge's tables (safe to run again)."""
    api = _bridge(ctx)
    api.migrate()
    click.echo(f"database {api.database.url.split('@')[-1]} is at the latest schema")


@bridge.command()
@click.argument("name")
@definition_options
@click.option("--disabled", is_flag=True, help="Create it paused.")
@click.pass_context
@fails_in_one_line
def add(
    ctx: click.Context,
    name: str,
    task: str | None,
    timer: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    timezone: str | None,
    queue: str | None,
    options_json: str | None,
    overlap: str | None,
    allow_unknown_task: bool,
    disabled: bool,
) -> None:
    """Create a schedule."""
    if task is None or timer is None:
        missing = "--task" if task is None else "--timer"
        raise click.UsageError(f"{missing} is required")
    schedule = _bridge(ctx).add(
        name,
        task=task,
        timer=timer,
        args="[]" if args_json is None else args_json,
        kwargs="{}" if kwargs_json is None else kwargs_json,
        timezone=timezone,
        queue=queue,
        options=options_json,
        overlap=overlap or Overlap.SKIP.value,
        enabled=not disabled,
        allow_unknown_task=allow_unknown_task,
    )
    click.echo(f"added {schedule.name}: next run {local(schedule.nextrun)}")


@bridge.command()
@click.argument("name")
@definition_options
@click.pass_context
@fails_in_one_line
def edit(
    ctx: click.Context,
    name: str,
    task: str | None,
    timer: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    timezone: str | None,
    queue: str | None,
    options_json: str | None,
    overlap: str | None,
    allow_unknown_task: bool,
) -> None:
    """Change some fields of a schedule."""
    schedule = _bridge(ctx).edit(
        name,
        task=task,
        timer=timer,
        args=args_json,
        kwargs=kwargs_json,
        timezone=timezone,
        queue=queue,
        options=options_json,
        overlap=overlap,
        allow_unknown_task=allow_unknown_task,
    )
    click.echo(f"changed {schedule.name}: next run {local(schedule.nextrun)}")


@bridge.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def list_schedules(ctx: click.Context, as_json: bool) -> None:
    """List the schedules."""
    schedules = _bridge(ctx).list()
    if as_json:
        echo_json([s.to_json() for s in schedules])
        return
    echo_table(
        ["NAME", "TASK", "TIMER", "ENABLED", "NEXT RUN", "LAST RUN", "STATUS", "NOTE"],
        [
            [
                s.name,
                s.task,
                s.timer,
                state(s),
                local(s.nextrun) if s.enabled else "-",
                local(s.last_run_at),
                s.last_status or "-",
                s.note or "",
            ]
            for s in schedules
        ],
    )


@bridge.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show every field of a schedule."""
    schedule = _bridge(ctx).get(name)
    if as_json:
        echo_json(schedule.to_json())
        return
    for key, value in schedule.to_json().items():
        shown = (
            local(getattr(schedule, key)) if isinstance(getattr(schedule, key), datetime) else value
        )
        if isinstance(shown, list | dict):
            shown = json.dumps(shown)
        click.echo(f"{key:16} {'-' if shown is None else shown}")


@bridge.command()
@click.argument("name")
@click.option("--note", help="Why it is paused; shown by ls and show.")
@click.pass_context
@fails_in_one_line
def pause(ctx: click.Context, name: str, note: str | None) -> None:
    """Stop firing a schedule until it is resumed."""
    _bridge(ctx).pause(name, note)
    click.echo(f"paused {name}")


@bridge.command()
@click.argument("name")
@click.pass_context
@fails_in_one_line
def resume(ctx: click.Context, name: str) -> None:
    """Fire a paused schedule again, from its next occurrence."""
    schedule = _bridge(ctx).resume(name)
    click.echo(f"resumed {name}: next run {local(schedule.nextrun)}")


@bridge.command(name="rm")
@click.argument("name")
@click.pass_context
@fails_in_one_line
def remove(ctx: click.Context, name: str) -> None:
    """Delete a schedule and its run history."""
    _bridge(ctx).remove(name)
    click.echo(f"removed {name}")


@bridge.command()
@click.argument("name")
@click.pass_context
@fails_in_one_line
def run(ctx: click.Context, name: str) -> None:
    """Send a run of a schedule now, whatever its timer says."""
    record = _bridge(ctx).run(name)
    click.echo(f"sent {name}: task id {record.id}")


@bridge.command()
@click.argument("name")
@click.option("--limit", default=20, show_default=True, type=int, help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def history(ctx: click.Context, name: str, limit: int, as_json: bool) -> None:
    """The runs of a schedule, newest first."""
    runs = _bridge(ctx).history(name, limit)
    if as_json:
        echo_json([r.to_json() for r in runs])
        return
    echo_table(
        [
            "STATUS",
            "TRIGGER",
            "PLAN TIME",
            "STARTED",
            "FINISHED",
            "RUNTIME",
            "WORKER",
            "ERROR",
            "TASK ID",
        ],
        [_history_row(r) for r in runs],
    )


def _history_row(run: Run) -> list[str]:
    return [
        run.status,
        run.trigger,
        local(run.plan_time),
        local(run.started_at),
        local(run.finished_at),
        "-" if run.runtime is None else f"{run.runtime:.3f}s",
        run.worker or "-",
        (run.error or "").splitlines()[0] if run.error else "",
        run.id,
    ]


@bridge.command(name="next")
@click.argument("name")
@click.option("--count", default=5, show_default=True, type=int, help="How many fire times.")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def next_runs(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """The next fire times of a schedule."""
    times = _bridge(ctx).next_runs(name, count)
    if as_json:
        echo_json([t.isoformat() for t in times])
        return
    for value in times:
        click.echo(local(value))
