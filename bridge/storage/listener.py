"""Waking beat when a schedule changes, instead of at its next look at the table.

On PostgreSQL, migration 0005 makes every change that can make a schedule
due sooner (a row added, edited, resumed, or woken by a worker) notify the
channel :data:`CHANNEL`. Beat sleeps in :meth:`ChangeListener.wait` on a
connection that listens to it, so such a change ends the sleep at once.
SQLite has no notifications: there beat sleeps for the poll interval at most.
"""

from __future__ import annotations

import logging
import selectors
import time

import psycopg
from sqlalchemy.exc import DBAPIError

from bridge.storage.database import Database, close_quietly

logger = logging.getLogger("bridge.changes")

#: The notification channel; the triggers of migration 0005 notify it.
CHANNEL = "bridge_periodic_task"


class ChangeListener:
    """A dedicated connection listening for schedule changes, reopened when it breaks.

    It is kept out of the connection pool: it stays in ``LISTEN`` for the
    life of beat, and notifications queue on it between two waits, so a
    change made while beat fires is not missed.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True if a change ended the sleep.

        Notifications that queued up meanwhile are consumed together. Without
        a connection (the database is down) this sleeps the whole timeout.
        A connection that starts listening now answers True at once, without
        sleeping: a change made before its ``LISTEN`` (since beat started, or
        while the connection was lost) was never notified, so the caller must
        look at the table again, now that later changes will be.
        """
        try:
            fresh = self._connection is None or self._connection.closed
            connection = self._connected()
            if fresh:
                return True
            # Wait on the socket here: psycopg's own wait wakes every 0.1 s (to let Ctrl-C
            # in), ten times a second of Python for a beat at rest. Every notification is
            # consumed below, so none waits in the driver's buffer while this sleeps.
            with selectors.DefaultSelector() as selector:  # any descriptor, not below 1024
                selector.register(connection.fileno(), selectors.EVENT_READ)
                readable = selector.select(max(timeout, 0.0))
            return bool(readable) and bool(list(connection.notifies(timeout=0.0)))
        except (psycopg.Error, DBAPIError) as exc:  # DBAPIError: from the engine's connect
            logger.debug("bridge: change listener lost its connection: %s", exc)
            self.close()
            time.sleep(max(timeout, 0.0))
            return False

    def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            close_quietly(connection, "the change listener")

    def _connected(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._connection is None or self._connection.closed:
            connection = self.database.own_connection()
            connection.execute(f"LISTEN {CHANNEL}")
            self._connection = connection
        return self._connection
