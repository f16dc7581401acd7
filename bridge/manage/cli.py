"""``celery -A APP bridge ...``: the management commands, over :class:`bridge.api.Bridge`.

Times are shown in the local zone with their UTC offset; ``--json`` gives
ISO-8601 UTC. Every failure exits non-zero with a one-line reason.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from bridge.errors import BridgeError, ValidationError
from bridge.extras import NeedsExtra
from bridge.manage.api import (
    MAX_FORECAST,
    NOTE_RUNNING_RUN,
    PAGE_DEFAULT,
    AuditRecord,
    Bridge,
    Run,
    Schedule,
    default_actor,
)
from bridge.manage.bulk import export_schedules, import_schedules
from bridge.manage.fields import DEFINITION_HELP, POLICY_HELP
from bridge.manage.importers import REDBEAT_PREFIX, SOURCES, Candidate, import_from
from bridge.manage.views import upcoming_json
from bridge.rules.decisions import Upcoming
from bridge.rules.definition import check_timezone
from bridge.rules.health import Health
from bridge.rules.kinds import Trigger
from bridge.rules.policy import POLICY_NAMES
from bridge.rules.timers import format_duration
from bridge.rules.values import INT_MAX, whole_number
from bridge.storage.database import DatabaseError, error_reason

F = TypeVar("F", bound=Callable[..., Any])


def _bridge(ctx: click.Context) -> Bridge:
    app = getattr(ctx.obj, "app", None)
    return Bridge(app, actor=default_actor("cli"))


def fails_in_one_line(command: F) -> F:
    """Turn the bridge's refusals and database errors into ``Error: <reason>`` and exit 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BridgeError as exc:
            raise click.ClickException(str(exc)) from None
        except DatabaseError as exc:
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
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


def state_text(schedule: Schedule) -> str:
    if schedule.broken:
        return "BROKEN"
    return "yes" if schedule.enabled else "paused"


def labels_text(schedule: Schedule) -> str:
    return ",".join(schedule.labels) or "-"


def next_run_text(schedule: Schedule) -> str:
    """``nextrun`` for people: a fixed-delay schedule has none while its run is under way."""
    if schedule.nextrun is None and schedule.fixed_delay:
        return NOTE_RUNNING_RUN
    return local(schedule.nextrun)


def duration_text(seconds: float | None) -> str:
    """A duration column (stored as seconds) the way it is written: ``1h30m``, ``0s``."""
    if seconds is None:
        return "-"
    delta = timedelta(seconds=seconds)
    if not delta:
        return "0s"
    try:
        return format_duration(delta)
    except ValueError:  # a fraction of a second, given through the API
        return f"{seconds:g}s"


# -- options shared by add and edit ---------------------------------------------


def collected(into: str, names: Collection[str]) -> Callable[[F], F]:
    """Hand the options ``names`` to the command as one dict argument ``into``.

    Options not given are left out, so that ``add`` and ``edit`` pass the dict
    straight on to the API: its defaults (add) or the stored values (edit)
    stand for what the user did not type.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            kwargs[into] = {name: value for name, value in given.items() if value is not None}
            return command(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def with_options(options: Sequence[Callable[[F], F]], command: F) -> F:
    """Apply click options so that ``--help`` lists them in the order given."""
    for option in reversed(options):
        command = option(command)
    return command


DEFINITION_OPTIONS = [
    click.option("--task", help=DEFINITION_HELP["task"]),
    click.option("--timer", help=DEFINITION_HELP["timer"]),
    click.option("--args", metavar="JSON", help=DEFINITION_HELP["args"]),
    click.option("--kwargs", metavar="JSON", help=DEFINITION_HELP["kwargs"]),
    click.option("--timezone", help=DEFINITION_HELP["timezone"]),
    click.option("--queue", help=DEFINITION_HELP["queue"]),
    click.option(
        "--labels",
        metavar="A,B",
        help=DEFINITION_HELP["labels"] + " edit replaces them; '' removes them.",
    ),
    click.option("--options", metavar="JSON", help=DEFINITION_HELP["options"]),
    click.option(
        "--allow-unknown-task",
        is_flag=True,
        help=DEFINITION_HELP["allow_unknown_task"] + " (Only the workers import it.)",
    ),
]


def definition_options(command: F) -> F:
    """What the schedule runs and when, passed to the command as ``definition``."""
    names = ("task", "timer", "args", "kwargs", "timezone", "queue", "labels", "options")
    return with_options(
        DEFINITION_OPTIONS, collected("definition", (*names, "allow_unknown_task"))(command)
    )


def policy_options(command: F) -> F:
    """One text option per scheduling policy, passed to the command as ``policies``.

    Plain text rather than ``click.Choice``: the API checks every value and
    refuses a bad one in one line naming the field and what it expects.
    """
    return with_options(
        [
            click.option(
                f"--{name.replace('_', '-')}",
                name,
                metavar=POLICY_HELP[name][0],
                help=POLICY_HELP[name][1],
            )
            for name in POLICY_NAMES
        ],
        collected("policies", POLICY_NAMES)(command),
    )


@contextmanager
def usage_in_one_line() -> Iterator[None]:
    """A usage error (unknown option or command, missing argument, bad value) as one
    ``Error:`` line and exit status 1, like every other failure of the commands.

    Only the help shown when no command is given stays as click prints it.
    """
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.MissingParameter as exc:
        raise click.ClickException(" ".join(exc.format_message().split())) from None
    except click.BadParameter as exc:
        # A value a typed option refused: "count: got 'lots', expected a whole number ...".
        name = exc.param.name if exc.param is not None and exc.param.name else "value"
        raise click.ClickException(f"{name}: {exc.message}") from None
    except click.UsageError as exc:
        raise click.ClickException(" ".join(exc.format_message().split())) from None


class OneLineGroup(click.Group):
    """The ``bridge`` group: its usage errors and its commands' read as one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with usage_in_one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with usage_in_one_line():
            return super().invoke(ctx)


if TYPE_CHECKING:
    _IntType = click.ParamType[int]
else:  # click's ParamType is generic from 8.2 on; the bridge supports 8.1.2
    _IntType = click.ParamType


class WholeNumber(_IntType):
    """A whole number option with a range, refused in the project's words."""

    name = "N"

    def __init__(self, high: int = INT_MAX) -> None:
        self.high = high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return whole_number(
                param.name if param and param.name else "value", value, 1, self.high
            )
        except ValidationError as exc:
            self.fail(f"got {value!r}, expected {exc.expected}", param, ctx)


@click.group(name="bridge", cls=OneLineGroup)
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
@policy_options
@click.option("--disabled", is_flag=True, help="Create it paused.")
@click.pass_context
@fails_in_one_line
def add(
    ctx: click.Context,
    name: str,
    definition: dict[str, Any],
    policies: dict[str, Any],
    disabled: bool,
) -> None:
    """Create a schedule."""
    for required, what in (("task", "a Celery task name"), ("timer", "a timer")):
        if required not in definition:
            raise ValidationError(required, None, f"{what}, given with --{required}")
    schedule = _bridge(ctx).add(name, **definition, **policies, enabled=not disabled)
    click.echo(f"added {schedule.name}: next run {next_run_text(schedule)}")


@bridge.command()
@click.argument("name")
@definition_options
@policy_options
@click.pass_context
@fails_in_one_line
def edit(
    ctx: click.Context, name: str, definition: dict[str, Any], policies: dict[str, Any]
) -> None:
    """Change some fields of a schedule; those not given keep their values."""
    if not policies and set(definition) <= {"allow_unknown_task"}:
        raise click.UsageError(
            f"edit {name!r}: nothing to change; expected at least one of --task, --timer, "
            "--args, --kwargs, --timezone, --queue, --labels, --options or a policy option"
        )
    api = _bridge(ctx)
    before = api.get(name)
    schedule = api.edit(name, **definition, **policies)
    done = "changed" if schedule.updated_at != before.updated_at else "unchanged"
    click.echo(f"{done} {schedule.name}: next run {next_run_text(schedule)}")


#: What ``ls --state`` shows, and the filter of :meth:`Bridge.schedules` it means.
LS_STATES: dict[str, dict[str, bool]] = {
    "enabled": {"enabled": True},
    "paused": {"paused": True},
    "broken": {"broken": True},
    "late": {"late": True},
    "failing": {"failing": True},
}


@bridge.command(name="ls")
@click.option("--prefix", help="Only names starting with this.")
@click.option("--task", help="Only schedules of this task.")
@click.option("--label", help="Only schedules carrying this label.")
@click.option("--state", metavar="|".join(LS_STATES), help="Only schedules in this state.")
@click.option("--health", metavar="|".join(Health), help="Only schedules in this health.")
@click.option("--limit", type=WholeNumber(), help="At most this many (default: all).")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def list_schedules(
    ctx: click.Context,
    prefix: str | None,
    task: str | None,
    label: str | None,
    state: str | None,
    health: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List the schedules, by name, with their health."""
    if state is not None and state not in LS_STATES:
        raise ValidationError("state", state, f"one of {', '.join(LS_STATES)}")
    if health is not None and health not in set(Health):
        raise ValidationError("health", health, f"one of {', '.join(Health)}")
    wanted = LS_STATES[state] if state else {}
    api = _bridge(ctx)
    schedules: list[Schedule] = []
    cursor = None
    while limit is None or len(schedules) < limit:
        size = PAGE_DEFAULT if limit is None else min(PAGE_DEFAULT * 10, limit - len(schedules))
        page = api.schedules(
            prefix=prefix,
            task=task,
            label=label,
            enabled=wanted.get("enabled"),
            paused=wanted.get("paused"),
            broken=wanted.get("broken"),
            late=wanted.get("late"),
            failing=wanted.get("failing"),
            cursor=cursor,
            limit=size,
        )
        schedules.extend(s for s in page.items if health is None or s.health == health)
        if page.next is None:
            break
        cursor = page.next
    if as_json:
        echo_json([s.to_json() for s in schedules])
        return
    echo_table(
        [
            "NAME",
            "TASK",
            "TIMER",
            "ENABLED",
            "HEALTH",
            "NEXT RUN",
            "LAST RUN",
            "STATUS",
            "LABELS",
            "NOTE",
        ],
        [
            [
                s.name,
                s.task,
                s.timer,
                state_text(s),
                s.health,
                next_run_text(s) if s.enabled else "-",
                local(s.last_run_at),
                s.last_status or "-",
                labels_text(s),
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
        click.echo(f"{key:16} {_field_text(schedule, key, value)}")


#: Columns holding a duration in seconds.
DURATION_COLUMNS = frozenset({"catchup_window", "jitter", "grace", "max_runtime"})


def _field_text(schedule: Schedule, key: str, value: Any) -> str:
    """One field of ``show``: times local, durations as written, JSON as JSON."""
    if key == "nextrun":
        return next_run_text(schedule)
    if isinstance(getattr(schedule, key), datetime):
        return local(getattr(schedule, key))
    if key in DURATION_COLUMNS:
        return duration_text(value)
    if value is None:
        return "-"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _one_or_label(name: str | None, label: str | None, command: str) -> None:
    if (name is None) == (label is None):
        raise click.UsageError(f"{command}: expected a NAME or --label LABEL (one of them)")


@bridge.command()
@click.argument("name", required=False)
@click.option("--label", help="Pause every enabled schedule carrying this label instead.")
@click.option("--note", help="Why it is paused; shown by ls and show.")
@click.pass_context
@fails_in_one_line
def pause(ctx: click.Context, name: str | None, label: str | None, note: str | None) -> None:
    """Stop firing a schedule (or every schedule with a label) until it is resumed."""
    _one_or_label(name, label, "pause")
    if label is not None:
        paused = _bridge(ctx).pause_label(label, note)
        click.echo(f"paused {len(paused)} schedule(s) labelled {label}")
        return
    assert name is not None
    _bridge(ctx).pause(name, note)
    click.echo(f"paused {name}")


@bridge.command()
@click.argument("name", required=False)
@click.option("--label", help="Resume every paused or broken schedule carrying this label.")
@click.option(
    "--from",
    "from_",
    default="now",
    show_default=True,
    metavar="now|catchup",
    help="now: from the next occurrence after now (what fell due while paused is not run); "
    "catchup: from where it stopped, catching up the missed occurrences as its catch-up "
    "policy says.",
)
@click.pass_context
@fails_in_one_line
def resume(ctx: click.Context, name: str | None, label: str | None, from_: str) -> None:
    """Fire a paused or broken schedule again; clears its note, breaker and retries."""
    _one_or_label(name, label, "resume")
    if label is not None:
        resumed = _bridge(ctx).resume_label(label, from_)
        click.echo(f"resumed {len(resumed)} schedule(s) labelled {label}")
        return
    assert name is not None
    schedule = _bridge(ctx).resume(name, from_)
    click.echo(f"resumed {name}: next run {next_run_text(schedule)}")


@bridge.command(name="rm")
@click.argument("name")
@click.pass_context
@fails_in_one_line
def remove(ctx: click.Context, name: str) -> None:
    """Delete a schedule and its run history."""
    _bridge(ctx).remove(name)
    click.echo(f"removed {name}")


#: ``--overlap`` of the runs sent by hand (run and backfill).
manual_overlap_option = click.option(
    "--overlap",
    default="allow",
    show_default=True,
    metavar="allow|skip|replace",
    help="While a run of the schedule is not final: allow (send anyway), skip (refuse) or "
    "replace (revoke the open runs first).",
)


@bridge.command()
@click.argument("name")
@manual_overlap_option
@click.pass_context
@fails_in_one_line
def run(ctx: click.Context, name: str, overlap: str) -> None:
    """Send a run of a schedule now, whatever its timer says."""
    record = _bridge(ctx).run(name, overlap)
    click.echo(f"sent {name}: task id {record.id}")


@bridge.command()
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="TIME",
    help="First instant of the range, ISO-8601 with offset (included).",
)
@click.option(
    "--to",
    "end",
    required=True,
    metavar="TIME",
    help="Last instant of the range, ISO-8601 with offset (included; not later than now).",
)
@manual_overlap_option
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=WholeNumber(),
    help="Refuse a range with more occurrences than this.",
)
@click.pass_context
@fails_in_one_line
def backfill(ctx: click.Context, name: str, start: str, end: str, overlap: str, limit: int) -> None:
    """Send the occurrences of a schedule's timer in a past range, once each.

    An occurrence already recorded (by beat or an earlier backfill) is not sent again.
    """
    result = _bridge(ctx).backfill(name, start, end, overlap=overlap, limit=limit)
    sent = len(result.created)
    click.echo(
        f"backfilled {name}: {sent} run{'' if sent == 1 else 's'} sent, "
        f"{result.existing} already recorded"
    )


@bridge.command()
@click.argument("name", required=False)
@click.option("--status", metavar="S[,S]", help="Only runs with these statuses (SUCCESS,FAILURE).")
@click.option(
    "--trigger", metavar="T[,T]", help="Only runs with these triggers (scheduled,manual)."
)
@click.option("--since", metavar="TIME", help="Only runs planned at or after this ISO-8601 time.")
@click.option("--until", metavar="TIME", help="Only runs planned before this ISO-8601 time.")
@click.option("--limit", default=20, show_default=True, type=WholeNumber(), help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def history(
    ctx: click.Context,
    name: str | None,
    status: str | None,
    trigger: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The runs of a schedule (or of every schedule), newest first."""
    runs = (
        _bridge(ctx)
        .runs(name, status=status, trigger=trigger, since=since, until=until, limit=limit)
        .items
    )
    if as_json:
        echo_json([r.to_json() for r in runs])
        return
    echo_table(
        [
            *([] if name else ["SCHEDULE"]),
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
        [[*([] if name else [r.schedule or "-"]), *_history_row(r)] for r in runs],
    )


@bridge.command()
@click.argument("run_id")
@click.option(
    "--terminate",
    is_flag=True,
    help="End the run with SIGTERM where it already executes (prefork pool); without it "
    "an executing run finishes, unrecorded.",
)
@click.option("--note", help="Why; kept in the run's record and the audit log.")
@click.pass_context
@fails_in_one_line
def cancel(ctx: click.Context, run_id: str, terminate: bool, note: str | None) -> None:
    """Cancel a run that has not ended: recorded REVOKED and revoked on every worker."""
    run = _bridge(ctx).cancel(run_id, terminate=terminate, note=note)
    click.echo(f"cancelled run {run.id} of {run.schedule or '-'}: {run.status}")


@bridge.command()
@click.argument("run_id")
@click.pass_context
@fails_in_one_line
def retry(ctx: click.Context, run_id: str) -> None:
    """Send a run that ended FAILURE, LOST or REVOKED again, as its next attempt."""
    run = _bridge(ctx).retry(run_id)
    click.echo(f"sent {run.schedule}: attempt {run.attempt}, task id {run.id}")


@bridge.command()
@click.argument("name")
@click.option("--window", default="1d", show_default=True, metavar="DURATION", help="How far back.")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def stats(ctx: click.Context, name: str, window: str, as_json: bool) -> None:
    """A schedule's runs over a window: counts, success rate, durations, lateness."""
    figures = _bridge(ctx).stats(name, window)
    if as_json:
        echo_json(figures.to_json())
        return
    counts = ", ".join(f"{status} {count}" for status, count in sorted(figures.counts.items()))
    rate = "-" if figures.success_rate is None else f"{figures.success_rate:.1%}"
    click.echo(f"{name}: the last {window}, since {local(figures.since)}")
    click.echo(f"  runs           {counts or 'none'}")
    click.echo(f"  success rate   {rate}")
    for title, spread in (("duration", figures.duration), ("start delay", figures.start_delay)):
        click.echo(f"  {title:14} {_spread_text(spread)}")
    click.echo(
        f"  occurrences    skipped {figures.skipped}, missed {figures.missed}; "
        f"alerts {figures.alerts}"
    )
    totals = ", ".join(f"{status} {count}" for status, count in figures.totals.items())
    click.echo(f"  since created  {totals}")


def _spread_text(spread: dict[str, float | None]) -> str:
    if not spread["count"]:
        return "-"
    return "  ".join(
        f"{key} {value:.3f}s" for key in ("p50", "p95", "max") if (value := spread[key]) is not None
    )


@bridge.command()
@click.argument("name", required=False)
@click.option(
    "--limit", default=20, show_default=True, type=WholeNumber(), help="How many entries."
)
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def audit(ctx: click.Context, name: str | None, limit: int, as_json: bool) -> None:
    """Who changed a schedule (or any schedule), when, and what, newest first."""
    entries = _bridge(ctx).audit(name, limit=limit).items
    if as_json:
        echo_json([entry.to_json() for entry in entries])
        return
    rows = [
        [local(e.at), e.actor, e.action, e.schedule_name, e.note or "", _audit_text(e)]
        for e in entries
    ]
    echo_table(["AT", "WHO", "ACTION", "SCHEDULE", "NOTE", "CHANGES"], rows)


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
@click.option(
    "--count",
    default=5,
    show_default=True,
    type=WholeNumber(MAX_FORECAST),
    help=f"How many runs (at most {MAX_FORECAST}).",
)
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def next_runs(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """When beat will send the schedule's next runs, as it will send them.

    Start and end, remaining runs, pause, jitter, retries and catch-up are
    applied as beat applies them; a last line says why no more follow.
    """
    outlook = _bridge(ctx).forecast(name, count)
    if as_json:
        echo_json({"runs": [upcoming_json(run) for run in outlook.runs], "end": outlook.end})
        return
    for run in outlook.runs:
        click.echo("  ".join(filter(None, [local(run.fire_at), _upcoming_text(run)])))
    if outlook.end is not None:
        click.echo(f"no more: {outlook.end}" if outlook.runs else outlook.end)


def _upcoming_text(run: Upcoming) -> str:
    """What ``next`` says of a run beyond its time: why it is sent then, and its jitter window."""
    notes = []
    if run.trigger is Trigger.RETRY:
        notes.append(f"attempt {run.attempt} of {local(run.occurrence)}")
    elif run.trigger is not Trigger.SCHEDULED:
        notes.append(f"{run.trigger.value} of {local(run.occurrence)}")
    elif run.latest > run.occurrence:
        notes.append(f"jitter: {local(run.occurrence)} to {local(run.latest)}")
    if run.after_previous:
        notes.append("once the run before it has ended")
    return "; ".join(notes)


@bridge.command()
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def status(ctx: click.Context, as_json: bool) -> None:
    """The beat instances that tick, the due schedules nobody holds, the worst lateness."""
    report = _bridge(ctx).status()
    if as_json:
        echo_json(report.to_json())
        return
    echo_table(
        ["INSTANCE", "HOST", "PID", "STARTED", "LAST TICK", "SENT"],
        [
            [
                instance.id,
                instance.host,
                str(instance.pid),
                local(instance.started_at),
                f"{report.age(instance.last_tick):.1f}s ago",
                str(instance.sent),
            ]
            for instance in report.instances
        ],
    )
    if not report.instances:
        click.echo("no beat instance is ticking")
    if report.workers:
        click.echo("")
        echo_table(
            ["WORKER", "PID", "STARTED", "LAST SEEN"],
            [
                [w.name, str(w.pid), local(w.started_at), f"{report.age(w.last_seen):.1f}s ago"]
                for w in report.workers
            ],
        )
    click.echo(f"due and unclaimed: {report.due_unclaimed}")
    lateness = report.worst_lateness
    click.echo(f"worst lateness: {'-' if lateness is None else f'{lateness:.1f}s'}")


@bridge.command()
@click.option("--all", "every", is_flag=True, help="Closed incidents too (default: open ones).")
@click.option("--limit", default=20, show_default=True, type=WholeNumber(), help="How many.")
@click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")
@click.pass_context
@fails_in_one_line
def incidents(ctx: click.Context, every: bool, limit: int, as_json: bool) -> None:
    """Schedules gone wrong (late, overrun, failing, broken, missed) and no-beat spells."""
    found = _bridge(ctx).incidents(open_only=not every, limit=limit).items
    if as_json:
        echo_json([incident.to_json() for incident in found])
        return
    echo_table(
        ["ID", "KIND", "SCHEDULE", "SINCE", "CLOSED", "ALERTS", "ACK", "WHAT"],
        [
            [
                str(i.id),
                i.kind,
                i.schedule_name or "-",
                local(i.since or i.opened_at),
                local(i.closed_at),
                str(i.alerts),
                i.acknowledged_by or "-",
                i.message,
            ]
            for i in found
        ],
    )


@bridge.command()
@click.argument("incident_id", metavar="INCIDENT", type=WholeNumber())
@click.pass_context
@fails_in_one_line
def ack(ctx: click.Context, incident_id: int) -> None:
    """Acknowledge an incident: its alert is not repeated; its recovery still goes."""
    incident = _bridge(ctx).acknowledge(incident_id)
    click.echo(f"acknowledged incident {incident.id} ({incident.kind} of {incident.schedule_name})")


@bridge.command()
@click.argument("name")
@click.option("--for", "for_", metavar="DURATION", help="How long (default: until --off).")
@click.option("--off", is_flag=True, help="Send its alerts again.")
@click.pass_context
@fails_in_one_line
def silence(ctx: click.Context, name: str, for_: str | None, off: bool) -> None:
    """Send no alert about a schedule (its incidents are still recorded)."""
    api = _bridge(ctx)
    if off:
        api.unsilence(name)
        click.echo(f"alerts of {name} on")
        return
    schedule = api.silence(name, for_)
    until = "until --off" if for_ is None else f"until {local(schedule.silenced_until)}"
    click.echo(f"alerts of {name} silenced {until}")


@bridge.command()
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@click.pass_context
@fails_in_one_line
def prune(ctx: click.Context, dry_run: bool) -> None:
    """Remove old final runs now, as beat does over time (bridge_history_keep_runs/days).

    Never removed: a run that has not ended, and the latest run of each final status.
    """
    done = _bridge(ctx).prune(dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {done.runs} run(s); {done.schedules} schedule(s) checked")


#: What the audit table shows of a new schedule; the rest is in ``--json``.
CREATED_SHOWN = ("task", "timer", "timezone", "labels")


def _audit_text(entry: AuditRecord) -> str:
    """One line of what an audit entry changed: ``field: old -> new`` for an edit."""
    shown = entry.to_json()
    before, after = shown["before"] or {}, shown["after"] or {}
    if entry.action == "create":
        after = {key: after[key] for key in CREATED_SHOWN if after.get(key)}
    elif entry.action == "delete":
        return "deleted"
    return ", ".join(
        f"{key}: {json.dumps(before[key])} -> {json.dumps(value)}"
        if key in before
        else f"{key}: {json.dumps(value)}"
        for key, value in after.items()
    )


@bridge.command()
@click.option(
    "--beat-timeout",
    type=float,
    metavar="SECONDS",
    help="How recent a beat's last tick must be (default: bridge_lease_seconds).",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_context
@fails_in_one_line
def health(ctx: click.Context, beat_timeout: float | None, as_json: bool) -> None:
    """Exit 0 when a beat ticks and the schema is the latest, 1 otherwise (a liveness probe)."""
    report = _bridge(ctx).health(beat_timeout)
    if as_json:
        echo_json(report.to_json())
    elif report.ok:
        ages = [report.status.age(i.last_tick) for i in report.status.instances]
        click.echo(f"ok: schema {report.revision}, a beat ticked {min(ages):.1f}s ago")
    for problem in report.problems():
        if not as_json:
            click.echo(f"unhealthy: {problem}", err=True)
    if not report.ok:
        ctx.exit(1)


@bridge.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8555, show_default=True, type=WholeNumber(65535), help="Port.")
@click.option(
    "--workers", default=1, show_default=True, type=WholeNumber(64), help="Server processes."
)
@click.pass_context
@fails_in_one_line
def serve(ctx: click.Context, host: str, port: int, workers: int) -> None:
    """Serve the dashboard, the HTTP API, /metrics, /healthz and /readyz.

    Without an API token configured it listens on a loopback address only.
    """
    try:
        from bridge.manage.web.server import serve as run_server
    except ImportError as exc:
        raise NeedsExtra("bridge serve", "web", exc) from None
    root = ctx.find_root()
    run_server(_bridge(ctx), host, port, workers, app_path=root.params.get("app"))


@bridge.command(name="import")
@click.argument("source", metavar="FILE|URL")
@click.option(
    "--from",
    "from_",
    type=click.Choice(SOURCES),
    help="Read URL, the store of this scheduler, instead of a JSON Lines FILE.",
)
@click.option("--schema", help="--from sqlalchemy-celery-beat: the schema of its tables.")
@click.option(
    "--prefix",
    default=REDBEAT_PREFIX,
    show_default=True,
    help="--from redbeat: the key prefix (its redbeat_key_prefix).",
)
@click.option(
    "--source-timezone",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="--from: the zone of times stored without one (Django's TIME_ZONE when USE_TZ is off).",
)
@click.option(
    "--approximate",
    is_flag=True,
    help="--from: import what the bridge cannot hold exactly too, naming the difference.",
)
@click.option(
    "--disable-source",
    is_flag=True,
    help="--from: disable each imported schedule in the source, and enable it here.",
)
@click.option(
    "--paused", is_flag=True, help="--from: create the schedules paused (to look before switching)."
)
@click.option(
    "--dry-run", is_flag=True, help="Check every line and report what it would do; write nothing."
)
@click.option(
    "--all-or-nothing",
    is_flag=True,
    help="Write nothing if any line is refused (default: write the lines that are valid).",
)
@click.option(
    "--allow-unknown-task",
    is_flag=True,
    help="Accept task names this app does not register (only the workers import them).",
)
@click.pass_context
@fails_in_one_line
def import_(
    ctx: click.Context,
    source: str,
    from_: str | None,
    schema: str | None,
    prefix: str,
    source_timezone: str,
    approximate: bool,
    disable_source: bool,
    paused: bool,
    dry_run: bool,
    all_or_nothing: bool,
    allow_unknown_task: bool,
) -> None:
    """Create or update schedules from JSON Lines (FILE, or - for standard input).

    One schedule per line, with the fields of add; a name that exists is
    updated as edit would. Each refused line is reported with its number and
    the exit status is 1.

    With --from, read the schedules of django-celery-beat or
    sqlalchemy-celery-beat (a database URL) or RedBeat (a Redis URL) instead,
    with their last runs; --dry-run then shows each schedule's next 10 fire
    times as the source computes them and as the bridge will.
    """
    if from_ is not None:
        _import_from(
            ctx, from_, source, schema, prefix, source_timezone, approximate,
            disable_source, paused, dry_run, allow_unknown_task,
        )  # fmt: skip
        return
    with click.open_file(source, "rb") as file:
        report = import_schedules(
            _bridge(ctx),
            file,
            allow_unknown_task=allow_unknown_task,
            all_or_nothing=all_or_nothing,
            dry_run=dry_run,
        )
    for refusal in report.refusals:
        click.echo(f"line {refusal.line}: {refusal.reason}", err=True)
    if dry_run:
        click.echo(f"dry run, nothing written: {report.summary()}")
    elif not report.written:
        click.echo(f"nothing written (--all-or-nothing): {report.summary()}")
    else:
        click.echo(report.summary())
    if report.refusals:
        ctx.exit(1)


def _import_from(
    ctx: click.Context,
    from_: str,
    url: str,
    schema: str | None,
    prefix: str,
    source_timezone: str,
    approximate: bool,
    disable_source: bool,
    paused: bool,
    dry_run: bool,
    allow_unknown_task: bool,
) -> None:
    zone = check_timezone(source_timezone)
    report = import_from(
        _bridge(ctx), from_, url, schema=schema, prefix=prefix, source_timezone=zone,
        approximate=approximate, disable_source=disable_source, paused=paused,
        allow_unknown_task=allow_unknown_task, dry_run=dry_run,
    )  # fmt: skip
    for candidate in report.candidates:
        if dry_run:
            _echo_side_by_side(candidate)
        elif candidate.refusal is None and candidate.approximations:
            click.echo(f"approximated {candidate.name}: {'; '.join(candidate.approximations)}")
    for candidate in report.refused:
        click.echo(f"refused {candidate.name}: {candidate.refusal}", err=True)
    done = report.summary()
    if disable_source and not dry_run:
        done += f"; disabled in the source {report.disabled}"
    click.echo(f"dry run, nothing written: {done}" if dry_run else done)
    if report.refused:
        ctx.exit(1)


def _echo_side_by_side(candidate: Candidate) -> None:
    """A schedule's next fire times by the source's Celery schedule and by the bridge."""
    verdict = "refused" if candidate.refusal is not None else candidate.action or "-"
    if candidate.refusal is None and candidate.approximations:
        verdict += ", approximated"
    click.echo(f"{candidate.name}  {candidate.shown}  [{verdict}]")
    if not candidate.source_times and not candidate.bridge_times:
        click.echo(f"    {candidate.note or candidate.refusal or 'nothing to fire'}")
        return
    width = 27
    click.echo(f"    {'source (Celery)':<{width}}  bridge")
    rows = max(len(candidate.source_times), len(candidate.bridge_times))
    for index in range(rows):
        theirs = candidate.source_times[index] if index < len(candidate.source_times) else None
        ours = candidate.bridge_times[index] if index < len(candidate.bridge_times) else None
        flag = "" if theirs == ours else "  <- differs"
        click.echo(f"    {local(theirs):<{width}}  {local(ours)}{flag}")


@bridge.command(name="export")
@click.argument("target", metavar="[FILE]", default="-", type=click.File("w", encoding="utf-8"))
@click.pass_context
@fails_in_one_line
def export(ctx: click.Context, target: TextIO) -> None:
    """Write every schedule as JSON Lines, ordered by name (FILE, or standard output).

    The definition and policies only, not the runtime state: import reads it back.
    """
    for line in export_schedules(_bridge(ctx)):
        target.write(line + "\n")
