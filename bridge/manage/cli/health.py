"""The commands that watch the scheduler: ``status`` and ``health`` (its beats, workers and
schema), ``incidents`` and ``ack`` (what went wrong), ``silence`` (a schedule's alerts)."""

from __future__ import annotations

import click

from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import echo_json, echo_table, local
from bridge.manage.cli.options import json_option
from bridge.manage.cli.types import WholeNumber


@click.command()
@json_option
@click.pass_context
@fails_in_one_line
def status(ctx: click.Context, as_json: bool) -> None:
    """The beat instances that tick, the due schedules nobody holds, the worst lateness."""
    report = bridge_of(ctx).status()
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


@click.command()
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
    report = bridge_of(ctx, check_schema=False).health(beat_timeout)
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


@click.command()
@click.option("--all", "every", is_flag=True, help="Closed incidents too (default: open ones).")
@click.option("--limit", default=20, show_default=True, type=WholeNumber(), help="How many.")
@json_option
@click.pass_context
@fails_in_one_line
def incidents(ctx: click.Context, every: bool, limit: int, as_json: bool) -> None:
    """Schedules gone wrong (late, overrun, failing, broken, missed) and no-beat spells."""
    found = bridge_of(ctx).incidents(open_only=not every, limit=limit).items
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


@click.command()
@click.argument("incident_id", metavar="INCIDENT", type=WholeNumber())
@click.pass_context
@fails_in_one_line
def ack(ctx: click.Context, incident_id: int) -> None:
    """Acknowledge an incident: its alert is not repeated; its recovery still goes."""
    incident = bridge_of(ctx).acknowledge(incident_id)
    click.echo(f"acknowledged incident {incident.id} ({incident.kind} of {incident.schedule_name})")


@click.command()
@click.argument("name")
@click.option("--for", "for_", metavar="DURATION", help="How long (default: until --off).")
@click.option("--off", is_flag=True, help="Send its alerts again.")
@click.pass_context
@fails_in_one_line
def silence(ctx: click.Context, name: str, for_: str | None, off: bool) -> None:
    """Send no alert about a schedule (its incidents are still recorded)."""
    api = bridge_of(ctx)
    if off:
        api.unsilence(name)
        click.echo(f"alerts of {name} on")
        return
    schedule = api.silence(name, for_)
    until = "until --off" if for_ is None else f"until {local(schedule.silenced_until)}"
    click.echo(f"alerts of {name} silenced {until}")


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (status, health, incidents, ack, silence)
