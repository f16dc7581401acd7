"""The tables of django-celery-beat and sqlalchemy-celery-beat, read as they are, and disabled.

``bridge import --from`` reads another scheduler's tables on PostgreSQL,
MySQL/MariaDB or SQLite. The tables are reflected (their columns as the
database has them, whatever version of the package made them) and read in a
read-only transaction where the database has one. The only write is
:meth:`SourceTables.disable`: ``enabled = false`` on the rows taken over,
together with the change mark each of those schedulers polls, so that a beat
of theirs that runs notices at its next tick.

Rows come back as plain dictionaries: the task row, and its schedule's row
under ``"schedule"`` with the kind (``interval``, ``crontab``, ``solar``,
``clocked``) under ``"kind"``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, Table, create_engine, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, NoSuchTableError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from bridge.errors import BridgeError, ValidationError

#: The schedule kinds, in the order of django-celery-beat's foreign keys.
KINDS = ("interval", "crontab", "solar", "clocked")


@dataclass(frozen=True)
class Layout:
    """Where one scheduler keeps its schedules."""

    tasks: str
    #: The table of each kind of schedule.
    schedules: dict[str, str]
    #: The one-row table whose ``last_update`` tells their beat to reload.
    changes: str
    #: Django's four foreign keys (``interval_id`` ...) or one ``discriminator`` + ``schedule_id``.
    discriminated: bool


LAYOUTS = {
    "django-celery-beat": Layout(
        tasks="django_celery_beat_periodictask",
        schedules={kind: f"django_celery_beat_{kind}schedule" for kind in KINDS},
        changes="django_celery_beat_periodictasks",
        discriminated=False,
    ),
    "sqlalchemy-celery-beat": Layout(
        tasks="celery_periodictask",
        schedules={kind: f"celery_{kind}schedule" for kind in KINDS},
        changes="celery_periodictaskchanged",
        discriminated=True,
    ),
}


class SourceError(BridgeError):
    """The source database cannot be read as the scheduler's tables."""


def _engine(url: str) -> Engine:
    """An engine for ``url``, with the drivers the bridge installs (psycopg 3, PyMySQL)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValidationError(
            "url", url, "a database URL such as postgresql://user@host/db"
        ) from None
    drivers = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
    drivers |= {"mysql": "mysql+pymysql", "mariadb": "mariadb+pymysql"}
    if parsed.drivername in drivers:
        parsed = parsed.set(drivername=drivers[parsed.drivername])
    try:
        return create_engine(parsed, poolclass=NullPool)
    except (NoSuchModuleError, ImportError) as exc:
        extra = "mysql" if parsed.get_backend_name() in {"mysql", "mariadb"} else "postgres"
        raise SourceError(
            f"url: {parsed.render_as_string(hide_password=True)} needs a driver: "
            f"install celery-periodic-bridge[{extra}] ({exc})"
        ) from None


class SourceTables:
    """One scheduler's tables in one database (and schema)."""

    def __init__(self, kind: str, url: str, schema: str | None = None) -> None:
        self.layout = LAYOUTS[kind]
        self.kind = kind
        self.schema = schema
        self.engine = _engine(url)
        self.shown = self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def _tables(self, connection: Connection) -> dict[str, Table]:
        metadata = MetaData(schema=self.schema)
        wanted = [self.layout.tasks, *self.layout.schedules.values(), self.layout.changes]
        present = set(connection.dialect.get_table_names(connection, schema=self.schema))
        if self.layout.tasks not in present:
            where = f" (schema {self.schema})" if self.schema else ""
            raise SourceError(
                f"source: {self.shown}{where} has no table {self.layout.tasks}: "
                f"is it a {self.kind} database?"
            )
        try:
            metadata.reflect(connection, only=[name for name in wanted if name in present])
        except NoSuchTableError as exc:  # pragma: no cover - listed a moment ago
            raise SourceError(f"source: {self.shown} has no table {exc}") from None
        prefix = f"{self.schema}." if self.schema else ""
        return {name: metadata.tables[prefix + name] for name in wanted if name in present}

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        with self.engine.connect() as connection:
            if self.engine.dialect.name in {"postgresql", "mysql", "mariadb"}:
                connection.execute(text("SET TRANSACTION READ ONLY"))
            try:
                yield connection
            finally:
                connection.rollback()

    def rows(self) -> list[dict[str, Any]]:
        """Every periodic task with its schedule, ordered by name."""
        try:
            with self._reading() as connection:
                tables = self._tables(connection)
                schedules = {
                    kind: {
                        row["id"]: dict(row)
                        for row in connection.execute(select(tables[name])).mappings()
                    }
                    for kind, name in self.layout.schedules.items()
                    if name in tables
                }
                task_table = tables[self.layout.tasks]
                found = []
                for row in connection.execute(
                    select(task_table).order_by(task_table.c.name)
                ).mappings():
                    values = dict(row)
                    kind, schedule_id = self._schedule_of(values)
                    values["kind"] = kind
                    values["schedule"] = schedules.get(kind or "", {}).get(schedule_id)
                    found.append(values)
                return found
        except SQLAlchemyError as exc:
            raise SourceError(f"source: {self.shown}: {exc.__class__.__name__}: {exc}") from None

    def _schedule_of(self, row: dict[str, Any]) -> tuple[str | None, Any]:
        if self.layout.discriminated:
            discriminator = str(row.get("discriminator") or "")
            kind = discriminator.removesuffix("schedule") or None
            return kind, row.get("schedule_id")
        for kind in KINDS:
            if row.get(f"{kind}_id") is not None:
                return kind, row[f"{kind}_id"]
        return None, None

    def disable(self, ids: Collection[int], now: datetime) -> None:
        """``enabled = false`` on these rows, and the change mark their beat reloads on."""
        if not ids:
            return
        try:
            with self.engine.begin() as connection:
                tables = self._tables(connection)
                tasks = tables[self.layout.tasks]
                connection.execute(
                    update(tasks).where(tasks.c.id.in_(sorted(ids))).values(enabled=False)
                )
                changes = tables.get(self.layout.changes)
                if changes is not None and "last_update" in changes.c:
                    stamp = now if self.engine.dialect.name == "postgresql" else _naive(now)
                    connection.execute(update(changes).values(last_update=stamp))
        except SQLAlchemyError as exc:
            raise SourceError(f"source: {self.shown}: {exc.__class__.__name__}: {exc}") from None


def _naive(moment: datetime) -> datetime:
    """UTC without an offset, as Django and SQLAlchemy store times where the database has none."""
    return moment.astimezone(UTC).replace(tzinfo=None)
