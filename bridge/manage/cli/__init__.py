"""``celery -A APP bridge ...``: the management commands, over :class:`bridge.Bridge`.

Celery finds the ``bridge`` group through the ``celery.commands`` entry
point ``bridge.manage.cli:bridge``. Its commands live in one module per
kind of work: :mod:`.schedules`, :mod:`.runs`, :mod:`.health`,
:mod:`.transfer` (import and export), :mod:`.service` (migrate and
serve) and :mod:`.tokens` (the HTTP server's named tokens); what they
share, in :mod:`.command` (the bridge they act through,
failures in one line), :mod:`.options`, :mod:`.types` and
:mod:`.formatting`.

Times are shown in the local zone with their UTC offset; ``--json`` gives
ISO-8601 UTC. Every failure exits non-zero with a one-line reason.
"""

from __future__ import annotations

import click

from bridge.manage.cli import health, runs, schedules, service, tokens, transfer
from bridge.manage.cli.command import OneLineGroup
from bridge.version import DISTRIBUTION, __version__


@click.group(
    name="bridge",
    cls=OneLineGroup,
    commands=[
        *schedules.COMMANDS,
        *runs.COMMANDS,
        *health.COMMANDS,
        *transfer.COMMANDS,
        *service.COMMANDS,
        *tokens.COMMANDS,
    ],
)
# Left out of --help, whose listing docs/cli.md shows as it is; docs/operations.md names it.
@click.version_option(__version__, "--version", message=f"{DISTRIBUTION} %(version)s", hidden=True)
def bridge() -> None:
    """Manage the bridge's schedules and read their runs."""


__all__ = ["bridge"]
