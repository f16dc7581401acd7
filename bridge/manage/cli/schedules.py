"""The commands that create, change, list and show schedules, pause and resume them,
and read who changed them: ``add``, ``edit``, ``rm``, ``ls``, ``show``, ``pause``,
``resume``, ``audit``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from bridge.errors import ValidationError
from bridge.manage.api import PAGE_DEFAULT, STATE_FILTERS, AuditRecord, Schedule
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import (
    duration_text,
    echo_json,
    echo_table,
    labels_text,
    local,
    next_run_text,
    state_text,
)
from bridge.manage.cli.options import (
    definition_options,
    json_option,
    policy_options,
    read_signature,
)
from bridge.manage.cli.types import WholeNumber
from bridge.rules.health import Health
from bridge.rules.timer_base import TIMER_EXPECTED

#: What ``add`` needs besides the name, and what each takes.
REQUIRED = {
    "task": "a Celery task name (or --signature-file with a canvas)",
    "timer": TIMER_EXPECTED,
}


@click.command()
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
    for required, what in REQUIRED.items():
        if required not in definition and not (required == "task" and "signature" in definition):
            raise click.UsageError(f"{required}: got nothing, expected --{required} with {what}")
    definition = read_signature(definition)
    schedule = bridge_of(ctx).add(name, **definition, **policies, enabled=not disabled)
    click.echo(f"added {schedule.name}: next run {next_run_text(schedule)}")


@click.command()
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
            "--signature-file, --args, --kwargs, --timezone, --queue, --labels, --options or a "
            "policy option"
        )
    api = bridge_of(ctx)
    before = api.get(name)
    schedule = api.edit(name, **read_signature(definition), **policies)
    done = "changed" if schedule.updated_at != before.updated_at else "unchanged"
    click.echo(f"{done} {schedule.name}: next run {next_run_text(schedule)}")


@click.command(name="rm")
@click.argument("name")
@click.pass_context
@fails_in_one_line
def remove(ctx: click.Context, name: str) -> None:
    """Delete a schedule and its run history."""
    bridge_of(ctx).remove(name)
    click.echo(f"removed {name}")


@click.command(name="ls")
@click.option("--prefix", help="Only names starting with this.")
@click.option("--task", help="Only schedules of this task.")
@click.option("--label", help="Only schedules carrying this label.")
@click.option("--state", metavar="|".join(STATE_FILTERS), help="Only schedules in this state.")
@click.option("--health", metavar="|".join(Health), help="Only schedules in this health.")
@click.option("--limit", type=WholeNumber(), help="At most this many (default: all).")
@json_option
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
    if state is not None and state not in STATE_FILTERS:
        raise ValidationError("state", state, f"one of {', '.join(STATE_FILTERS)}")
    if health is not None and health not in set(Health):
        raise ValidationError("health", health, f"one of {', '.join(Health)}")
    wanted = STATE_FILTERS[state] if state else {}
    api = bridge_of(ctx)
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
            finished=wanted.get("finished"),
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


@click.command()
@click.argument("name")
@json_option
@click.pass_context
@fails_in_one_line
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show every field of a schedule."""
    schedule = bridge_of(ctx).get(name)
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
    if key == "signature" and value is not None:
        return schedule.canvas or "-"  # in a line; --json gives Celery's JSON form
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


@click.command()
@click.argument("name", required=False)
@click.option("--label", help="Pause every enabled schedule carrying this label instead.")
@click.option("--note", help="Why it is paused; shown by ls and show.")
@click.pass_context
@fails_in_one_line
def pause(ctx: click.Context, name: str | None, label: str | None, note: str | None) -> None:
    """Stop firing a schedule (or every schedule with a label) until it is resumed."""
    _one_or_label(name, label, "pause")
    if label is not None:
        paused = bridge_of(ctx).pause_label(label, note)
        click.echo(f"paused {len(paused)} schedule(s) labelled {label}")
        return
    assert name is not None
    bridge_of(ctx).pause(name, note)
    click.echo(f"paused {name}")


@click.command()
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
        resumed = bridge_of(ctx).resume_label(label, from_)
        click.echo(f"resumed {len(resumed)} schedule(s) labelled {label}")
        return
    assert name is not None
    schedule = bridge_of(ctx).resume(name, from_)
    click.echo(f"resumed {name}: next run {next_run_text(schedule)}")


@click.command()
@click.argument("name", required=False)
@click.option(
    "--limit", default=20, show_default=True, type=WholeNumber(), help="How many entries."
)
@json_option
@click.pass_context
@fails_in_one_line
def audit(ctx: click.Context, name: str | None, limit: int, as_json: bool) -> None:
    """Who changed a schedule (or anything: schedules, tokens), when, and what, newest first."""
    entries = bridge_of(ctx).audit(name, limit=limit).items
    if as_json:
        echo_json([entry.to_json() for entry in entries])
        return
    rows = [
        [local(e.at), e.actor, e.action, e.schedule_name, e.note or "", _audit_text(e)]
        for e in entries
    ]
    echo_table(["AT", "WHO", "ACTION", "SCHEDULE", "NOTE", "CHANGES"], rows)


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


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (add, edit, remove, list_schedules, show, pause, resume, audit)
