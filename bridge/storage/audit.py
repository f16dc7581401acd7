"""The audit log: every change to a schedule, and every named token made or revoked,
written in the transaction that makes it.

Who made it (an ``actor`` text the caller gives: ``cli:alice@host``,
``http:admin@10.0.0.7``, ``beat_schedule sync``), the action, and the
fields before and after as JSON, so that the trail of a schedule says who
paused it and what an edit changed, even after the schedule is deleted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bridge.storage.database import Database
from bridge.storage.models import AuditEntry


@dataclass(frozen=True)
class Change:
    """Who changes a schedule and why: what the audit entry of a change records."""

    actor: str
    action: str
    note: str | None = None


def entry(
    change: Change,
    at: datetime,
    schedule_id: int | None,
    schedule_name: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``audit_log`` values of one entry."""
    return {
        "at": at,
        "actor": change.actor[:255],
        "action": change.action,
        "schedule_id": schedule_id,
        "schedule_name": schedule_name,
        "before": None if before is None else json.dumps(before, sort_keys=True),
        "after": None if after is None else json.dumps(after, sort_keys=True),
        "note": change.note,
    }


def log(
    session: Session,
    change: Change,
    at: datetime,
    schedule_id: int | None,
    schedule_name: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Add one entry to the log, in the caller's transaction."""
    session.add(AuditEntry(**entry(change, at, schedule_id, schedule_name, before, after)))


class AuditStore:
    """Reading the audit log, newest first, a page at a time."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def trail(self, name: str | None, before_id: int | None, limit: int) -> list[AuditEntry]:
        """The entries of the schedule called ``name`` (every schedule's: None), newest
        first, older than the entry ``before_id`` when given."""
        statement = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if name is not None:
            statement = statement.where(AuditEntry.schedule_name == name)
        if before_id is not None:
            statement = statement.where(AuditEntry.id < before_id)
        with self.database.session() as session:
            return list(session.scalars(statement))
