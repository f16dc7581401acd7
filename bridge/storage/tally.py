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

from sqlalchemy.orm import Session

from bridge.storage.models import ScheduleTally
from bridge.storage.sql import upsert

#: The counts a tally row holds.
COUNTS = ("success", "failure", "revoked", "lost", "skipped", "missed", "alerts", "runtime")
_PENDING = "bridge_tally"


def hour_of(moment: datetime) -> datetime:
    """The start of the hour ``moment`` falls in."""
    return moment.replace(minute=0, second=0, microsecond=0)


def add(session: Session, schedule_id: int, at: datetime, **counts: float) -> None:
    """Add ``counts`` (names of :data:`COUNTS`) to the schedule's tally of the hour of ``at``."""
    pending: dict[tuple[int, datetime], Counter[str]] = session.info.setdefault(_PENDING, {})
    pending.setdefault((schedule_id, hour_of(at)), Counter()).update(counts)


def write(session: Session) -> None:
    """Write what :func:`add` gathered on the session, as one upsert."""
    pending: dict[tuple[int, datetime], Counter[str]] | None = session.info.pop(_PENDING, None)
    if not pending:
        return
    rows = [
        {"periodic_task_id": schedule_id, "hour": hour, **{name: counts[name] for name in COUNTS}}
        for (schedule_id, hour), counts in sorted(pending.items())
    ]
    table = ScheduleTally.__table__.c
    session.execute(
        upsert(
            session,
            ScheduleTally,
            rows,
            [table.periodic_task_id, table.hour],
            lambda proposed: {name: table[name] + proposed[name] for name in COUNTS},
        )
    )
