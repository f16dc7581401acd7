"""The commands that move schedules in and out: ``import`` (JSON Lines, or the store of
django-celery-beat, sqlalchemy-celery-beat or RedBeat) and ``export`` (JSON Lines)."""

from __future__ import annotations

from typing import TextIO

import click

from bridge.manage.bulk import export_schedules, import_schedules
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import local
from bridge.manage.importers import REDBEAT_PREFIX, SOURCES, Candidate, import_from
from bridge.rules.definition import check_timezone


@click.command(name="import")
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
    updated as edit would. A line naming a "calendar" holds one, with the
    fields of calendar add, written as calendar add --replace would. Each
    refused line is reported with its number and the exit status is 1.

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
            bridge_of(ctx),
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
        bridge_of(ctx), from_, url, schema=schema, prefix=prefix, source_timezone=zone,
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


@click.command(name="export")
@click.argument("target", metavar="[FILE]", default="-", type=click.File("w", encoding="utf-8"))
@click.pass_context
@fails_in_one_line
def export(ctx: click.Context, target: TextIO) -> None:
    """Write every calendar, then every schedule, as JSON Lines, ordered by name (FILE, or
    standard output).

    The definition and policies only, not the runtime state: import reads it back.
    """
    for line in export_schedules(bridge_of(ctx)):
        target.write(line + "\n")


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (import_, export)
