"""The store's schema made current, on a server that can hold it.

A MySQL or MariaDB server older than the schema and the statements need
would fail in the middle of a migration (or later, of a fire); it is refused
first, in one line naming the version found and those supported
(:func:`bridge.rules.servers.mysql_refusal`). The server's release does not
change between the look and the migration, which then runs under the store's
migration lock (:meth:`bridge.storage.database.Database.migrate`).
"""

from __future__ import annotations

from bridge.errors import BridgeError
from bridge.rules.servers import mysql_refusal
from bridge.storage.database import Database, shown_url


class UnsupportedServer(BridgeError):
    """A MySQL or MariaDB server older than the schema and statements need; the message names
    the version found and those supported."""


def migrate(database: Database, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrade the schema to ``revision`` (see :meth:`Database.migrate`), after refusing a
    server too old to hold it (:class:`UnsupportedServer`)."""
    version = database.mysql_version()
    refusal = None if version is None else mysql_refusal(version)
    if refusal is not None:
        raise UnsupportedServer(f"bridge_database_url ({shown_url(database.url)}): {refusal}")
    return database.migrate(revision)
