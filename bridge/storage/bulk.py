"""The statements of bulk import and export: schedules read and written in batches.

:mod:`bridge.manage.bulk` checks the lines and decides, for each batch, what
to create and what to update; this module reads the batch's rows and writes
the decision, a few statements per batch: one ``SELECT`` of the batch's
names, one multi-row ``INSERT`` and one ``executemany`` ``UPDATE`` per kind
of change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import PeriodicTask

_TABLE = PeriodicTask.__table__
#: A ``periodic_task`` row's values by column name.
RowValues = Mapping[Any, Any]
#: How often a batch is planned again when another process created one of its names meanwhile.
CONFLICT_RETRIES = 3
#: Rows read per round trip while exporting.
EXPORT_PAGE = 2000


@dataclass
class Changes:
    """What one batch writes: new rows, and updates (each with the ``row_id`` it changes)."""

    creates: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)


class ScheduleImport:
    """The transactions of one import.

    ``columns`` are those the import compares with its lines. With
    ``all_or_nothing``, every batch runs in a savepoint of one transaction,
    which :meth:`undo` rolls back; otherwise each batch commits on its own.
    """

    def __init__(self, database: Database, columns: Collection[str], all_or_nothing: bool) -> None:
        self.database = database
        self.columns = tuple(columns)
        self.all_or_nothing = all_or_nothing
        self._outer: Connection | None = None

    @contextmanager
    def begun(self) -> Iterator[ScheduleImport]:
        """The import's lifetime: its one transaction, if all or nothing, committed at the end."""
        if not self.all_or_nothing:
            yield self
            return
        with self.database.engine.connect() as connection, connection.begin():
            self._outer = connection
            try:
                yield self
            finally:
                self._outer = None

    def undo(self) -> None:
        """Roll back everything an all-or-nothing import wrote."""
        if self._outer is not None:
            self._outer.rollback()

    def batch(
        self,
        names: Collection[str],
        plan: Callable[[Mapping[str, RowValues]], Changes],
        write: bool,
    ) -> Changes:
        """Read the rows of ``names``, let ``plan`` decide the changes, and write them (if
        ``write``) in one transaction; planned again if a concurrent ``add`` took a name."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                with self._transaction() as connection:
                    changes = plan(self._rows(connection, names))
                    if write:
                        _write(connection, changes)
                return changes
            except UniqueViolation:
                if attempt == CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A transaction for one batch: a savepoint inside the outer one, or its own.

        An error rolls it back and propagates, so a retried batch starts clean.
        """
        if self._outer is not None:
            with self._outer.begin_nested():
                yield self._outer
            return
        with self.database.engine.begin() as connection:
            yield connection

    def _rows(self, connection: Connection, names: Collection[str]) -> dict[str, RowValues]:
        statement = select(_TABLE.c.id, _TABLE.c.name, *(_TABLE.c[c] for c in self.columns)).where(
            _TABLE.c.name.in_(list(names))
        )
        return {row.name: row._mapping for row in connection.execute(statement)}


def _write(connection: Connection, changes: Changes) -> None:
    if changes.creates:
        connection.execute(insert(PeriodicTask), changes.creates)
    # executemany needs one set of columns per statement: pauses, resumes and
    # retimings each write a few more than a change of definition. Rows are
    # locked in id order within each, so two imports of one file do not deadlock.
    updates = sorted(changes.updates, key=lambda values: (_column_set(values), values["row_id"]))
    for _columns, group in groupby(updates, key=_column_set):
        statement = update(PeriodicTask).where(PeriodicTask.id == bindparam("row_id"))
        connection.execute(statement, list(group))


def _column_set(values: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(values))


def rows_by_name(database: Database, columns: Collection[str]) -> Iterator[RowValues]:
    """Every schedule's ``columns`` in code-point order of names, without holding up beat.

    PostgreSQL sorts by ``COLLATE "C"`` (code points, whatever the database's
    collation) in one read-only snapshot streamed through a server-side
    cursor. SQLite's plain order already is code points, but every SQLite
    transaction here takes the write lock, so it is read in short pages along
    the name index instead of one long transaction.
    """
    chosen = select(*(_TABLE.c[c] for c in ("name", *columns)))
    if not database.is_sqlite:
        with database.engine.connect() as connection:
            result = connection.execution_options(yield_per=EXPORT_PAGE).execute(
                chosen.order_by(_TABLE.c.name.collate("C"))
            )
            yield from (row._mapping for row in result)
        return
    last: str | None = None
    while True:
        page = chosen.order_by(_TABLE.c.name).limit(EXPORT_PAGE)
        if last is not None:
            page = page.where(_TABLE.c.name > last)
        with database.engine.connect() as connection:
            rows: list[Row[Any]] = list(connection.execute(page))
        yield from (row._mapping for row in rows)
        if len(rows) < EXPORT_PAGE:
            return
        last = rows[-1].name
