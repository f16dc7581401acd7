"""``celery -A APP bridge ...``: the management commands, over :class:`bridge.Bridge`.

Celery finds the ``bridge`` group through the ``celery.commands`` entry
point ``bridge.manage.cli:bridge``, in every process it starts: the group
imports a command's module only when the command runs or is listed
(:class:`.group.LazyGroup`). Its commands live in one module per kind of
work: :mod:`.schedules`, :mod:`.runs`, :mod:`.health`,
:mod:`.transfer` (import and export), :mod:`.service` (migrate and
serve), :mod:`.tokens` (the HTTP server's named tokens) and
:mod:`.calendars` (the calendars schedules skip); what they
share, in :mod:`.command` (the bridge they act through,
failures in one line), :mod:`.group` (the groups), :mod:`.options`, :mod:`.types` and
:mod:`.formatting`.

Times are shown in the local zone with their UTC offset; ``--json`` gives
ISO-8601 UTC. Every failure exits non-zero with a one-line reason.
"""

from __future__ import annotations

import click

from bridge.manage.cli.group import LazyGroup
from bridge.version import DISTRIBUTION, __version__

#: Each command of the group, and the module that holds it (imported when it runs).
COMMAND_MODULES = {
    **dict.fromkeys(("add", "edit", "rm", "ls", "show", "pause", "resume", "audit"), "schedules"),
    **dict.fromkeys(
        ("run", "backfill", "history", "cancel", "retry", "next", "stats", "prune"), "runs"
    ),
    **dict.fromkeys(("status", "health", "incidents", "ack", "silence"), "health"),
    **dict.fromkeys(("import", "export"), "transfer"),
    **dict.fromkeys(("migrate", "serve"), "service"),
    "token": "tokens",
    "calendar": "calendars",
}


@click.group(name="bridge", cls=LazyGroup, modules=COMMAND_MODULES)
# Left out of --help, whose listing docs/cli.md shows as it is; docs/operations.md names it.
@click.version_option(__version__, "--version", message=f"{DISTRIBUTION} %(version)s", hidden=True)
def bridge() -> None:
    """Manage the bridge's schedules and read their runs."""


__all__ = ["COMMAND_MODULES", "bridge"]
