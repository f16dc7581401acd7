"""Incidents: the rows the watchdog keeps of trouble, and the claims on their alerts.

An incident is opened by an ``INSERT`` that a partial unique index lets
through once per kind and subject while it is open, so that several beats
(or workers) seeing the same trouble open one. An alert it owes (its
opening, a repeat, its recovery) is claimed for a short while before it is
sent, and marked sent once it is: two senders never both send it, and a
sender that dies holding a claim leaves it to another once the claim lapses.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Insert, and_, case, delete, or_, select, tuple_, update
from sqlalchemy.orm import Session

from bridge.storage import tally
from bridge.storage.database import Database
from bridge.storage.models import Incident, PeriodicTask
from bridge.storage.sql import among, changed_rows, insert_skipping_on

#: The subject of an incident that is no one schedule's.
SCHEDULER = "scheduler"
#: How long a claim on an alert holds: longer than sending it takes.
CLAIM = timedelta(seconds=30)
#: The most incidents one ``INSERT`` opens.
OPEN_BATCH = 500


def subject_of(schedule_id: int | None) -> str:
    return SCHEDULER if schedule_id is None else f"schedule:{schedule_id}"


@dataclass(frozen=True)
class Opening:
    """An incident to open, unless one of its kind is open for its subject."""

    kind: str
    schedule_id: int | None
    schedule_name: str | None
    since: datetime | None
    message: str
    runs: Sequence[str] = ()


class OpenIncident(NamedTuple):
    """An incident open: what the watchdog compares with its judgment of a pass."""

    id: int
    kind: str
    periodic_task_id: int | None
    alerted_at: datetime | None
    message: str


class IncidentStore:
    """Incidents and their alerts, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def open_incidents(self, judged: Sequence[int]) -> list[OpenIncident]:
        """The incidents open that a pass of the watchdog may close or restate: those of the
        schedules it ``judged``, and the scheduler's (of no schedule). Those of a schedule
        it did not judge stay as they are until a pass does (one whose row does not say
        its trouble goes on, :func:`settled`, is judged within a few passes:
        :meth:`~bridge.storage.health.HealthStore.at_risk`). Their columns only (ORM
        objects of thousands of open incidents cost a pass more than reading them)."""
        statement = select(
            Incident.id,
            Incident.kind,
            Incident.periodic_task_id,
            Incident.alerted_at,
            Incident.message,
        ).where(Incident.closed_at.is_(None))
        with self.database.session() as session:
            may_change = or_(
                Incident.periodic_task_id.is_(None),
                among(session, Incident.periodic_task_id, judged),
            )
            found = session.connection().execute(statement.where(may_change))
            return [OpenIncident(*row) for row in found]

    def open(self, openings: Sequence[Opening], now: datetime) -> list[int]:
        """Open these incidents, those not open already; the ids of the ones opened.

        One ``INSERT`` takes up to :data:`OPEN_BATCH` of them: a watchdog that finds
        thousands of schedules late after an outage opens their incidents in a few
        statements, not one each.
        """
        if not openings:
            return []
        with self.database.session() as session:
            return open_incidents(session, openings, now)

    def restate(self, messages: dict[int, str]) -> None:
        """Give open incidents the message their trouble has now (by incident id)."""
        if not messages:
            return
        with self.database.session() as session:
            for incident_id, message in sorted(messages.items()):
                session.execute(
                    update(Incident)
                    .where(Incident.id == incident_id, Incident.closed_at.is_(None))
                    .values(message=message)
                )

    def close(self, incident_ids: Sequence[int], now: datetime) -> None:
        if not incident_ids:
            return
        with self.database.session() as session:
            session.execute(
                update(Incident)
                .where(Incident.id.in_(list(incident_ids)), Incident.closed_at.is_(None))
                .values(closed_at=now)
            )

    # -- alerts -----------------------------------------------------------------------------

    def owed(
        self, now: datetime, repeat: timedelta, limit: int, scheduler_only: bool = False
    ) -> list[Incident]:
        """Incidents owing an alert (new, or open, unacknowledged and not alerted for
        ``repeat``) or a recovery (closed after being alerted), not claimed by anyone;
        with ``scheduler_only``, those of no one schedule."""
        statement = select(Incident).where(_owing(now, repeat)).order_by(Incident.id).limit(limit)
        if scheduler_only:
            statement = statement.where(Incident.subject == SCHEDULER)
        with self.database.session() as session:
            return list(session.scalars(statement))

    def claim(self, incident_id: int, now: datetime, repeat: timedelta) -> str | None:
        """Claim the alert an incident owes, for :data:`CLAIM`: ``opened``, ``repeat`` or
        ``recovered``, or None when it owes none or someone else claimed it first."""
        with self.database.session() as session:
            # One statement asks whether it owes an alert and claims it, so that a sender
            # that read it as owing just before another sent it finds nothing to claim.
            claimed = session.execute(
                update(Incident)
                .where(Incident.id == incident_id, _owing(now, repeat))
                .values(claimed_until=now + CLAIM)
                .execution_options(synchronize_session=False)
            )
            if not claimed.rowcount:  # type: ignore[attr-defined]
                return None
            # Read under the claim's lock: the row as the last sender left it.
            closed_at, alerted_at = session.execute(
                select(Incident.closed_at, Incident.alerted_at)
                .where(Incident.id == incident_id)
                .with_for_update()
            ).one()
            if closed_at is not None:
                return "recovered"
            return "opened" if alerted_at is None else "repeat"

    def sent(self, incident_id: int, event: str, now: datetime, error: str | None = None) -> None:
        """The claimed alert went out: mark it, release the claim, and count it on its
        schedule (in a transaction of its own: schedule rows are locked before incident
        rows, never after). ``error``: why some target never got it (given up on)."""
        with self.database.session() as session:
            values: dict[str, object] = {
                "claimed_until": None,
                "alert_attempts": 0,
                "alert_error": error,
                "alert_sent_to": None,
            }
            if event == "recovered":
                values["recovery_sent_at"] = now
            else:
                values.update(alerted_at=now, alerts=Incident.alerts + 1)
            changed = changed_rows(
                session,
                update(Incident).where(Incident.id == incident_id).values(**values),
                Incident.id,
                Incident.periodic_task_id,
            )
            schedule_id = changed[0][0] if changed else None
        if event != "recovered" and schedule_id is not None:
            with self.database.session() as session:
                session.execute(
                    update(PeriodicTask)
                    .where(PeriodicTask.id == schedule_id)
                    .values(alert_count=PeriodicTask.alert_count + 1)
                    .execution_options(synchronize_session=False)
                )
                tally.add(session, schedule_id, now, alerts=1)

    def defer(self, incident_id: int, until: datetime, error: str, sent_to: str) -> None:
        """The claimed alert was refused by a target (an alert URL, the alert task): it is
        tried again from ``until``; the incident says why (one more attempt in a row) and
        which targets have it."""
        with self.database.session() as session:
            session.execute(
                update(Incident)
                .where(Incident.id == incident_id)
                .values(
                    claimed_until=until,
                    alert_attempts=Incident.alert_attempts + 1,
                    alert_error=error,
                    alert_sent_to=sent_to,
                )
            )

    # -- operators ---------------------------------------------------------------------------

    def page(self, open_only: bool, before_id: int | None, limit: int) -> list[Incident]:
        """Incidents, newest first."""
        statement = select(Incident).order_by(Incident.id.desc()).limit(limit)
        if open_only:
            statement = statement.where(Incident.closed_at.is_(None))
        if before_id is not None:
            statement = statement.where(Incident.id < before_id)
        with self.database.session() as session:
            return list(session.scalars(statement))

    def forget_closed(self, before: datetime) -> None:
        """Delete the incidents closed (and their recovery sent) before ``before``."""
        with self.database.session() as session:
            session.execute(
                delete(Incident).where(
                    Incident.closed_at < before,
                    or_(Incident.alerted_at.is_(None), Incident.recovery_sent_at.is_not(None)),
                )
            )


def _goes_on() -> ColumnElement[bool]:
    """An open incident of a schedule (both rows in the statement) goes on whatever the
    schedule's runs, as its row says: a ``broken`` one while the schedule is broken, a
    ``failing`` one while it is failing (enabled, with a failure streak) or broken. That
    is the health rule's verdict in either case: nothing ranks above broken, and the
    runs of a failing schedule that overrun or are late find it otherwise."""
    table = PeriodicTask
    return and_(
        table.id == Incident.periodic_task_id,
        Incident.closed_at.is_(None),
        or_(
            and_(Incident.kind == "broken", table.broken),
            and_(
                Incident.kind == "failing",
                or_(table.broken, and_(table.enabled, table.failing_since.is_not(None))),
            ),
        ),
    )


def settled() -> ColumnElement[bool]:
    """Whether an open incident goes on as its schedule's row says (:func:`_goes_on`).

    Until a run of the schedule ends or its row changes, such an incident stays as it
    is, and the watchdog need not judge the schedule: with tens of thousands of schedules
    failing, judging every one of them at each pass cost more than all the rest of an
    idle beat."""
    return select(PeriodicTask.id).where(_goes_on()).exists()


def has_incident_of_its_state() -> ColumnElement[bool]:
    """Whether a failing or broken schedule (in the statement) has the open incident of its
    state, one that is :func:`settled`: a ``broken`` one when it is broken (a schedule
    whose ``failing`` incident is open when its breaker trips still needs its ``broken``
    one), else a ``failing`` one."""
    table = PeriodicTask
    kind = case((table.broken, "broken"), else_="failing")
    return select(Incident.id).where(_goes_on(), Incident.kind == kind).exists()


def open_incident(session: Session, opening: Opening, now: datetime) -> int | None:
    """Open an incident in the caller's transaction, unless one of its kind is open for its
    subject; its id, or None."""
    opened = open_incidents(session, [opening], now)
    return opened[0] if opened else None


def open_incidents(session: Session, openings: Sequence[Opening], now: datetime) -> list[int]:
    """Open incidents in the caller's transaction, each unless one of its kind is open for
    its subject, :data:`OPEN_BATCH` to a statement; the ids of those opened.

    The statement is built once per dialect and run with each incident's values
    (SQLAlchemy sends them as multi-row ``INSERT`` statements): built from the
    rows, it differed with their number and was compiled anew at each of the
    watchdog's passes. On MySQL, without ``RETURNING``, the ids are read back:
    the open incidents of those kinds and subjects opened at ``now``, which the
    unique index of the open incidents lets only this statement's rows be.
    """
    connection = session.connection()
    dialect = connection.dialect.name
    opened: list[int] = []
    for start in range(0, len(openings), OPEN_BATCH):
        rows = [_row(opening, now) for opening in openings[start : start + OPEN_BATCH]]
        if dialect != "mysql":
            opened += connection.scalars(_opening(dialect), rows)
            continue
        connection.execute(_opening(dialect), rows)
        keys = [(row["kind"], row["subject"]) for row in rows]
        opened += connection.scalars(
            select(Incident.id).where(
                Incident.closed_at.is_(None),
                Incident.opened_at == now,
                tuple_(Incident.kind, Incident.subject).in_(keys),
            )
        )
    return opened


@functools.cache
def _opening(dialect: str) -> Insert:
    """The ``INSERT`` of :func:`open_incidents`, its values given when it runs."""
    statement = insert_skipping_on(dialect, Incident)
    if dialect == "mysql":
        return statement
    return statement.returning(Incident.id)


def _row(opening: Opening, now: datetime) -> dict[str, Any]:
    return {
        "kind": opening.kind,
        "subject": subject_of(opening.schedule_id),
        "periodic_task_id": opening.schedule_id,
        "schedule_name": opening.schedule_name,
        "since": opening.since,
        "opened_at": now,
        "message": opening.message,
        "runs": json.dumps(list(opening.runs)),
        "alerts": 0,
    }


def close_incidents_of(session: Session, schedule_id: int, now: datetime) -> None:
    """Close the open incidents of a schedule about to be deleted: their recoveries go."""
    session.execute(
        update(Incident)
        .where(Incident.periodic_task_id == schedule_id, Incident.closed_at.is_(None))
        .values(closed_at=now)
    )


def _unclaimed(now: datetime) -> ColumnElement[bool]:
    return or_(Incident.claimed_until.is_(None), Incident.claimed_until < now)


def _owing(now: datetime, repeat: timedelta) -> ColumnElement[bool]:
    """An incident owes an alert or a recovery, unclaimed, and its schedule is not silenced."""
    silenced = (
        select(PeriodicTask.id)
        .where(PeriodicTask.id == Incident.periodic_task_id, PeriodicTask.silenced_until > now)
        .exists()
    )
    still_open = Incident.closed_at.is_(None)
    owes = or_(
        and_(still_open, Incident.alerted_at.is_(None)),
        and_(still_open, Incident.acknowledged_at.is_(None), Incident.alerted_at < now - repeat),
        and_(
            Incident.closed_at.is_not(None),
            Incident.alerted_at.is_not(None),
            Incident.recovery_sent_at.is_(None),
        ),
    )
    return and_(~silenced, _unclaimed(now), owes)


def acknowledge(
    session: Session, incident_id: int, who: str, now: datetime
) -> tuple[Incident | None, bool]:
    """Acknowledge an incident (one acknowledged already keeps who and when): the incident
    (None: no such incident), and whether this call acknowledged it."""
    incident = session.get(Incident, incident_id, with_for_update=True)
    if incident is None or incident.acknowledged_at is not None:
        return incident, False
    incident.acknowledged_at = now
    incident.acknowledged_by = who[:255]
    return incident, True
