"""Connections to the schedule store, and its migrations.

One :class:`Database` per URL and process: engines are not safe to share
across ``fork()``, and Celery's prefork pool forks, so the engine is rebuilt
whenever the process id changes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    String,
    column,
    create_engine,
    event,
    inspect,
    select,
    table,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.orm import Session, sessionmaker

from bridge.errors import BridgeError, ValidationError
from bridge.extras import MissingExtra, scheme_of
from bridge.rules.releases import Fit, Schema
from bridge.storage.models import SchemaRelease
from bridge.version import __version__

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("bridge.database")

#: Any number works; it only has to be the same in every process that migrates.
_MIGRATE_LOCK_KEY = 0x62726964  # "brid"
#: How long a migrate on MySQL waits for another to finish, in seconds.
_MIGRATE_LOCK_WAIT = 600


class SchemaMismatch(BridgeError):
    """The store's schema is not one this release may run against: behind it, ahead of it,
    or not there at all (``fit``). The message names both revisions and what to run."""

    def __init__(self, problem: str, fit: Fit) -> None:
        super().__init__(problem)
        self.fit = fit


def _prepare_sqlite(engine: Engine) -> None:
    """Make SQLite behave under several processes: WAL, waits, foreign keys.

    Every transaction starts with ``BEGIN IMMEDIATE`` so that a transaction
    which reads and then writes waits for the write lock instead of failing
    with ``database is locked`` when another process wrote in between.

    No connection is open across a fork: SQLite keeps its view of the file's
    locks in the process, and a child that inherits it (the beat a
    ``worker -B`` forks, once the worker's recorder has read the store) has
    every transaction refused with ``locking protocol``. The idle connections
    are closed before each fork of this process; each side opens new ones.
    """
    os.register_at_fork(before=functools.partial(_close_idle, weakref.ref(engine)))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # The wait first: switching a new file to WAL needs the lock that a
        # concurrent first migration holds for a while.
        cursor.execute("PRAGMA busy_timeout=30000")
        with contextlib.suppress(sqlite3.OperationalError):
            # Still locked: WAL is a property of the file, which the connection
            # holding the lock (or the next one to open it) sets.
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # LIKE (a name's prefix) tells case apart, as it does on PostgreSQL.
        cursor.execute("PRAGMA case_sensitive_like=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _close_idle(engine: weakref.ref[Engine]) -> None:
    """Close the idle connections of ``engine``, if it is still in use (see
    :func:`_prepare_sqlite`)."""
    alive = engine()
    if alive is not None:
        alive.dispose()


def _prepare_postgres(engine: Engine) -> None:
    """Send lists to PostgreSQL in the binary format, and read its times in UTC.

    A batch's values go as one array per column (:func:`bridge.storage.sql.unnest_bound`),
    and psycopg writes a list in the text format unless told otherwise: element by
    element in Python, quoting each, 5.2 ms for 500 timestamps against 0.7 ms in
    binary, several such arrays a batch. psycopg uses, for a ``%s`` placeholder, the
    dumper of a type registered last.

    psycopg reads a ``timestamptz`` in the session's zone, the server's by default
    (often ``Etc/UTC``, a zone of the zone database, not ``datetime.UTC``), and each one
    read was then converted to UTC: a page of 100 schedules with their strips reads
    over a thousand, and converting them took a tenth of the page. In UTC they come as
    they are kept (:class:`~bridge.storage.models.UTCDateTime`). ``SET`` and not a
    start-up option: PgBouncer refuses unknown start-up options, and keeps a client's
    ``TimeZone`` across the server connections it lends it. No statement of the bridge
    depends on the session's zone (it compares and stores instants, and writes a time
    as text in UTC explicitly): with the ``SET`` lost, times are converted, not wrong.
    """
    from psycopg.types.array import ListBinaryDumper

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.adapters.register_dumper(list, ListBinaryDumper)
        dbapi_connection.execute("SET TIME ZONE 'UTC'")
        dbapi_connection.commit()  # a SET rolled back with its transaction is undone


#: What ``bridge_database_url`` may be, in a refusal.
_URL_FORMS = (
    "a SQLAlchemy URL of SQLite ('sqlite:///path/bridge.db'), PostgreSQL "
    "('postgresql+psycopg://user:password@host:5432/dbname') or MySQL/MariaDB "
    "('mysql+pymysql://user:password@host:3306/dbname')"
)
#: The schemes given for a driver the extras install: psycopg 3, PyMySQL.
_DRIVER_OF_SCHEME = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "mariadb+pymysql": "mysql+pymysql",
}


def checked_url(url: str) -> str:
    """``url`` as the bridge connects with it: SQLite, PostgreSQL through psycopg 3, or MySQL
    and MariaDB through PyMySQL.

    ``postgresql://`` and ``postgres://`` mean psycopg 3, the one PostgreSQL
    driver the ``postgres`` extra installs (SQLAlchemy alone would pick
    psycopg2); ``mysql://`` and ``mariadb://`` mean PyMySQL, the one the
    ``mysql`` extra installs, through SQLAlchemy's ``mysql`` dialect, which
    tells MariaDB apart as it connects. Anything else is refused naming the
    setting; a password in the URL is never repeated.
    """
    scheme, _, rest = url.partition("://")
    if scheme.lower() in _DRIVER_OF_SCHEME:
        url = f"{_DRIVER_OF_SCHEME[scheme.lower()]}://{rest}"
    try:
        parsed = make_url(url)
    except ArgumentError:
        shown = url if "@" not in url else f"{scheme}://<hidden>"
        raise ValidationError("bridge_database_url", shown, _URL_FORMS) from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.drivername not in {
        "sqlite",
        "sqlite+pysqlite",
        "postgresql+psycopg",
        "mysql+pymysql",
    }:
        raise ValidationError("bridge_database_url", shown, _URL_FORMS)
    return url


#: Alembic's record of the schema's revision.
_ALEMBIC_VERSION = table("alembic_version", column("version_num", String()))
#: A revision's file name: the revision's id, then what it does (``0012_schema_release.py``).
_REVISION_FILE = re.compile(r"(\d{4})_\w+\.py")


def shipped_revisions() -> tuple[str, ...]:
    """The revisions this release ships, oldest first, read from their file names.

    Each revision's id is the number its file name starts with, and each revises
    the one before (``tests/integration/test_migrations.py`` holds the scripts to
    it), so the last is the head Alembic would find, without importing Alembic.
    """
    folder = Path(migrations_location()) / "versions"
    names = (_REVISION_FILE.fullmatch(path.name) for path in folder.iterdir())
    return tuple(sorted(found.group(1) for found in names if found))


def migrations_location() -> str:
    """Where the Alembic environment is: ``bridge.migrations`` when installed.

    The wheel maps the repository's ``migrations/`` folder to the
    ``bridge.migrations`` package. A process started in a source checkout
    imports ``bridge`` from the checkout, where that mapping does not exist,
    so the folder beside the package is used instead.
    """
    try:
        return str(resources.files("bridge.migrations"))
    except ModuleNotFoundError:
        return str(Path(__file__).resolve().parents[2] / "migrations")


#: Any error the database or its driver raised: a statement refused, a connection lost.
#: Callers outside storage catch this rather than SQLAlchemy's classes.
DatabaseError = DBAPIError
#: A write refused because it would break a unique key (a name taken meanwhile).
UniqueViolation = IntegrityError
#: The errors that mean "the database is not answering", worth holding a write for.
#: (Deadlocks are operational errors too, and pass.) Anything else, a value the
#: database refuses for instance, would fail again.
UNREACHABLE: tuple[type[DBAPIError], ...] = (OperationalError, InterfaceError)


def error_reason(exc: BaseException) -> str:
    """The first line of what the driver said, for a one-line log or CLI message."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    return str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__


#: MySQL's and MariaDB's error numbers of a transaction ended to resolve a conflict: a
#: deadlock (1213) and a lock wait that timed out (1205). PyMySQL gives the number, not
#: the SQLSTATE.
MYSQL_CONFLICTS = frozenset({1205, 1213})


def is_conflict(exc: DatabaseError) -> bool:
    """A transaction the database rolled back to resolve a conflict (SQLSTATE class 40, or
    MySQL's numbers of the same): a deadlock or a serialization failure, over as soon as
    it is retried."""
    if str(getattr(exc.orig, "sqlstate", None) or "").startswith("40"):
        return True
    args: tuple[object, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] in MYSQL_CONFLICTS


def shown_url(url: str) -> str:
    """``url`` as logs and messages may show it: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


#: An open transaction, as :meth:`Database.session` gives it: a unit of work
#: (:mod:`bridge.service`) hands it to each gateway it calls, and never runs a
#: statement on it itself.
Transaction = Session


#: The database and session of the :meth:`Database.reading_together` in force, if any.
_READ_TOGETHER: ContextVar[tuple[Database, Session] | None] = ContextVar(
    "bridge_read_together", default=None
)


class Database:
    """The engine and session factory for one database URL, rebuilt after a fork."""

    def __init__(self, url: str, pre_ping: bool = True) -> None:
        self.url = checked_url(url)
        #: ``sqlite``, ``postgresql`` or ``mysql`` (MySQL and MariaDB).
        self.dialect = make_url(self.url).get_backend_name()
        #: Test each pooled connection before use (one round trip per transaction).
        self.pre_ping = pre_ping
        self._lock = threading.Lock()
        # A thread of the parent (the recorder's writer) may hold the lock at
        # the instant a pool child is forked: the child must not inherit it held.
        os.register_at_fork(
            before=self._lock.acquire,
            after_in_parent=self._lock.release,
            after_in_child=self._lock.release,
        )
        self._pid = -1
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def is_mysql(self) -> bool:
        """MySQL or MariaDB: one dialect, the server told apart as it connects."""
        return self.dialect == "mysql"

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None or self._pid != os.getpid():
                if self._engine is not None:
                    # Inherited from the parent: drop its connections without
                    # closing them under the parent's feet.
                    self._engine.dispose(close=False)
                self._engine = self._create_engine()
                self._sessions = sessionmaker(self._engine, expire_on_commit=False)
                self._pid = os.getpid()
            return self._engine

    def _create_engine(self) -> Engine:
        try:
            return self._connect_engine()
        except ImportError as exc:  # the driver of the URL's kind is not installed
            raise MissingExtra("bridge_database_url", scheme_of(self.url), exc) from None

    def _connect_engine(self) -> Engine:
        if self.is_sqlite:
            engine = create_engine(self.url, connect_args={"timeout": 30})
            _prepare_sqlite(engine)
            return engine
        # Connections open only as they are needed; the pool keeps as many as an HTTP
        # server's threads use at once (20 clients at once kept 10 and opened a
        # connection for a third of their requests), and up to 40, the server's threads.
        # MySQL's transactions read a snapshot taken at their first read by default:
        # the statements are written for PostgreSQL's, each reading what is committed.
        isolation = {"isolation_level": "READ COMMITTED"} if self.is_mysql else {}
        # MySQL 8 cuts a GROUP_CONCAT (a schedule's labels read with its row) at 1,024
        # bytes; a schedule's 20 labels of 64 characters take 1,299.
        session = {"init_command": "SET SESSION group_concat_max_len = 65536"}
        engine = create_engine(
            self.url,
            pool_pre_ping=self.pre_ping,
            pool_size=20,
            max_overflow=20,
            connect_args={"connect_timeout": 5, **(session if self.is_mysql else {})},
            **isolation,
        )
        if engine.dialect.name == "postgresql":
            _prepare_postgres(engine)
        return engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in a transaction that commits on success and rolls back on error.

        The tallies its statements added to (:mod:`bridge.storage.tally`) are
        written just before it commits.
        """
        from bridge.storage import tally

        self.engine  # noqa: B018 - builds the session factory for this process
        assert self._sessions is not None
        with self._sessions.begin() as session:
            yield session
            tally.write(session)

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reading only. On PostgreSQL its statements run outside a
        transaction, each reading what is committed when it starts, as they would inside
        one at READ COMMITTED, without the round trips of ``BEGIN`` and ``COMMIT``: a
        third of the time of a read of one statement, and the pages of the HTTP API and
        the dashboard read on every request. Elsewhere, :meth:`session` (on MySQL,
        switching a connection to autocommit and back costs the same round trips).

        Inside :meth:`reading_together`, the session it holds."""
        held = _READ_TOGETHER.get()
        if held is not None and held[0] is self:
            yield held[1]
            return
        if not self.is_postgres:
            with self.session() as session:
                yield session
            return
        with self.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT")
            with Session(bind=connection) as session:
                yield session

    @contextmanager
    def reading_together(self) -> Iterator[None]:
        """Every :meth:`reading` inside, in this thread, on one session and connection.

        Each connection taken from the pool costs a round trip to test it (and the
        pool's and the session's bookkeeping): a dashboard page reads its session,
        its schedules and their strips, and taking a connection for each cost it a
        tenth of its time. A change inside still takes a connection of its own.
        """
        with self.reading() as session:
            token = _READ_TOGETHER.set((self, session))
            try:
                yield
            finally:
                _READ_TOGETHER.reset(token)

    def own_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        """A PostgreSQL connection kept out of the pool, in autocommit, for a session that
        must last as long as beat does (a ``LISTEN``, a session lock); close it with
        :func:`close_quietly`."""
        import psycopg

        pooled = self.engine.raw_connection()
        connection = pooled.driver_connection
        pooled.detach()  # never returned to the pool, where another caller would reuse it
        assert isinstance(connection, psycopg.Connection)
        connection.autocommit = True
        return connection

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
            self._engine = None
            self._sessions = None

    def _alembic_config(self) -> Any:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", migrations_location())
        config.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        return config

    def mysql_version(self) -> str | None:
        """What a MySQL or MariaDB server answers ``SELECT VERSION()`` with (None on
        another database): whether it can hold the store is
        :func:`bridge.rules.servers.mysql_refusal`'s to say."""
        if not self.is_mysql:
            return None
        with self.engine.connect() as connection:
            return str(connection.exec_driver_sql("SELECT VERSION()").scalar())

    def migrate(self, revision: str = "head") -> tuple[str | None, str | None]:
        """Upgrade the schema to ``revision``; safe to run again and concurrently. Returns
        the revision the database was at (None: never migrated) and the one it is at now.

        Concurrent migrators queue on a lock (a PostgreSQL advisory lock, a
        MySQL named lock, or SQLite's write lock) and each then finds the work
        already done; the
        revision before is read under that lock, so each reports what it did.

        A schema a later release migrated is left as it is: unchanged when that
        release accepts this one beside it, refused (:class:`SchemaMismatch`) when
        it does not.
        """
        from alembic import command
        from alembic.runtime.migration import MigrationContext

        config = self._alembic_config()
        with self.engine.connect() as connection, self._migrating_alone(connection):
            schema = self._schema_on(connection)
            if schema.revision is not None and schema.revision not in schema.known:
                problem = schema.refusal(__version__, shown_url(self.url))
                if problem is not None:
                    raise SchemaMismatch(problem, schema.fit(__version__))
                return schema.revision, schema.revision
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            return schema.revision, MigrationContext.configure(connection).get_current_revision()

    @contextmanager
    def _migrating_alone(self, connection: Connection) -> Iterator[None]:
        """Run the block in a transaction of ``connection``, holding the migration lock of
        the store until that transaction has committed.

        PostgreSQL's advisory lock is taken inside the transaction and ends with it.
        MySQL has no transactional DDL and no transaction-scoped lock: a named lock of
        the session (one name per database: the names are the server's) is taken
        before the transaction and released after it, and dies with the session if
        the process does. Released before the commit, it let the next migrator read
        the revision before the last migration (whose DDL commits itself, but not the
        version row written after it) and run that migration again. SQLite's write
        lock, taken as the transaction begins, serialises migrators by itself.
        """
        if connection.dialect.name != "mysql":
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK_KEY})")
                yield
            return
        lock = "CONCAT('bridge_migrate_', MD5(DATABASE()))"
        taken = connection.exec_driver_sql(
            f"SELECT GET_LOCK({lock}, {_MIGRATE_LOCK_WAIT})"
        ).scalar()
        connection.commit()  # the statement's own transaction: the block has its own
        if taken != 1:
            raise BridgeError(
                f"bridge_database_url ({shown_url(self.url)}): another migrate held the"
                f" migration lock for {_MIGRATE_LOCK_WAIT} s; run migrate again once it is done"
            )
        try:
            with connection.begin():
                yield
        finally:
            with contextlib.suppress(DBAPIError):  # a lost session took its lock with it
                connection.exec_driver_sql(f"DO RELEASE_LOCK({lock})")

    def schema(self) -> Schema:
        """The database's revision and recorded oldest release, beside the revisions this
        release ships: what :class:`~bridge.rules.releases.Schema` judges."""
        with self.engine.connect() as connection:
            return self._schema_on(connection)

    def _schema_on(self, connection: Connection) -> Schema:
        # Read without Alembic, whose import alone costs a command a few tenths of a second.
        known = shipped_revisions()
        tables = inspect(connection)
        revision = oldest = None
        if tables.has_table("alembic_version"):
            revision = connection.execute(select(_ALEMBIC_VERSION.c.version_num)).scalar()
        if revision is not None and tables.has_table("schema_release"):
            oldest = connection.execute(select(SchemaRelease.oldest_release)).scalar()
        return Schema(revision, known[-1], frozenset(known), oldest)

    def is_migrated(self) -> bool:
        """Whether the bridge's tables exist, whatever their revision."""
        tables = set(inspect(self.engine).get_table_names())
        return {"periodic_task", "task_execution"} <= tables

    def require_schema(self, release: str) -> None:
        """Raise :class:`SchemaMismatch` unless a process of ``release`` may run against the
        store's schema."""
        schema = self.schema()
        problem = schema.refusal(release, shown_url(self.url))
        if problem is not None:
            raise SchemaMismatch(problem, schema.fit(release))


_databases: dict[str, Database] = {}
_databases_lock = threading.Lock()


def database_for(url: str) -> Database:
    """The process-wide :class:`Database` for ``url``."""
    with _databases_lock:
        if url not in _databases:
            _databases[url] = Database(url)
        return _databases[url]


def close_quietly(connection: psycopg.Connection[tuple[object, ...]], what: str) -> None:
    """Close a connection of :meth:`Database.own_connection`; a failure is only logged: the
    server ends the session either way."""
    import psycopg

    try:
        connection.close()
    except psycopg.Error:
        logger.debug("bridge: closing %s failed", what, exc_info=True)
