"""Named calendars (``calendar``), and which schedules name each.

A schedule names its calendars in ``periodic_task.skip_calendars`` (names
separated by commas) rather than through a foreign key: beat reads a claimed
row with no join, and the calendars themselves (a handful of small rows) only
for a batch that holds a row naming some. What a foreign key would guard, that
no schedule names a calendar that is gone, the units of work of
:mod:`bridge.service.calendars` check in the transaction that removes one.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bridge.errors import CalendarNotFound, DuplicateCalendar
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, StoredCalendar


class CalendarStore:
    """Reading the named calendars, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def every(self) -> list[StoredCalendar]:
        """Every calendar, by name."""
        with self.database.session() as session:
            return list(session.scalars(select(StoredCalendar).order_by(StoredCalendar.name)))

    def get(self, name: str) -> StoredCalendar:
        """The calendar ``name``; :class:`CalendarNotFound` if none."""
        with self.database.session() as session:
            return by_name(session, name)

    def names(self) -> set[str]:
        """The names of every calendar: what a schedule's ``skip_calendars`` may list."""
        with self.database.session() as session:
            return set(session.scalars(select(StoredCalendar.name)))

    def naming(self, name: str | None = None) -> list[tuple[str, str]]:
        """See :func:`naming`."""
        with self.database.session() as session:
            return naming(session, name)


def by_name(session: Session, name: str, lock: bool = False) -> StoredCalendar:
    """The calendar ``name`` in the caller's transaction, locked for update with ``lock``;
    :class:`CalendarNotFound` if none."""
    statement = select(StoredCalendar).where(StoredCalendar.name == name)
    row = session.scalar(statement.with_for_update() if lock else statement)
    if row is None:
        raise CalendarNotFound(name)
    return row


def held_names(session: Session, names: Collection[str]) -> set[str]:
    """Those of ``names`` that are calendars, each held (a shared lock) until the caller's
    transaction ends: a removal of one waits for it, then sees what it wrote."""
    statement = select(StoredCalendar.name).where(StoredCalendar.name.in_(sorted(names)))
    return set(session.scalars(statement.with_for_update(read=True)))


def naming(session: Session, name: str | None = None) -> list[tuple[str, str]]:
    """Each schedule that names calendars, by name, with its ``skip_calendars``; only
    those whose list may hold ``name`` when given (the text contains it)."""
    statement = select(PeriodicTask.name, PeriodicTask.skip_calendars).where(
        PeriodicTask.skip_calendars.is_not(None)
    )
    if name is not None:
        statement = statement.where(PeriodicTask.skip_calendars.contains(name, autoescape=True))
    rows = session.execute(statement.order_by(PeriodicTask.name))
    return [(schedule, listed or "") for schedule, listed in rows]


def save(
    session: Session,
    name: str,
    values: Mapping[str, Any],
    now: datetime,
    replace: bool,
) -> StoredCalendar:
    """Write the calendar ``name`` (its ``kind``, ``entries`` and ``timezone``), a new row
    or, when ``replace``, over the one of its name; :class:`DuplicateCalendar` if it
    exists and ``replace`` is false."""
    row = session.scalar(select(StoredCalendar).where(StoredCalendar.name == name))
    if row is not None and not replace:
        raise DuplicateCalendar(name)
    if row is None:
        row = StoredCalendar(name=name, created_at=now)
        session.add(row)
    row.kind = values["kind"]
    row.entries = json.dumps(values["entries"])
    row.timezone = values["timezone"]
    row.updated_at = now
    session.flush()
    return row
