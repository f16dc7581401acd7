"""Hourly tallies of each schedule: what statistics over a window count, pruned or not.

Whoever ends a run, skips or misses an occurrence, or sends an alert adds to
its schedule's tally of that hour with :func:`add`, inside its transaction;
the additions gather on the session and are written once, as one upsert of
the rows they touch (in key order, so that concurrent writers do not
deadlock), just before the transaction commits
(:meth:`bridge.storage.database.Database.session` calls :func:`write`).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from functools import cache

from sqlalchemy import Insert, Table, bindparam, select
from sqlalchemy.orm import Session

from bridge.storage.models import ScheduleTally
from bridge.storage.sql import insert_of, unnest_bound, unnest_values, upserting

#: The counts a tally row holds.
COUNTS = ("success", "failure", "revoked", "lost", "skipped", "missed", "alerts", "runtime")
_PENDING = "bridge_tally"
_TABLE: Table = ScheduleTally.__table__  # type: ignore[assignment]
#: The Python type of each count's column.
_KIND = {name: float if name == "runtime" else int for name in COUNTS}


def hour_of(moment: datetime) -> datetime:
    """The start of the hour ``moment`` falls in."""
    return moment.replace(minute=0, second=0, microsecond=0)


def add(session: Session, schedule_id: int, at: datetime, **counts: float) -> None:
    """Add ``counts`` (names of :data:`COUNTS`) to the schedule's tally of the hour of ``at``."""
    pending: dict[tuple[int, datetime], Counter[str]] = session.info.setdefault(_PENDING, {})
    pending.setdefault((schedule_id, hour_of(at)), Counter()).update(counts)


def write(session: Session) -> None:
    """Write what :func:`add` gathered on the session, as one statement."""
    pending: dict[tuple[int, datetime], Counter[str]] | None = session.info.pop(_PENDING, None)
    if not pending:
        return
    # Each count of its column's type: an array of PostgreSQL takes values of one type.
    rows = [
        {
            "periodic_task_id": schedule_id,
            "hour": hour,
            **{name: _KIND[name](counts[name]) for name in COUNTS},
        }
        for (schedule_id, hour), counts in sorted(pending.items())
    ]
    connection = session.connection()
    dialect = connection.dialect.name
    if dialect == "postgresql":
        columns = {name: [row[name] for row in rows] for name in rows[0]}
        connection.execute(_upsert(dialect), unnest_values("tallied", columns))
    else:
        connection.execute(_upsert(dialect), rows)


@cache
def _upsert(dialect: str) -> Insert:
    """The tallies' upsert, built once per dialect: each row's counts are added to those of
    its schedule and hour, or become them.

    On PostgreSQL the rows go as one array per column (one statement whatever their
    number); elsewhere as one row's parameters, run once per row. Built from the rows
    themselves, the statement differed with their number: a multi-row ``INSERT``
    compiled anew for every batch of runs beat ended, most of what ending them
    cost (docs/performance.md).
    """
    columns = ("periodic_task_id", "hour", *COUNTS)
    statement = insert_of(dialect, _TABLE)
    if dialect == "postgresql":
        rows = unnest_bound("tallied", {name: _TABLE.c[name].type for name in columns})
        statement = statement.from_select(columns, select(*rows.c))
    else:
        statement = statement.values(
            {name: bindparam(name, type_=_TABLE.c[name].type) for name in columns}
        )
    return upserting(
        dialect,
        statement,
        [_TABLE.c.periodic_task_id, _TABLE.c.hour],
        lambda proposed: {name: _TABLE.c[name] + proposed[name] for name in COUNTS},
    )
