"""Whether beat may fire against the store's schema, asked as it starts and while it runs.

A beat of one release against a schema behind it would fail on every
statement that names a newer column, and one against a schema a later
release migrated could write what that release no longer reads. So beat
asks (:mod:`bridge.rules.releases`) before its first fire and every
:data:`CHECK_INTERVAL` after, and fires nothing unless the answer is yes:

* behind or ahead: beat stops, with one line naming the database's revision,
  the one this release expects, and what to run, and exits with status
  :data:`REFUSED_STATUS`, found as it starts or while it runs;
* no tables yet (beat started before ``migrate``): it waits, saying so once,
  and starts firing when the schema appears. Until then a schema behind is
  the migration it waits for under way (on SQLite and MySQL every migration
  is seen as it commits), not a refusal;
* no answer (an outage): the tick's own work meets the outage and backs off,
  and the question is asked again when the database is back.
"""

from __future__ import annotations

import logging
import time

from bridge.errors import BridgeError
from bridge.rules.releases import Fit
from bridge.storage.database import Database, DatabaseError, SchemaMismatch
from bridge.version import __version__

logger = logging.getLogger("bridge.scheduler")

#: Seconds between two checks of a schema that matched: a later release migrating the
#: store under a running beat is seen within this.
CHECK_INTERVAL = 60.0
#: Beat's exit status when it stops on a schema it does not match: a failure to a process
#: manager, like every refusal of a setting as beat starts.
REFUSED_STATUS = 1


class SchemaPending(BridgeError):
    """The store has no bridge tables yet: beat waits for ``migrate``."""


class SchemaWatch:
    """Asks whether this release may run against the store, at most every
    :data:`CHECK_INTERVAL` once it may."""

    def __init__(self, database: Database, release: str = __version__) -> None:
        self.database = database
        self.release = release
        #: ``time.monotonic()`` of the next check; 0: before the next tick.
        self._due = 0.0
        #: The mismatch that stopped beat while it ran, if one did.
        self.refused: SchemaMismatch | None = None
        #: Whether beat met a store with no tables and waits for its first ``migrate``.
        self._awaiting_migrate = False
        #: Whether the last answer was yes: until then the watchdog waits too, so that a
        #: beat started before ``migrate`` meets no half-made table (a migration under way).
        self.matched = False

    def at_start(self) -> None:
        """Refuse (:class:`SchemaMismatch`) a schema behind or ahead of this release. One that
        is missing, or a database that does not answer, is left to the ticks."""
        try:
            self.check()
        except (SchemaPending, DatabaseError):
            self._due = 0.0

    def before_tick(self) -> None:
        """Check when due; a mismatch is logged as one line, kept in :attr:`refused` and
        ends beat (``SystemExit``), a missing schema raises :class:`SchemaPending` for the
        tick's guard to wait on."""
        if time.monotonic() < self._due:
            return
        try:
            self.check()
        except SchemaMismatch as exc:
            logger.critical("bridge: %s; beat stops", exc)
            self.refused = exc
            raise SystemExit(REFUSED_STATUS) from None

    def check(self) -> None:
        """Ask once: :class:`SchemaMismatch` (behind or ahead), :class:`SchemaPending`
        (no tables), a database error (no answer), or nothing and the next check timed."""
        try:
            self.database.require_schema(self.release)
        except SchemaMismatch as exc:
            migrating = self._awaiting_migrate and exc.fit is Fit.BEHIND
            if exc.fit is Fit.EMPTY or migrating:
                self._awaiting_migrate = True
                self.matched = False
                raise SchemaPending(f"{exc}; waiting for it") from None
            raise
        self._awaiting_migrate = False
        self.matched = True
        self._due = time.monotonic() + CHECK_INTERVAL

    def recheck(self) -> None:
        """Ask again before the next tick: the database was lost, and may come back as
        another (a restore, a failover to a replica of another release's store)."""
        self._due = 0.0
