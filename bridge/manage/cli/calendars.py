"""``bridge calendar add|ls|show|rm``: named days and times schedules skip.

A schedule names the calendars it skips with ``--skip-calendar NAME`` (``add``,
``edit``); an occurrence that falls on one is not sent and is counted as
excluded, and ``bridge next`` leaves it out.
"""

from __future__ import annotations

import click

from bridge.manage.api import CalendarInfo
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import echo_json, echo_table, local
from bridge.manage.cli.group import OneLineGroup
from bridge.manage.cli.options import json_option
from bridge.manage.fields import CALENDAR_HELP


@click.group(cls=OneLineGroup)
def calendar() -> None:
    """Calendars of days and times that schedules skip: add, list, show, remove."""


@calendar.command()
@click.argument("name")
@click.option("--dates", metavar="D,D,...", help=CALENDAR_HELP["dates"])
@click.option("--range", "ranges", multiple=True, metavar="START/END", help=CALENDAR_HELP["ranges"])
@click.option("--cron", metavar="EXPR", help=CALENDAR_HELP["cron"])
@click.option("--timezone", help=CALENDAR_HELP["timezone"])
@click.option("--replace", is_flag=True, help=CALENDAR_HELP["replace"])
@click.pass_context
@fails_in_one_line
def add(
    ctx: click.Context,
    name: str,
    dates: str | None,
    ranges: tuple[str, ...],
    cron: str | None,
    timezone: str | None,
    replace: bool,
) -> None:
    """Make a calendar of dates, ranges or cron-described minutes (exactly one kind)."""
    made = bridge_of(ctx).add_calendar(
        name,
        dates=dates,
        ranges=list(ranges) or None,
        cron=cron,
        timezone=timezone,
        replace=replace,
    )
    click.echo(f"saved calendar {made.name}: {_summary(made)}")


@calendar.command(name="ls")
@json_option
@click.pass_context
@fails_in_one_line
def list_calendars(ctx: click.Context, as_json: bool) -> None:
    """List the calendars: name, kind, zone, what they hold, the schedules that skip them."""
    found = bridge_of(ctx).calendars()
    if as_json:
        echo_json([info.to_json() for info in found])
        return
    echo_table(
        ["NAME", "KIND", "TIMEZONE", "HOLDS", "SKIPPED BY", "UPDATED"],
        [
            [
                info.name,
                info.calendar.kind.value,
                info.calendar.zone.key,
                _summary(info),
                str(len(info.schedules)),
                local(info.updated_at),
            ]
            for info in found
        ],
    )


@calendar.command()
@click.argument("name")
@json_option
@click.pass_context
@fails_in_one_line
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Every date, range or the expression of a calendar, and the schedules that skip it."""
    info = bridge_of(ctx).calendar(name)
    if as_json:
        echo_json(info.to_json())
        return
    click.echo(f"name        {info.name}")
    click.echo(f"kind        {info.calendar.kind.value}")
    click.echo(f"timezone    {info.calendar.zone.key}")
    click.echo(f"created     {local(info.created_at)}")
    click.echo(f"updated     {local(info.updated_at)}")
    click.echo(f"skipped by  {', '.join(info.schedules) or '-'}")
    for entry in info.calendar.entries:
        click.echo(f"  {entry}")


@calendar.command()
@click.argument("name")
@click.pass_context
@fails_in_one_line
def rm(ctx: click.Context, name: str) -> None:
    """Delete a calendar; refused while a schedule skips it."""
    bridge_of(ctx).remove_calendar(name)
    click.echo(f"removed calendar {name}")


def _summary(info: CalendarInfo) -> str:
    """What a calendar holds, in a few words."""
    entries = info.calendar.entries
    if info.calendar.kind.value == "cron":
        return entries[0]
    shown = ", ".join(entries[:3])
    return f"{shown} and {len(entries) - 3} more" if len(entries) > 3 else shown


COMMANDS = (calendar,)
