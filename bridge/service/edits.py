"""Schedules created, changed and removed by operators, each with its audit entry.

The audit log keeps, for every change, the fields an operator sets as they
were and as they became (:mod:`bridge.rules.audit`), written in the
transaction of the change: a change that fails logs nothing, and no change
goes unlogged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bridge.errors import DuplicateSchedule
from bridge.rules.audit import difference, snapshot
from bridge.service.calendars import hold_skipped
from bridge.storage import schedules
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import PeriodicTask


@dataclass
class Editing:
    """A schedule being changed: its row, and its labels to write with it."""

    row: PeriodicTask
    labels: tuple[str, ...]


class Edits:
    """Operators' changes of schedules against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def insert(self, values: dict[str, Any], labels: Sequence[str], change: Change) -> PeriodicTask:
        """Create a schedule; :class:`DuplicateSchedule` if its name is taken."""
        try:
            with self.database.session() as session:
                hold_skipped(session, values.get("skip_calendars"))
                row = schedules.add(session, values, labels)
                after = snapshot(row, labels)
                log(session, change, row.updated_at, row.id, row.name, after=after)
        except UniqueViolation:
            raise DuplicateSchedule(values["name"]) from None
        return row

    @contextmanager
    def changing(self, name: str, change: Change, now: datetime) -> Iterator[Editing]:
        """The schedule called ``name``, whose changes (row and labels) are written when the
        block ends, and not at all if it raises.

        The fields that changed go into the audit log, with ``change``, at ``now``:
        the time the change was asked for, not the row's ``updated_at``, which only
        a change of the definition moves (a silence leaves it). A block that
        changed nothing logs nothing.
        """
        with self.database.session() as session:
            row = schedules.by_name(session, name)
            before = snapshot(row, row.labels)
            editing = Editing(row, row.labels)
            yield editing
            if row.skip_calendars and row.skip_calendars != before.get("skip_calendars"):
                hold_skipped(session, row.skip_calendars)
            if editing.labels != row.labels:
                row.labels = editing.labels
            old, new = difference(before, snapshot(row, editing.labels))
            if old or new:
                log(session, change, now, row.id, row.name, old, new)

    def remove(self, name: str, change: Change, now: datetime) -> None:
        """Delete the schedule, its runs, labels and tallies; its open incidents close (their
        recoveries go) and stay, without their schedule. The audit entry keeps its fields
        as they were."""
        with self.database.session() as session:
            schedules.delete_runs_of(session, name, now)
            row = schedules.by_name(session, name)
            log(session, change, now, row.id, name, before=snapshot(row, row.labels))
            schedules.delete_schedule(session, row.id)
