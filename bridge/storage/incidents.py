"""Incidents: what the watchdog reads to judge schedules, and the rows it keeps of trouble.

An incident is opened by an ``INSERT`` that a partial unique index lets
through once per kind and subject while it is open, so that several beats
(or workers) seeing the same trouble open one. Each alert, repeat and
recovery is claimed by a compare-and-set ``UPDATE`` before it is sent, so
only one of them sends it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from bridge.rules.decisions import EXPIRED
from bridge.rules.health import OpenRunView
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus
from bridge.storage import tally
from bridge.storage.database import Database
from bridge.storage.models import BeatInstance, Incident, PeriodicTask, TaskExecution
from bridge.storage.sql import among, insert_or_skip

#: The subject of an incident that is no one schedule's.
SCHEDULER = "scheduler"
#: How far back the health looks at runs that ended: expired ones, the latest start.
RECENT = timedelta(days=1)
#: The columns of a schedule the watchdog judges it by.
WATCHED_COLUMNS = (
    "id",
    "name",
    "enabled",
    "broken",
    "note",
    "nextrun",
    "failure_streak",
    "last_run_at",
    "last_failure_at",
    "grace",
    "max_runtime",
    "on_overrun",
    "silenced_until",
)


def subject_of(schedule_id: int | None) -> str:
    return SCHEDULER if schedule_id is None else f"schedule:{schedule_id}"


@dataclass(frozen=True)
class AtRisk:
    """A schedule the watchdog looks at: its columns, its open and expired runs, and when a
    run of it last started."""

    columns: dict[str, Any]
    open_runs: list[OpenRunView]
    last_started: datetime | None


@dataclass(frozen=True)
class Opening:
    """An incident to open, unless one of its kind is open for its subject."""

    kind: str
    schedule_id: int | None
    schedule_name: str | None
    since: datetime | None
    message: str
    runs: Sequence[str] = ()


class IncidentStore:
    """The watchdog's statements against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- what the watchdog judges ------------------------------------------------------

    def at_risk(self, now: datetime, limit: int) -> list[AtRisk]:
        """The schedules that may be in trouble, at most ``limit`` of each source: due ones
        (late if beat does not send them), those with open runs (late to start, or
        overrunning), the failing and broken ones (a partial index), and those with an
        open incident (to be closed when the trouble is over)."""
        table = PeriodicTask
        open_status = TaskExecution.status.in_(NON_FINAL_STATUSES)
        sources = (
            select(table.id).where(table.enabled, table.nextrun < now).limit(limit),
            select(TaskExecution.periodic_task_id)
            .where(open_status, TaskExecution.periodic_task_id.is_not(None))
            .distinct()
            .limit(limit),
            select(table.id).where(or_(table.failure_streak > 0, table.broken)).limit(limit),
            select(Incident.periodic_task_id).where(
                Incident.closed_at.is_(None), Incident.periodic_task_id.is_not(None)
            ),
        )
        columns = [table.__table__.c[name] for name in WATCHED_COLUMNS]
        with self.database.session() as session:
            ids = sorted(
                {found for source in sources for found in session.scalars(source) if found}
            )
            if not ids:
                return []
            rows = {
                row.id: dict(row._mapping)
                for row in session.execute(select(*columns).where(table.id.in_(ids)))
            }
            seen = runs_seen(session, ids, now)
        return [
            AtRisk(columns, seen.runs.get(schedule_id, []), seen.last_started.get(schedule_id))
            for schedule_id, columns in rows.items()
        ]

    def last_tick(self) -> datetime | None:
        """When some beat instance last ticked (None: none is registered)."""
        with self.database.session() as session:
            return session.scalar(select(func.max(BeatInstance.last_tick)))

    # -- incidents -----------------------------------------------------------------------

    def open_incidents(self) -> list[Incident]:
        with self.database.session() as session:
            return list(session.scalars(select(Incident).where(Incident.closed_at.is_(None))))

    def open(self, openings: Sequence[Opening], now: datetime) -> list[int]:
        """Open these incidents, those not open already; the ids of the ones opened."""
        with self.database.session() as session:
            return [
                incident_id
                for opening in openings
                if (incident_id := open_incident(session, opening, now)) is not None
            ]

    def close(self, incident_ids: Sequence[int], now: datetime) -> None:
        if not incident_ids:
            return
        with self.database.session() as session:
            session.execute(
                update(Incident)
                .where(Incident.id.in_(list(incident_ids)), Incident.closed_at.is_(None))
                .values(closed_at=now)
            )

    def close_scheduler(self, kind: str, now: datetime) -> None:
        """Close the open incident of ``kind`` that is no one schedule's (no beat ticks)."""
        with self.database.session() as session:
            session.execute(
                update(Incident)
                .where(
                    Incident.kind == kind,
                    Incident.subject == SCHEDULER,
                    Incident.closed_at.is_(None),
                )
                .values(closed_at=now)
            )

    # -- alerts ---------------------------------------------------------------------------

    def owed(
        self, now: datetime, repeat: timedelta, limit: int, scheduler_only: bool = False
    ) -> list[Incident]:
        """Incidents owing an alert (new, or open, unacknowledged and not alerted for
        ``repeat``) or a recovery (closed after being alerted); with ``scheduler_only``,
        those of no one schedule."""
        statement = select(Incident).where(_owing(now, repeat)).order_by(Incident.id).limit(limit)
        if scheduler_only:
            statement = statement.where(Incident.subject == SCHEDULER)
        with self.database.session() as session:
            return list(session.scalars(statement))

    def claim(self, incident_id: int, now: datetime, repeat: timedelta) -> str | None:
        """Take the alert an incident owes, so that no one else sends it: ``opened``,
        ``repeat`` or ``recovered``, or None when someone else took it first."""
        with self.database.session() as session:
            incident = session.get(Incident, incident_id, with_for_update=True)
            if incident is None or not session.scalar(
                select(func.count()).where(Incident.id == incident_id, _owing(now, repeat))
            ):
                return None
            if incident.closed_at is not None:
                incident.recovery_sent_at = now
                return "recovered"
            event = "opened" if incident.alerted_at is None else "repeat"
            incident.alerted_at = now
            incident.alerts += 1
            if incident.periodic_task_id is not None:
                _count_alert(session, incident.periodic_task_id, now)
            return event

    def get(self, incident_id: int) -> Incident | None:
        with self.database.session() as session:
            return session.get(Incident, incident_id)

    def page(self, open_only: bool, before_id: int | None, limit: int) -> list[Incident]:
        """Incidents, newest first."""
        statement = select(Incident).order_by(Incident.id.desc()).limit(limit)
        if open_only:
            statement = statement.where(Incident.closed_at.is_(None))
        if before_id is not None:
            statement = statement.where(Incident.id < before_id)
        with self.database.session() as session:
            return list(session.scalars(statement))

    def acknowledge(self, incident_id: int, who: str, now: datetime) -> Incident | None:
        """Acknowledge an open incident: no more repeats. None if there is no such incident."""
        with self.database.session() as session:
            incident = session.get(Incident, incident_id, with_for_update=True)
            if incident is not None and incident.acknowledged_at is None:
                incident.acknowledged_at = now
                incident.acknowledged_by = who[:255]
            return incident

    def forget_closed(self, before: datetime) -> None:
        """Delete the incidents closed (and their recovery sent) before ``before``."""
        with self.database.session() as session:
            session.execute(
                delete(Incident).where(
                    Incident.closed_at < before,
                    or_(Incident.alerted_at.is_(None), Incident.recovery_sent_at.is_not(None)),
                )
            )


@dataclass(frozen=True)
class RunsSeen:
    """What a schedule's health is judged from besides its row, for several schedules."""

    #: Per schedule, its runs not final and those that expired unstarted lately.
    runs: dict[int, list[OpenRunView]]
    #: Per schedule, when a run of it last started lately.
    last_started: dict[int, datetime]


def runs_seen(session: Session, schedule_ids: Sequence[int], now: datetime) -> RunsSeen:
    """The runs of these schedules the health looks at: open ones, and those that expired
    unstarted or started within :data:`RECENT` of ``now``."""
    seen = RunsSeen({}, {})
    if not schedule_ids:
        return seen
    run = TaskExecution
    of_these = among(session, run.periodic_task_id, schedule_ids)
    recent = now - RECENT
    statement = select(
        run.id, run.periodic_task_id, run.status, run.plan_time, run.started_at, run.queued_at
    ).where(
        of_these,
        or_(
            run.status.in_(NON_FINAL_STATUSES),
            and_(
                run.status == RunStatus.REVOKED,
                run.error == EXPIRED,
                run.started_at.is_(None),
                run.finished_at >= recent,
            ),
        ),
    )
    for found in session.execute(statement):
        seen.runs.setdefault(found.periodic_task_id, []).append(
            OpenRunView(found.id, found.status, found.plan_time, found.started_at, found.queued_at)
        )
    started = (
        select(run.periodic_task_id, func.max(run.started_at))
        .where(of_these, run.started_at >= recent)
        .group_by(run.periodic_task_id)
    )
    for schedule_id, last in session.execute(started).all():
        if schedule_id is not None and last is not None:
            seen.last_started[schedule_id] = last
    return seen


def open_incident(session: Session, opening: Opening, now: datetime) -> int | None:
    """Open an incident in the caller's transaction, unless one of its kind is open for its
    subject; its id, or None."""
    statement = (
        insert_or_skip(session, Incident)
        .values(
            kind=opening.kind,
            subject=subject_of(opening.schedule_id),
            periodic_task_id=opening.schedule_id,
            schedule_name=opening.schedule_name,
            since=opening.since,
            opened_at=now,
            message=opening.message,
            runs=json.dumps(list(opening.runs)),
            alerts=0,
        )
        .on_conflict_do_nothing()
        .returning(Incident.id)
    )
    found: int | None = session.scalar(statement)
    return found


def _owing(now: datetime, repeat: timedelta) -> ColumnElement[bool]:
    """An incident owes an alert or a recovery, and its schedule is not silenced."""
    unalerted = Incident.alerted_at.is_(None)
    silenced = (
        select(PeriodicTask.id)
        .where(PeriodicTask.id == Incident.periodic_task_id, PeriodicTask.silenced_until > now)
        .exists()
    )
    return and_(~silenced, _owes(now, repeat, unalerted))


def _owes(now: datetime, repeat: timedelta, unalerted: ColumnElement[bool]) -> ColumnElement[bool]:
    return or_(
        and_(Incident.closed_at.is_(None), unalerted),
        and_(
            Incident.closed_at.is_(None),
            Incident.acknowledged_at.is_(None),
            Incident.alerted_at < now - repeat,
        ),
        and_(
            Incident.closed_at.is_not(None),
            Incident.alerted_at.is_not(None),
            Incident.recovery_sent_at.is_(None),
        ),
    )


def _count_alert(session: Session, schedule_id: int, now: datetime) -> None:
    session.execute(
        update(PeriodicTask)
        .where(PeriodicTask.id == schedule_id)
        .values(alert_count=PeriodicTask.alert_count + 1)
        .execution_options(synchronize_session=False)
    )
    tally.add(session, schedule_id, now, alerts=1)
