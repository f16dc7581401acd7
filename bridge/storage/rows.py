"""Schedule rows as plain values: locked and read whole, written back a few columns at a time.

Beat's batches and the settlements of runs that ended change hundreds of
``periodic_task`` rows a transaction. As mapped objects the ORM's
bookkeeping cost more CPU than deciding them (loading 62 columns into an
instance, tracking each change, a flush that groups the updates), so these
paths read a row's columns into a :data:`Row` and write back the columns
their decisions own, for all their rows in one statement.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Executable, Table, bindparam, select, update
from sqlalchemy.orm import Session

from bridge.storage.models import PeriodicTask
from bridge.storage.sql import (
    dialect_of,
    json_rows,
    json_values,
    one_of,
    plain_rows,
    unnest_bound,
    unnest_values,
    update_from_rows,
)

_TABLE: Table = PeriodicTask.__table__  # type: ignore[assignment]

#: A ``periodic_task`` row as read here: each column's value as an attribute. Not a
#: mapped object; :func:`write_rows` writes back what changed.
Row = SimpleNamespace


def rows_of(
    session: Session, statement: Executable, bound: dict[str, Any] | None = None
) -> list[Row]:
    """The whole ``periodic_task`` rows ``statement`` reads (or returns), as :data:`Row` values."""
    return [Row(**found) for found in plain_rows(session, statement, bound)]


def locked_rows(session: Session, schedule_ids: Sequence[int]) -> dict[int, Row]:
    """The rows of these schedules, locked in id order (the order every writer of schedule
    rows keeps), by id; those deleted meanwhile are missing."""
    if not schedule_ids:
        return {}
    statement = _locked_statement(dialect_of(session))
    return {row.id: row for row in rows_of(session, statement, {"ids": sorted(set(schedule_ids))})}


@functools.cache
def _locked_statement(dialect: str) -> Executable:
    return (
        select(_TABLE)
        .where(one_of(_TABLE.c.id, postgres=dialect == "postgresql", name="ids"))
        .order_by(_TABLE.c.id)
        .with_for_update()
        # MySQL and MariaDB would lock through any index covering the id, and rows
        # beyond the list with it.
        .with_hint(_TABLE, "FORCE INDEX (PRIMARY)", dialect_name="mysql")
    )


def write_rows(session: Session, rows: Sequence[Row], columns: tuple[str, ...]) -> None:
    """Write ``columns`` of ``rows``, each row its own values, by id.

    On PostgreSQL one statement updates them from one array per column
    (:func:`bridge.storage.sql.unnest_bound`), on MySQL and MariaDB from one
    JSON text (:func:`bridge.storage.sql.json_rows`), on SQLite one update a
    row. Run once per row, even pipelined, the update had the process bind and
    convert every row's parameters and the server run a statement per row: a
    burst went a sixth faster without it (docs/performance.md).
    """
    if not rows:
        return
    dialect = dialect_of(session)
    statement = _write_statement(dialect, columns)
    names = ("row_id", *columns)
    values = [[row.id, *(getattr(row, c) for c in columns)] for row in rows]
    if dialect == "postgresql":
        bound: Any = unnest_values(
            "changed", {name: [row[i] for row in values] for i, name in enumerate(names)}
        )
    elif dialect == "mysql":
        bound = json_values("changed", names, values)
    else:
        bound = [dict(zip(names, row, strict=True)) for row in values]
    session.connection().execute(statement, bound)


def values_of(row: Row, columns: tuple[str, ...]) -> tuple[Any, ...]:
    """The row's values of ``columns``: what :func:`write_changed` compares."""
    return tuple(getattr(row, column) for column in columns)


def snapshot(rows: Mapping[int, Row], columns: tuple[str, ...]) -> dict[int, tuple[Any, ...]]:
    """The values of ``columns`` of each row, by id, before a decision changes them."""
    return {key: values_of(row, columns) for key, row in rows.items()}


def write_changed(
    session: Session,
    rows: Mapping[int, Row],
    before: Mapping[int, tuple[Any, ...]],
    columns: tuple[str, ...],
) -> None:
    """:func:`write_rows` for the rows whose values of ``columns`` differ from their
    :func:`snapshot` ``before``, in id order: a row left as it was costs no update."""
    changed = [row for key, row in sorted(rows.items()) if values_of(row, columns) != before[key]]
    write_rows(session, changed, columns)


@functools.cache
def _write_statement(dialect: str, columns: tuple[str, ...]) -> Executable:
    """:func:`write_rows`'s statement for ``columns``, built once per dialect."""
    types = {"row_id": _TABLE.c.id.type, **{c: _TABLE.c[c].type for c in columns}}
    if dialect == "sqlite":
        return (
            update(_TABLE)
            .where(_TABLE.c.id == bindparam("row_id"))
            .values({c: bindparam(c, type_=types[c]) for c in columns})
        )
    if dialect == "mysql":
        changed: Any = json_rows("changed", types)
        updating = update_from_rows(_TABLE, changed, _TABLE.c.id == changed.c.row_id)
    else:
        changed = unnest_bound("changed", types)
        updating = update(_TABLE).where(_TABLE.c.id == changed.c.row_id)
    # Keyed by column: on MySQL the update names the batch's rows first.
    return updating.values({_TABLE.c[c]: changed.c[c] for c in columns})
