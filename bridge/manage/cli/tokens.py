"""``bridge token create|ls|revoke``: the named tokens of the HTTP server.

A token's secret is printed once, by ``create``, on a line of its own (so
that a script can take it with ``tail -n 1``); the store keeps only its
digest, and no other command or log shows it again.
"""

from __future__ import annotations

import click

from bridge.clock import utcnow
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.formatting import echo_json, echo_table, local
from bridge.manage.cli.group import OneLineGroup
from bridge.manage.cli.options import json_option


@click.group(cls=OneLineGroup)
def token() -> None:
    """Named tokens of the HTTP API and the dashboard: create, list, revoke."""


@token.command()
@click.argument("name")
@click.option(
    "--role",
    required=True,
    metavar="read|admin",
    help="read: the API's reads and /metrics; admin: every change too.",
)
@click.option(
    "--expires", metavar="DURATION", help="Stop working after this long (90d, 12h); default never."
)
@click.pass_context
@fails_in_one_line
def create(ctx: click.Context, name: str, role: str, expires: str | None) -> None:
    """Make a token and print its secret, once: the bridge keeps only its digest."""
    made, secret = bridge_of(ctx).create_token(name, role, expires)
    until = "never expires" if made.expires_at is None else f"expires {local(made.expires_at)}"
    click.echo(f"created token {made.name} ({made.role}, {until}); its secret, shown only now:")
    click.echo(secret)


@token.command(name="ls")
@json_option
@click.pass_context
@fails_in_one_line
def list_tokens(ctx: click.Context, as_json: bool) -> None:
    """List the tokens: name, role, created, expires, last used, revoked (never a secret)."""
    found = bridge_of(ctx).tokens()
    now = utcnow()
    if as_json:
        echo_json([{**made.to_json(), "state": made.state(now)} for made in found])
        return
    echo_table(
        ["NAME", "ROLE", "STATE", "CREATED", "EXPIRES", "LAST USED", "REVOKED", "BY"],
        [
            [
                made.name,
                made.role,
                made.state(now),
                local(made.created_at),
                local(made.expires_at),
                local(made.last_used_at),
                local(made.revoked_at),
                made.created_by,
            ]
            for made in found
        ],
    )


@token.command()
@click.argument("name")
@click.pass_context
@fails_in_one_line
def revoke(ctx: click.Context, name: str) -> None:
    """Stop a token working, at once: its requests and its dashboard sessions are refused."""
    revoked = bridge_of(ctx).revoke_token(name)
    click.echo(f"revoked token {revoked.name} at {local(revoked.revoked_at)}")


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (token,)
