"""The management side's statements: schedules read, created, changed and removed; their
runs listed; runs sent by hand recorded.

The Python API (:class:`bridge.manage.api.Bridge`) builds no statement: it
calls this gateway, whose methods are each one transaction. Rows come back
detached, their values loaded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from bridge.errors import DuplicateSchedule, ScheduleNotFound
from bridge.rules.decisions import OpenRun
from bridge.rules.kinds import RunStatus
from bridge.storage import runs
from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import BeatInstance, PeriodicTask, TaskExecution
from bridge.storage.runs import Sent


@dataclass(frozen=True)
class Lateness:
    """How far behind the schedules are: what ``bridge status`` reports."""

    instances: list[BeatInstance]
    #: Enabled schedules due that no instance holds (or whose mark expired).
    due_unclaimed: int
    #: The earliest ``nextrun`` of an enabled schedule that is due (None: none is).
    oldest_due: datetime | None


class ScheduleStore:
    """Schedules and their runs, for the management side, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- schedules ------------------------------------------------------------------

    def get(self, name: str) -> PeriodicTask:
        """The schedule called ``name``; :class:`ScheduleNotFound` if there is none."""
        with self.database.session() as session:
            return _by_name(session, name)

    def all(self) -> list[PeriodicTask]:
        """Every schedule, by name."""
        with self.database.session() as session:
            return list(session.scalars(select(PeriodicTask).order_by(PeriodicTask.name)))

    def insert(self, values: dict[str, Any]) -> PeriodicTask:
        """Create a schedule; :class:`DuplicateSchedule` if its name is taken."""
        row = PeriodicTask(**values)
        try:
            with self.database.session() as session:
                exists = select(PeriodicTask.id).where(PeriodicTask.name == row.name)
                if session.scalar(exists):
                    raise DuplicateSchedule(row.name)
                session.add(row)
        except UniqueViolation:
            raise DuplicateSchedule(row.name) from None
        return row

    @contextmanager
    def changing(self, name: str) -> Iterator[PeriodicTask]:
        """The schedule called ``name``, whose changes are written when the block ends
        (and not at all if it raises)."""
        with self.database.session() as session:
            yield _by_name(session, name)

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        with self.database.session() as session:
            _by_name(session, name)
            session.execute(delete(PeriodicTask).where(PeriodicTask.name == name))

    def lateness(self, now: datetime, lease_start: datetime) -> Lateness:
        """The live beat instances, the due rows nobody holds and the most overdue one."""
        due = (PeriodicTask.enabled, PeriodicTask.nextrun <= now)
        with self.database.session() as session:
            instances = session.scalars(select(BeatInstance).order_by(BeatInstance.started_at))
            unclaimed = session.scalar(
                select(func.count())
                .select_from(PeriodicTask)
                .where(*due, or_(PeriodicTask.worker.is_(None), PeriodicTask.marked < lease_start))
            )
            oldest = session.scalar(select(func.min(PeriodicTask.nextrun)).where(*due))
            return Lateness(list(instances), unclaimed or 0, oldest)

    # -- runs -----------------------------------------------------------------------

    def history(self, name: str, limit: int) -> list[TaskExecution]:
        """The schedule's runs, newest first."""
        with self.database.session() as session:
            schedule_id = _by_name(session, name).id
            return list(
                session.scalars(
                    select(TaskExecution)
                    .where(TaskExecution.periodic_task_id == schedule_id)
                    .order_by(TaskExecution.plan_time.desc(), TaskExecution.attempt.desc())
                    .limit(limit)
                )
            )

    def runs(self, run_ids: Collection[str]) -> list[TaskExecution]:
        """These runs, in the order given."""
        with self.database.session() as session:
            return [session.get_one(TaskExecution, run_id) for run_id in run_ids]

    def open_runs(self, schedule_id: int) -> list[OpenRun]:
        """The schedule's runs that have not reached a final status, oldest first."""
        with self.database.session() as session:
            return runs.open_runs_of(session, [schedule_id]).get(schedule_id, [])

    def record_manual_run(self, record: dict[str, Any], now: datetime) -> None:
        """Record a run sent by hand (``PENDING``), and show it as its schedule's last run.

        Its counters, cursor and breaker are left alone: they count scheduled
        occurrences only.
        """
        with self.database.session() as session:
            session.add(TaskExecution(**record))
            session.execute(
                update(PeriodicTask)
                .where(PeriodicTask.id == record["periodic_task_id"])
                .values(
                    last_run_at=now,
                    last_run_id=record["id"],
                    last_status=RunStatus.PENDING.value,
                    total_run_count=PeriodicTask.total_run_count + 1,
                )
                .execution_options(synchronize_session=False)
            )

    def record_if_new(self, record: dict[str, Any]) -> bool:
        """Record a run unless its id or occurrence is recorded already; True if recorded."""
        with self.database.session() as session:
            return bool(runs.insert_runs(session, [record]))

    def finish_runs(
        self, run_ids: Sequence[str], status: RunStatus, now: datetime, reason: str
    ) -> list[str]:
        """End open runs ``status`` with ``reason``; see :func:`bridge.storage.runs.finish_runs`."""
        with self.database.session() as session:
            return runs.finish_runs(session, run_ids, status, now, reason)

    def mark_sent(self, sent: Sequence[Sent], now: datetime) -> None:
        """``PENDING`` → ``SENT`` for these runs, each with its message's expiry."""
        with self.database.session() as session:
            runs.mark_sent(session, sent, now)


def _by_name(session: Session, name: str) -> PeriodicTask:
    row = session.scalar(select(PeriodicTask).where(PeriodicTask.name == name))
    if row is None:
        raise ScheduleNotFound(name)
    return row
