"""The management side's statements: schedules read, created, changed and removed; their
runs listed; runs sent by hand recorded.

The Python API (:class:`bridge.manage.api.Bridge`) builds no statement: it
calls this gateway, whose methods are each one transaction, and, for a
change that the audit log records, a unit of work of
:mod:`bridge.service.edits`, which composes the functions at the end of
this module in one. Rows come back detached, their values loaded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, delete, func, select, tuple_, update
from sqlalchemy.orm import Session, selectinload

from bridge.errors import DuplicateSchedule, ScheduleNotFound
from bridge.rules.decisions import FINISHED_NOTES, OpenRun
from bridge.rules.kinds import RunStatus
from bridge.storage import runs
from bridge.storage.audit import Change, log
from bridge.storage.database import Database
from bridge.storage.incidents import close_incidents_of
from bridge.storage.models import (
    BeatInstance,
    PeriodicTask,
    ScheduleLabel,
    TaskExecution,
    WorkerInstance,
)
from bridge.storage.presence import claimable
from bridge.storage.runs import Sent
from bridge.storage.sql import before, dialect_of, plain_rows


@dataclass(frozen=True)
class SchedulePage:
    """A page of schedules as read: each one's columns and ``labels``, and their runs."""

    rows: list[dict[str, Any]]
    seen: runs.RunsSeen


#: The orders a page of schedules can come in: by name, or by next run (enabled ones).
SORTS = ("name", "next")


@dataclass(frozen=True)
class Lateness:
    """How far behind the schedules are: what ``bridge status`` reports."""

    instances: list[BeatInstance]
    workers: list[WorkerInstance]
    #: Enabled schedules due that no instance holds (or whose mark expired).
    due_unclaimed: int
    #: The earliest ``nextrun`` of an enabled schedule that is due (None: none is).
    oldest_due: datetime | None


def finished_rows() -> ColumnElement[bool]:
    """The schedules beat disabled with nothing left to fire (health ``finished``)."""
    table = PeriodicTask
    return and_(
        table.enabled.is_(False),
        table.broken.is_(False),
        table.note.is_not(None),
        table.note.in_(sorted(FINISHED_NOTES)),
    )


def paused_rows() -> ColumnElement[bool]:
    """The schedules someone paused: disabled, neither broken nor finished."""
    table = PeriodicTask
    return and_(table.enabled.is_(False), table.broken.is_(False), ~finished_rows())


@dataclass(frozen=True)
class ScheduleFilter:
    """Which schedules a listing shows; None leaves a criterion out."""

    #: Names starting with this text.
    prefix: str | None = None
    task: str | None = None
    enabled: bool | None = None
    #: Paused by someone: disabled, neither broken nor finished.
    paused: bool | None = None
    #: Disabled by beat with nothing left to fire.
    finished: bool | None = None
    broken: bool | None = None
    #: Enabled, not broken, and its latest occurrence failed.
    failing: bool | None = None
    label: str | None = None
    #: Enabled and due for longer than its grace (its own, else ``default_grace``) at
    #: this instant.
    late_at: datetime | None = None
    default_grace: float = 0.0

    def criteria(self, dialect: str) -> list[ColumnElement[bool]]:
        """The conditions of the filter, for a ``WHERE`` on ``periodic_task``."""
        table = PeriodicTask
        criteria: list[ColumnElement[bool]] = []
        if self.prefix:
            # The range lets the name index start at the prefix; LIKE decides.
            criteria += [
                table.name >= self.prefix,
                table.name.startswith(self.prefix, autoescape=True),
            ]
        if self.task is not None:
            criteria.append(table.task == self.task)
        if self.enabled is not None:
            criteria.append(table.enabled.is_(self.enabled))
        if self.paused is not None:
            criteria.append(paused_rows() if self.paused else ~paused_rows())
        if self.finished is not None:
            criteria.append(finished_rows() if self.finished else ~finished_rows())
        if self.broken is not None:
            criteria.append(table.broken.is_(self.broken))
        if self.failing:
            criteria += [
                table.failing_since.is_not(None),
                table.broken.is_(False),
                table.enabled.is_(True),
            ]
        if self.label is not None:
            criteria.append(
                select(ScheduleLabel.periodic_task_id)
                .where(
                    ScheduleLabel.periodic_task_id == table.id, ScheduleLabel.label == self.label
                )
                .exists()
            )
        if self.late_at is not None:
            grace = func.coalesce(table.grace, self.default_grace)
            late = before(table.nextrun, self.late_at, grace, dialect=dialect)
            criteria += [table.enabled.is_(True), late]
        return criteria


@dataclass(frozen=True)
class TimerGroupRow:
    """Schedules due soon that share a timer and zone (:meth:`ScheduleStore.timer_groups`)."""

    timer: str
    timezone: str | None
    schedules: int
    soonest: datetime
    first_name: str
    #: The calendars they skip (``periodic_task.skip_calendars``).
    skip_calendars: str | None = None


class ScheduleStore(runs.RunEnding):
    """Schedules and their runs, for the management side, against one database.

    The changes made here (a run sent by hand, an action noted) write their entry
    in the audit log in their own transaction.
    """

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- schedules ------------------------------------------------------------------

    def get(self, name: str) -> PeriodicTask:
        """The schedule called ``name``, its labels loaded; :class:`ScheduleNotFound` if none."""
        with self.database.session() as session:
            return by_name(session, name)

    def id_of(self, name: str) -> int:
        """The id of the schedule called ``name``; :class:`ScheduleNotFound` if none."""
        with self.database.session() as session:
            found = session.connection().scalar(
                select(PeriodicTask.id).where(PeriodicTask.name == name)
            )
        if found is None:
            raise ScheduleNotFound(name)
        return found

    def named(self, names: Collection[str]) -> list[PeriodicTask]:
        """The schedules called ``names`` that exist, their labels loaded, by name."""
        statement = select(PeriodicTask).where(PeriodicTask.name.in_(list(names)))
        with self.database.session() as session:
            return list(session.scalars(_with_labels(statement.order_by(PeriodicTask.name))))

    def queues_named(self) -> set[str]:
        """The queues the schedules' options name (``add --queue``): one read of the
        options that mention a queue, distinct."""
        statement = (
            select(PeriodicTask.options).where(PeriodicTask.options.like('%"queue"%')).distinct()
        )
        with self.database.session() as session:
            found = session.scalars(statement).all()
        queues = set()
        for text in found:
            try:
                options = json.loads(text)
            except ValueError:
                continue  # written by hand: the schedule's page says what is wrong with it
            queue = options.get("queue") if isinstance(options, dict) else None
            if isinstance(queue, str) and queue:
                queues.add(queue)
        return queues

    def canvases_naming_a_queue(self) -> list[str]:
        """The canvases (their stored text) that mention a queue, distinct: the queues their
        tasks' options name are the schedules' too."""
        statement = (
            select(PeriodicTask.signature)
            .where(PeriodicTask.signature.like('%"queue"%'))
            .distinct()
        )
        with self.database.session() as session:
            return [text for text in session.scalars(statement).all() if text is not None]

    def all(self) -> list[PeriodicTask]:
        """Every schedule, by name."""
        with self.database.session() as session:
            return list(
                session.scalars(_with_labels(select(PeriodicTask).order_by(PeriodicTask.name)))
            )

    def timer_groups(self, until: datetime, limit: int) -> list[TimerGroupRow]:
        """The enabled schedules due before ``until``, gathered by timer, zone and the
        calendars they skip: how many share each, the soonest next run among them and the
        first name, the ``limit`` largest groups. Read along the index beat finds due rows
        by."""
        shared = (PeriodicTask.timer, PeriodicTask.timezone, PeriodicTask.skip_calendars)
        statement = (
            select(
                *shared, func.count(), func.min(PeriodicTask.nextrun), func.min(PeriodicTask.name)
            )
            .where(PeriodicTask.enabled, PeriodicTask.nextrun < until)
            .group_by(*shared)
            .order_by(func.count().desc(), func.min(PeriodicTask.name))
            .limit(limit)
        )
        with self.database.session() as session:
            return [
                TimerGroupRow(timer, zone, count, soonest, name, calendars)
                for timer, zone, calendars, count, soonest, name in session.execute(statement)
                if soonest is not None  # never: the rows have a next run
            ]

    def page(
        self,
        where: ScheduleFilter,
        sort: str,
        after: Sequence[Any] | None,
        limit: int,
        now: datetime,
        waiting_since: runs.Waiting,
    ) -> SchedulePage:
        """Up to ``limit`` schedules matching ``where``, after the sort key ``after``, as
        their columns and ``labels``, with the runs their health is judged from at ``now``.

        ``sort`` is ``name`` (key: the name) or ``next`` (enabled schedules
        with a next run, by it; key: next run and id). Either order is read
        along an index, so a page costs the same at any depth. The rows are
        read as plain values (building ORM objects cost a page of 100 more
        than the database spent on it), and the runs in the same transaction:
        one connection and one snapshot for the page.
        """
        statement = _page_columns().where(*where.criteria(self.database.dialect))
        if sort == "next":
            key = tuple_(PeriodicTask.nextrun, PeriodicTask.id)
            statement = statement.where(PeriodicTask.enabled, PeriodicTask.nextrun.is_not(None))
            statement = statement.order_by(PeriodicTask.nextrun, PeriodicTask.id)
            if after is not None:
                statement = statement.where(key > tuple_(*after))
        else:
            statement = statement.order_by(PeriodicTask.name)
            if after is not None:
                statement = statement.where(PeriodicTask.name > after[0])
        with self.database.reading() as session:
            rows = plain_rows(session, statement.limit(limit))
            seen = runs.runs_seen(session, [row["id"] for row in rows], now, waiting_since)
        for row in rows:
            row["labels"] = tuple(sorted(row["labels"].split(" "))) if row["labels"] else ()
        return SchedulePage(rows, seen)

    def names_with_label(self, label: str) -> list[str]:
        """The names of the schedules carrying ``label``, in order."""
        statement = (
            select(PeriodicTask.name)
            .join(ScheduleLabel, ScheduleLabel.periodic_task_id == PeriodicTask.id)
            .where(ScheduleLabel.label == label)
            .order_by(PeriodicTask.name)
        )
        with self.database.session() as session:
            return list(session.scalars(statement))

    def note_action(
        self, schedule_id: int | None, name: str, change: Change, now: datetime, **after: Any
    ) -> None:
        """Log an action on a schedule that changes none of its fields (a backfill, a cancel)."""
        with self.database.session() as session:
            log(session, change, now, schedule_id, name, after=after or None)

    def lateness(self, now: datetime, lease_start: datetime) -> Lateness:
        """The live beat instances, the due rows nobody holds and the most overdue one."""
        due = (PeriodicTask.enabled, PeriodicTask.nextrun <= now)
        with self.database.session() as session:
            instances = session.scalars(
                select(BeatInstance)
                .where(BeatInstance.stopped_at.is_(None))
                .order_by(BeatInstance.started_at)
            )
            workers = list(session.scalars(select(WorkerInstance).order_by(WorkerInstance.name)))
            unclaimed = session.scalar(
                select(func.count())
                .select_from(PeriodicTask)
                .where(*due, claimable(dialect_of(session), None, lease_start))
            )
            oldest = session.scalar(select(func.min(PeriodicTask.nextrun)).where(*due))
            return Lateness(list(instances), workers, unclaimed or 0, oldest)

    # -- runs -----------------------------------------------------------------------

    def runs(self, run_ids: Collection[str]) -> list[TaskExecution]:
        """These runs, in the order given."""
        with self.database.session() as session:
            return [session.get_one(TaskExecution, run_id) for run_id in run_ids]

    def open_runs(self, schedule_id: int) -> list[OpenRun]:
        """The schedule's runs that have not reached a final status, oldest first."""
        with self.database.session() as session:
            return runs.open_runs_of(session, [schedule_id]).get(schedule_id, [])

    def record_manual_run(
        self, record: dict[str, Any], now: datetime, change: Change, schedule_name: str
    ) -> None:
        """Record a run sent by hand (``PENDING``), and show it as its schedule's last run.

        Its counters, cursor and breaker are left alone: they count scheduled
        occurrences only. The audit log says who sent it.
        """
        with self.database.session() as session:
            session.add(TaskExecution(**record))
            log(
                session,
                change,
                now,
                record["periodic_task_id"],
                schedule_name,
                after={"run": record["id"]},
            )
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

    def mark_sent(self, sent: Sequence[Sent], now: datetime) -> None:
        """``PENDING`` → ``SENT`` for these runs, each with its message's expiry."""
        with self.database.session() as session:
            runs.mark_sent(session, sent, now)


_Statement = TypeVar("_Statement", bound=Select[*tuple[Any, ...]])


@functools.cache
def _page_columns() -> Select[*tuple[Any, ...]]:
    """``SELECT`` of every column of ``periodic_task`` and of its labels, as one text
    separated by spaces (which no label holds), built once: building it coerces each of
    62 columns, a twentieth of what serving a page of schedules cost. Read with the rows,
    the labels cost a page a tenth of what a statement of their own did."""
    labels = (
        select(func.aggregate_strings(ScheduleLabel.label, " "))
        .where(ScheduleLabel.periodic_task_id == PeriodicTask.id)
        .scalar_subquery()
    )
    return select(*PeriodicTask.__table__.columns, labels.label("labels"))


def _with_labels(statement: _Statement) -> _Statement:
    return statement.options(selectinload(PeriodicTask.label_rows))


def add(session: Session, values: dict[str, Any], labels: Sequence[str]) -> PeriodicTask:
    """Insert a schedule with its labels; :class:`DuplicateSchedule` if its name is taken
    (found first, or refused by the unique index to a concurrent insert)."""
    row = PeriodicTask(**values)
    row.label_rows = [ScheduleLabel(label=label) for label in labels]
    if session.scalar(select(PeriodicTask.id).where(PeriodicTask.name == row.name)):
        raise DuplicateSchedule(row.name)
    session.add(row)
    session.flush()
    return row


def delete_runs_of(session: Session, name: str, now: datetime) -> None:
    """Delete the runs of the schedule called ``name`` and close its open incidents (their
    recoveries go, and they stay, without their schedule); :class:`ScheduleNotFound` if
    there is no such schedule.

    The runs go before the schedule's row (:func:`delete_schedule`): workers lock
    a run and then its schedule, so taking them the other way round could
    deadlock.
    """
    found = session.scalar(select(PeriodicTask.id).where(PeriodicTask.name == name))
    if found is None:
        raise ScheduleNotFound(name)
    session.execute(delete(TaskExecution).where(TaskExecution.periodic_task_id == found))
    close_incidents_of(session, found, now)


def delete_schedule(session: Session, schedule_id: int) -> None:
    """Delete the schedule's row, with its labels and tallies."""
    session.execute(delete(PeriodicTask).where(PeriodicTask.id == schedule_id))


def by_name(session: Session, name: str) -> PeriodicTask:
    """The schedule called ``name``, its labels loaded, for the transaction to read or
    change; :class:`ScheduleNotFound` if none."""
    row = session.scalar(_with_labels(select(PeriodicTask).where(PeriodicTask.name == name)))
    if row is None:
        raise ScheduleNotFound(name)
    return row
