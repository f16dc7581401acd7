"""The statements of bulk import and export: schedules read and written in batches.

:mod:`bridge.manage.bulk` checks the lines and decides, for each batch, what
to create and what to update; this module reads the batch's rows and writes
the decision, a few statements per batch: one ``SELECT`` of the batch's
names, one multi-row ``INSERT`` and one ``executemany`` ``UPDATE`` per kind
of change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, insert, select, update

from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import AuditEntry, PeriodicTask, ScheduleLabel

_TABLE = PeriodicTask.__table__
#: A ``periodic_task`` row's values by column name.
RowValues = Mapping[Any, Any]
#: How often a batch is planned again when another process created one of its names meanwhile.
CONFLICT_RETRIES = 3
#: Rows read per round trip while exporting.
EXPORT_PAGE = 2000


@dataclass
class Changes:
    """What one batch writes: new rows, and updates (each with the ``row_id`` it changes).

    A create or an update may carry ``labels``: the schedule's labels, written
    to ``schedule_label`` in place of those it has. ``audit`` holds an entry of
    the audit log per schedule created or changed (without its schedule id,
    which the writer fills in from the schedule's name).
    """

    creates: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)


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
        """The batch's rows by name, each with its ``labels`` (sorted)."""
        statement = select(_TABLE.c.id, _TABLE.c.name, *(_TABLE.c[c] for c in self.columns)).where(
            _TABLE.c.name.in_(list(names))
        )
        found = [dict(row._mapping) for row in connection.execute(statement)]
        labels = _labels_of(connection, [row["id"] for row in found])
        return {row["name"]: {**row, "labels": labels.get(row["id"], ())} for row in found}


def _labels_of(connection: Connection, ids: Collection[int]) -> dict[int, tuple[str, ...]]:
    found: dict[int, list[str]] = {}
    if ids:
        statement = (
            select(ScheduleLabel.periodic_task_id, ScheduleLabel.label)
            .where(ScheduleLabel.periodic_task_id.in_(list(ids)))
            .order_by(ScheduleLabel.periodic_task_id, ScheduleLabel.label)
        )
        for schedule_id, label in connection.execute(statement):
            found.setdefault(schedule_id, []).append(label)
    return {schedule_id: tuple(labels) for schedule_id, labels in found.items()}


def _write(connection: Connection, changes: Changes) -> None:
    labels: dict[int, tuple[str, ...]] = {}
    ids: dict[str, int] = {}
    if changes.creates:
        given = {values["name"]: values.get("labels", ()) for values in changes.creates}
        rows = [{k: v for k, v in values.items() if k != "labels"} for values in changes.creates]
        # A plain executemany, then the new ids by name: an INSERT ... RETURNING of many
        # rows is sent as one statement per thousand rows, whose placeholders the driver
        # parses anew each time (five times the CPU of the whole import's inserts).
        connection.execute(insert(PeriodicTask), rows)
        created = connection.execute(
            select(_TABLE.c.id, _TABLE.c.name).where(_TABLE.c.name.in_(list(given)))
        )
        for schedule_id, name in created:
            ids[name] = schedule_id
            labels[schedule_id] = given[name]
    # executemany needs one set of columns per statement: pauses, resumes and
    # retimings each write a few more than a change of definition. Rows are
    # locked in id order within each, so two imports of one file do not deadlock.
    updates = []
    for values in changes.updates:
        if "labels" in values:
            labels[values["row_id"]] = values["labels"]
        updates.append({k: v for k, v in values.items() if k != "labels"})
    updates.sort(key=lambda values: (_column_set(values), values["row_id"]))
    for _columns, group in groupby(updates, key=_column_set):
        statement = update(PeriodicTask).where(PeriodicTask.id == bindparam("row_id"))
        connection.execute(statement, list(group))
    _write_labels(connection, labels)
    if changes.audit:
        entries = [
            {**entry, "schedule_id": entry.get("schedule_id") or ids.get(entry["schedule_name"])}
            for entry in changes.audit
        ]
        connection.execute(insert(AuditEntry), entries)


def _write_labels(connection: Connection, labels: dict[int, tuple[str, ...]]) -> None:
    """Replace the labels of these schedules (their old ones go)."""
    if not labels:
        return
    changed = sorted(labels)
    connection.execute(delete(ScheduleLabel).where(ScheduleLabel.periodic_task_id.in_(changed)))
    label_rows = [
        {"periodic_task_id": schedule_id, "label": label}
        for schedule_id in changed
        for label in labels[schedule_id]
    ]
    if label_rows:
        connection.execute(insert(ScheduleLabel), label_rows)


def _column_set(values: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(values))


def rows_by_name(database: Database, columns: Collection[str]) -> Iterator[RowValues]:
    """Every schedule's ``columns`` in code-point order of names, without holding up beat.

    PostgreSQL sorts by ``COLLATE "C"`` (code points, whatever the database's
    collation) in one read-only snapshot streamed through a server-side
    cursor; so does MySQL, whose names are in the binary collation already.
    SQLite's plain order already is code points, but every SQLite
    transaction here takes the write lock, so it is read in short pages along
    the name index instead of one long transaction.
    """
    chosen = select(*(_TABLE.c[c] for c in ("id", "name", *columns)))
    if not database.is_sqlite:
        with database.engine.connect() as connection:
            result = connection.execution_options(yield_per=EXPORT_PAGE).execute(
                chosen.order_by(
                    _TABLE.c.name.collate("C") if database.is_postgres else _TABLE.c.name
                )
            )
            for partition in result.partitions():
                yield from _labelled(database, partition)
        return
    last: str | None = None
    while True:
        page = chosen.order_by(_TABLE.c.name).limit(EXPORT_PAGE)
        if last is not None:
            page = page.where(_TABLE.c.name > last)
        with database.engine.connect() as connection:
            rows: list[Row[Any]] = list(connection.execute(page))
        yield from _labelled(database, rows)
        if len(rows) < EXPORT_PAGE:
            return
        last = rows[-1].name


def _labelled(database: Database, rows: Sequence[Row[Any]]) -> Iterator[RowValues]:
    """The rows' values, each with its ``labels``, read in one query for them all."""
    with database.engine.connect() as connection:
        labels = _labels_of(connection, [row.id for row in rows])
    for row in rows:
        yield {**row._mapping, "labels": labels.get(row.id, ())}
