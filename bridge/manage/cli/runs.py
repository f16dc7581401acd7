"""The commands of runs: send them by hand (``run``, ``backfill``, ``retry``), end them
(``cancel``), foresee them (``next``), read them (``history``, ``stats``) and remove the
old ones (``prune``)."""

from __future__ import annotations

import click

from bridge.manage.api import MAX_FORECAST, Run, upcoming_json
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import echo_json, echo_table, local
from bridge.manage.cli.options import json_option
from bridge.manage.cli.types import WholeNumber
from bridge.rules.decisions import Upcoming
from bridge.rules.kinds import Trigger

#: ``--overlap`` of the runs sent by hand (run and backfill).
manual_overlap_option = click.option(
    "--overlap",
    default="allow",
    show_default=True,
    metavar="allow|skip|replace",
    help="While a run of the schedule is not final: allow (send anyway), skip (refuse) or "
    "replace (revoke the open runs first).",
)


@click.command()
@click.argument("name")
@manual_overlap_option
@click.pass_context
@fails_in_one_line
def run(ctx: click.Context, name: str, overlap: str) -> None:
    """Send a run of a schedule now, whatever its timer says."""
    record = bridge_of(ctx).run(name, overlap)
    click.echo(f"sent {name}: task id {record.id}")


@click.command()
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
    result = bridge_of(ctx).backfill(name, start, end, overlap=overlap, limit=limit)
    sent = len(result.created)
    click.echo(
        f"backfilled {name}: {sent} run{'' if sent == 1 else 's'} sent, "
        f"{result.existing} already recorded"
        + (f", {result.excluded} on its calendars" if result.excluded else "")
    )


@click.command()
@click.argument("name", required=False)
@click.option("--status", metavar="S[,S]", help="Only runs with these statuses (SUCCESS,FAILURE).")
@click.option(
    "--trigger", metavar="T[,T]", help="Only runs with these triggers (scheduled,manual)."
)
@click.option("--since", metavar="TIME", help="Only runs planned at or after this ISO-8601 time.")
@click.option("--until", metavar="TIME", help="Only runs planned before this ISO-8601 time.")
@click.option("--limit", default=20, show_default=True, type=WholeNumber(), help="How many runs.")
@json_option
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
        bridge_of(ctx)
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


@click.command()
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
    run = bridge_of(ctx).cancel(run_id, terminate=terminate, note=note)
    click.echo(f"cancelled run {run.id} of {run.schedule or '-'}: {run.status}")


@click.command()
@click.argument("run_id")
@click.pass_context
@fails_in_one_line
def retry(ctx: click.Context, run_id: str) -> None:
    """Send a run that ended FAILURE, LOST or REVOKED again, as its next attempt."""
    run = bridge_of(ctx).retry(run_id)
    click.echo(f"sent {run.schedule}: attempt {run.attempt}, task id {run.id}")


@click.command(name="next")
@click.argument("name")
@click.option(
    "--count",
    default=5,
    show_default=True,
    type=WholeNumber(MAX_FORECAST),
    help=f"How many runs (at most {MAX_FORECAST}).",
)
@json_option
@click.pass_context
@fails_in_one_line
def next_runs(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """When beat will send the schedule's next runs, as it will send them.

    Start and end, remaining runs, pause, jitter, retries and catch-up are
    applied as beat applies them; a last line says why no more follow.
    """
    outlook = bridge_of(ctx).forecast(name, count)
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


@click.command()
@click.argument("name")
@click.option("--window", default="1d", show_default=True, metavar="DURATION", help="How far back.")
@json_option
@click.pass_context
@fails_in_one_line
def stats(ctx: click.Context, name: str, window: str, as_json: bool) -> None:
    """A schedule's runs over a window: counts, success rate, durations, lateness."""
    figures = bridge_of(ctx).stats(name, window)
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


@click.command()
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@click.pass_context
@fails_in_one_line
def prune(ctx: click.Context, dry_run: bool) -> None:
    """Remove old final runs now, as beat does over time (bridge_history_keep_runs/days).

    Never removed: a run that has not ended, and the latest run of each final status.
    """
    done = bridge_of(ctx).prune(dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {done.runs} run(s); {done.schedules} schedule(s) checked")


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (run, backfill, history, cancel, retry, next_runs, stats, prune)
