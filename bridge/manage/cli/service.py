"""The commands that put the bridge in service: ``migrate`` (its tables) and ``serve`` (the
dashboard, the HTTP API and the probes)."""

from __future__ import annotations

import click

from bridge.extras import NeedsExtra
from bridge.manage.cli.command import bridge_of, fails_in_one_line
from bridge.manage.cli.types import WholeNumber


@click.command()
@click.pass_context
@fails_in_one_line
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the bridge's tables (safe to run again)."""
    api = bridge_of(ctx, check_schema=False)
    before, after = api.migrate()
    where = f"database {api.database.url.split('@')[-1]}"
    if before == after:
        click.echo(f"{where}: already at {after}, nothing to do")
    else:
        click.echo(f"{where}: migrated from {before or 'nothing'} to {after}")


@click.command()
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
    run_server(bridge_of(ctx), host, port, workers, app_path=root.params.get("app"))


#: The commands of this module, for the ``bridge`` group.
COMMANDS = (migrate, serve)
