"""Which beat instances are alive, as PostgreSQL itself knows it.

Each beat instance holds a session-level advisory lock, keyed on its
identity, on a connection of its own for as long as it runs. When the
process dies — SIGKILL, a crash, the out-of-memory killer — the kernel
closes its socket, PostgreSQL ends the session, and the lock goes with it
within milliseconds. The marks of an instance whose lock is gone are taken
over at the next claim instead of after ``bridge_lease_seconds``: failover
takes a poll interval, not a lease.

The lease stays the fallback for what the database cannot see: a frozen
process (its connection stays open) or a host that vanished from the
network, whose session PostgreSQL ends once TCP keepalives go unanswered
(:data:`KEEPALIVES`). SQLite has no such locks; there the lease is all.
"""

from __future__ import annotations

import logging
import select
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    and_,
    column,
    false,
    func,
    literal,
    or_,
    table,
)
from sqlalchemy import select as query
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from bridge.storage.database import Database, close_quietly
from bridge.storage.models import PeriodicTask
from bridge.storage.sql import is_postgres

if TYPE_CHECKING:  # psycopg is the postgres extra's: SQLite installs do without it
    import psycopg

logger = logging.getLogger("bridge.presence")

#: The first key of every instance lock ("beat"); the second is the hash of the instance.
LOCK_CLASS = 0x62656174

#: Server-side TCP keepalives of the lock's session, in seconds: a host that vanishes
#: without closing its connection loses its lock within idle + interval x count = 11 s.
KEEPALIVES = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 2, "tcp_keepalives_count": 3}

#: How long a refused instance lock is left before it is asked for again, in seconds.
RETRY_SECONDS = 5.0

_pg_locks = table(
    "pg_locks",
    column("locktype"),
    column("database"),
    column("classid"),
    column("objid"),
    column("objsubid"),
    column("granted"),
)
_pg_database = table("pg_database", column("oid"), column("datname"))


def _key_of(instance: Any) -> ColumnElement[int]:
    """The lock's second key for an instance: ``hashtext``, an ``int4``, computed by the server
    both when the lock is taken and when it is looked for."""
    return func.hashtext(instance, type_=Integer)


def _live_keys() -> ColumnElement[int]:
    """The second keys of the instance locks held in this database, as ``bigint``.

    ``pg_locks`` shows the key as an unsigned ``oid``; the hash is a signed
    ``int4``, so both sides are compared as the unsigned 32-bit number.
    """
    here = (
        query(_pg_database.c.oid)
        .where(_pg_database.c.datname == func.current_database())
        .scalar_subquery()
    )
    return query(_pg_locks.c.objid.cast(BigInteger)).where(  # type: ignore[return-value]
        _pg_locks.c.locktype == "advisory",
        _pg_locks.c.database == here,
        _pg_locks.c.classid.cast(BigInteger) == LOCK_CLASS,
        _pg_locks.c.objsubid == 2,
        _pg_locks.c.granted,
    )


def holder_gone(session: Session) -> ColumnElement[bool]:
    """The row's mark belongs to an instance whose lock is gone: it died (PostgreSQL only).

    The live keys are read once per statement (a hashed sub-plan), however
    many marked rows it looks at.
    """
    if not is_postgres(session):
        return false()
    unsigned = _key_of(PeriodicTask.worker).cast(BigInteger).op("&")(literal(0xFFFFFFFF))
    return and_(PeriodicTask.worker.is_not(None), unsigned.not_in(_live_keys().scalar_subquery()))


def claimable(
    session: Session, instance: str | None, lease_start: ColumnElement[object] | object
) -> ColumnElement[bool]:
    """A row nobody holds: unmarked, its mark older than the lease, its holder dead — or,
    with ``instance``, marked by that instance itself (a tick that failed half-way)."""
    free = [
        PeriodicTask.worker.is_(None),
        PeriodicTask.marked < lease_start,
        holder_gone(session),
    ]
    if instance is not None:
        free.append(PeriodicTask.worker == instance)
    return or_(*free)


class InstanceLock:
    """The advisory lock that tells every other instance this one is alive.

    Held on a dedicated connection kept out of the pool. :meth:`hold` is
    called before each claim: it costs no round trip while the connection
    is sound, and takes the lock again on a new connection when the old one
    broke (the database restarted, an administrator ended the session). The
    rows marked meanwhile may have been taken over; every write of the fire
    sequence checks its mark, so that is safe.
    """

    def __init__(self, database: Database, instance: str) -> None:
        self.database = database
        self.instance = instance
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None
        #: When a refused lock may be asked for again (``time.monotonic()``).
        self._retry_at = 0.0

    def hold(self) -> bool:
        """Hold the lock; False while another session holds it.

        That session is this instance's own old one, when the network broke
        and PostgreSQL has not yet noticed (within :data:`KEEPALIVES`), or, once
        in four billion, an instance whose identity hashes alike; the lock is
        asked for again every :data:`RETRY_SECONDS` meanwhile, and the rows
        fail over by the lease alone. Raises the database's error when it
        cannot be reached, as a claim would.
        """
        if self._connection is not None and self._sound(self._connection):
            return True
        self.close()
        if time.monotonic() < self._retry_at:
            return False
        import psycopg

        connection = self.database.own_connection()  # the lock lives as long as it does
        try:
            for name, seconds in KEEPALIVES.items():
                connection.execute("SELECT set_config(%s, %s, false)", (name, str(seconds)))
            taken = connection.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_CLASS, self.instance)
            ).fetchone()
        except psycopg.Error as exc:
            connection.close()
            raise OperationalError("taking the instance lock", None, exc) from exc
        if not taken or not taken[0]:
            connection.close()
            self._retry_at = time.monotonic() + RETRY_SECONDS
            logger.warning(
                "bridge: the instance lock of %s is held by another session; its rows fail"
                " over by the lease until it is free",
                self.instance,
            )
            return False
        self._connection = connection
        return True

    def close(self) -> None:
        """Let the lock go (with its connection)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            close_quietly(connection, "the instance lock's connection")

    @staticmethod
    def _sound(connection: psycopg.Connection[tuple[object, ...]]) -> bool:
        """An idle session receives nothing: a readable socket means the server ended it."""
        if connection.closed:
            return False
        try:
            readable, _, _ = select.select([connection.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable
