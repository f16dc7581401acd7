"""Which beat instances are alive, as the database itself knows it.

Each beat instance holds a session lock, keyed on its identity, on a
connection of its own for as long as it runs: an advisory lock on
PostgreSQL, a named lock (``GET_LOCK``) on MySQL and MariaDB. When the
process dies — SIGKILL, a crash, the out-of-memory killer — the kernel
closes its socket, the server ends the session, and the lock goes with it
within milliseconds. The marks of an instance whose lock is gone are taken
over at the next claim instead of after ``bridge_lease_seconds``: failover
takes a poll interval, not a lease.

The lease stays the fallback for what the database cannot see: a frozen
process (its connection stays open) or a host that vanished from the
network, whose session PostgreSQL ends once TCP keepalives go unanswered
(:data:`KEEPALIVES`; MySQL after its ``wait_timeout``). SQLite has no such
locks; there the lease is all.
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

from bridge.storage.database import Database, close_quietly
from bridge.storage.models import PeriodicTask

if TYPE_CHECKING:  # psycopg is the postgres extra's: SQLite installs do without it
    pass

logger = logging.getLogger("bridge.presence")

#: The first key of every instance lock ("beat"); the second is the hash of the instance.
LOCK_CLASS = 0x62656174

#: Server-side TCP keepalives of the lock's session, in seconds: a host that vanishes
#: without closing its connection loses its lock within idle + interval x count = 11 s.
KEEPALIVES = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 2, "tcp_keepalives_count": 3}

#: What the name of every instance lock on MySQL starts with.
MYSQL_LOCK_PREFIX = "bridge-beat:"

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


def _lock_name(instance: Any) -> ColumnElement[str]:
    """The name of an instance's lock on MySQL, computed by the server both when the lock is
    taken and when it is looked for. Named locks are the server's, not a database's: the
    name holds the database's, and is a digest, as a name may not pass 64 characters."""
    return func.concat(MYSQL_LOCK_PREFIX, func.sha1(func.concat(func.database(), ":", instance)))


def holder_gone(dialect: str) -> ColumnElement[bool]:
    """The row's mark belongs to an instance whose lock is gone: it died (PostgreSQL,
    MySQL and MariaDB).

    On PostgreSQL the live keys are read once per statement (a hashed sub-plan),
    however many marked rows it looks at; on MySQL each marked row asks the server
    whether its holder's lock is in use.
    """
    marked = PeriodicTask.worker.is_not(None)
    if dialect == "mysql":
        return and_(marked, func.is_used_lock(_lock_name(PeriodicTask.worker)).is_(None))
    if dialect != "postgresql":
        return false()
    unsigned = _key_of(PeriodicTask.worker).cast(BigInteger).op("&")(literal(0xFFFFFFFF))
    return and_(marked, unsigned.not_in(_live_keys().scalar_subquery()))


def claimable(
    dialect: str,
    instance: str | ColumnElement[str] | None,
    lease_start: ColumnElement[object] | object,
) -> ColumnElement[bool]:
    """A row nobody holds: unmarked, its mark older than the lease, its holder dead — or,
    with ``instance``, marked by that instance itself (a tick that failed half-way).
    ``dialect`` is the database's (:func:`~bridge.storage.sql.dialect_of`)."""
    free = [
        PeriodicTask.worker.is_(None),
        PeriodicTask.marked < lease_start,
        holder_gone(dialect),
    ]
    if instance is not None:
        free.append(PeriodicTask.worker == instance)
    return or_(*free)


class InstanceLock:
    """The session lock that tells every other instance this one is alive.

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
        #: The lock's connection: psycopg's on PostgreSQL, PyMySQL's on MySQL.
        self._connection: Any = None
        #: When a refused lock may be asked for again (``time.monotonic()``).
        self._retry_at = 0.0

    def hold(self) -> bool:
        """Hold the lock; False while another session holds it.

        That session is this instance's own old one, when the network broke
        and the server has not yet noticed (within :data:`KEEPALIVES` on
        PostgreSQL), or, once in four billion on PostgreSQL, an instance whose
        identity hashes alike; the lock is asked for again every
        :data:`RETRY_SECONDS` meanwhile, and the rows fail over by the lease
        alone. Raises the database's error when it cannot be reached, as a
        claim would.
        """
        if self._connection is not None and self._sound(self._connection):
            return True
        self.close()
        if time.monotonic() < self._retry_at:
            return False
        taken, connection = (
            self._take_named() if self.database.dialect == "mysql" else self._take_advisory()
        )
        if not taken:
            self._retry_at = time.monotonic() + RETRY_SECONDS
            logger.warning(
                "bridge: the instance lock of %s is held by another session; its rows fail"
                " over by the lease until it is free",
                self.instance,
            )
            return False
        self._connection = connection
        return True

    def _take_advisory(self) -> tuple[bool, Any]:
        """PostgreSQL: a session advisory lock, with the session's keepalives set."""
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
            return False, None
        return True, connection

    def _take_named(self) -> tuple[bool, Any]:
        """MySQL and MariaDB: a named lock of the session (``GET_LOCK``), named as
        :func:`_lock_name` names it."""
        import pymysql

        pooled = self.database.engine.raw_connection()
        connection: Any = pooled.driver_connection
        pooled.detach()  # the lock lives as long as the connection: never pooled again
        try:
            connection.autocommit(True)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT GET_LOCK(CONCAT(%s, SHA1(CONCAT(DATABASE(), ':', %s))), 0)",
                    (MYSQL_LOCK_PREFIX, self.instance),
                )
                taken = cursor.fetchone()
        except pymysql.MySQLError as exc:
            self._close(connection)
            raise OperationalError("taking the instance lock", None, exc) from exc
        if not taken or not taken[0]:
            self._close(connection)
            return False, None
        return True, connection

    def close(self) -> None:
        """Let the lock go (with its connection)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._close(connection)

    @staticmethod
    def _close(connection: Any) -> None:
        if hasattr(connection, "pgconn"):
            close_quietly(connection, "the instance lock's connection")
            return
        import pymysql

        try:
            connection.close()
        except pymysql.MySQLError:
            logger.debug("bridge: closing the instance lock's connection failed", exc_info=True)

    @staticmethod
    def _sound(connection: Any) -> bool:
        """An idle session receives nothing: a readable socket means the server ended it."""
        if hasattr(connection, "pgconn"):
            if connection.closed:
                return False
            fileno = connection.fileno()
        else:
            sock = getattr(connection, "_sock", None)  # PyMySQL's; None once closed
            if sock is None:
                return False
            fileno = sock.fileno()
        try:
            readable, _, _ = select.select([fileno], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable
