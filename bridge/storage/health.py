"""What a schedule's health is judged from: its runs, the schedules that may be in trouble,
the beats' last tick, and the schedules counted by health.

The rule itself is pure (:mod:`bridge.rules.health`); these statements
fetch what it reads, for a page of schedules (the API, the dashboard, the
metrics) and for the watchdog, which looks only at the schedules that may be
in trouble, found through indexes, most overdue first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, case, func, literal_column, or_, select, text

from bridge.rules.health import HELD_BY_WORKER, OpenRunView, StateCounts
from bridge.rules.kinds import FINAL_STATUSES, NON_FINAL_STATUSES
from bridge.storage.database import Database
from bridge.storage.incidents import has_incident_of_its_state, settled
from bridge.storage.models import BeatInstance, Incident, PeriodicTask, TaskExecution
from bridge.storage.runs import RunsSeen, Waiting, runs_seen
from bridge.storage.schedules import finished_rows
from bridge.storage.sql import among, before, dialect_of, plain_rows

#: The columns of a schedule its health is judged by.
WATCHED_COLUMNS = (
    "id",
    "name",
    "enabled",
    "broken",
    "note",
    "nextrun",
    "failure_streak",
    "failing_since",
    "success_streak",
    "last_run_at",
    "grace",
    "max_runtime",
    "on_overrun",
    "silenced_until",
)
#: The lock of the session that lets one watchdog judge at a time: PostgreSQL's advisory
#: lock of this key, MySQL's named lock of the key and the database (the names are
#: the server's), each taken without waiting.
_JUDGE_LOCK = 0x62726A64  # "brjd"
_MYSQL_JUDGE_LOCK = "CONCAT('bridge_judge_', :key, '_', MD5(DATABASE()))"
_JUDGE_LOCKS = {
    "postgresql": (
        text("SELECT pg_try_advisory_lock(:key)"),
        text("SELECT pg_advisory_unlock(:key)"),
    ),
    "mysql": (
        text(f"SELECT GET_LOCK({_MYSQL_JUDGE_LOCK}, 0)"),
        text(f"DO RELEASE_LOCK({_MYSQL_JUDGE_LOCK})"),
    ),
}


@dataclass(frozen=True)
class AtRisk:
    """A schedule the watchdog looks at: its columns, and the runs it is judged from."""

    columns: dict[str, Any]
    open_runs: list[OpenRunView]
    last_started: datetime | None


@dataclass(frozen=True)
class Cursors:
    """Where the watchdog's looks go on from: each kind of schedule read a look at a time
    resumes after the last one read, so that with more of them than a look takes, the
    looks go round them all rather than read the same ones each time."""

    #: The failing and broken schedules without their incident: after this id (0: first).
    troubled_after: int = 0
    #: Those with their incident open (settled), in a slower round: after this id.
    settled_after: int = 0
    #: The runs that ended: at this time or later (None: none read, as a beat starts).
    ended_since: datetime | None = None
    #: Those with an open incident their row does not settle (late, overrunning, a
    #: missed occurrence): after this id.
    unsettled_after: int = 0


class Risks(NamedTuple):
    """What one look of the watchdog finds: see :meth:`HealthStore.at_risk`."""

    #: The schedules to judge, by id in order.
    ids: list[int]
    #: Where the next look goes on from.
    cursors: Cursors


class HealthStore:
    """The statements the health and the watchdog read, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def runs_seen(
        self, schedule_ids: Sequence[int], now: datetime, waiting_since: Waiting
    ) -> RunsSeen:
        with self.database.session() as session:
            return runs_seen(session, schedule_ids, now, waiting_since)

    def at_risk(
        self,
        now: datetime,
        default_grace: float,
        default_max_runtime: float,
        limit: int,
        cursors: Cursors = Cursors(),
        ended_slack: timedelta = timedelta(0),
    ) -> Risks:
        """The schedules whose trouble may have changed, at most ``limit`` of each kind, the
        most pressing first (their ids: :meth:`judged` reads them):

        - those overdue by their grace (the most overdue first);
        - those with an open run waiting longer than their grace or going longer than
          their max runtime (``default_max_runtime`` for those with none of their own;
          0: no limit), the one waiting or going longest first;
        - those with a run that became final at ``cursors.ended_since`` or later, the
          earliest first (a failure streak grown, a run expired);
        - the failing and broken ones without the incident of their state (a partial
          index), by id after ``cursors.troubled_after``;
        - a hundredth as many of those with it, by id after ``cursors.settled_after``:
          a slow round that restates and checks them whatever the look at ended runs
          missed (a worker's clock behind, a beat that was down);
        - those with an open incident that is not
          :func:`~bridge.storage.incidents.settled` (to close it when it is over), by id
          after ``cursors.unsettled_after``: with the workers down, every schedule may
          be late, and judging them all at each pass, 10,000 of them, made each pass
          hold their rows and runs at once.

        A failing or broken schedule whose incident is settled (its row says the trouble
        goes on) is otherwise read only when one of its runs ends or is overdue, or when
        it is overdue itself: nothing else changes what it is judged. Also the cursors
        of the next look: the ended runs from the last one read when the look read as
        many as it takes, else from ``now - ended_slack`` (room for a transaction that
        wrote an earlier time but committed after this look)."""
        table, run = PeriodicTask, TaskExecution
        longest_waiting = func.min(func.coalesce(run.started_at, run.queued_at, run.plan_time))
        with self.database.session() as session:
            dialect = dialect_of(session)
            grace = func.coalesce(table.grace, default_grace)
            # A run may be late or overrun (the health rule decides): waiting to start
            # since its occurrence for longer than the grace, or started longer ago than
            # the max runtime (when there is one). A run going within its limits cannot.
            waited = func.coalesce(run.plan_time, run.queued_at)
            max_runtime = func.coalesce(func.nullif(table.max_runtime, 0), default_max_runtime)
            overdue_run = or_(
                and_(
                    run.started_at.is_(None),
                    or_(waited.is_(None), before(waited, now, grace, dialect=dialect)),
                ),
                and_(
                    run.started_at.is_not(None),
                    max_runtime > 0,
                    before(run.started_at, now, max_runtime, dialect=dialect),
                ),
            )
            sources: list[Select[int | None]] = [
                # ``nextrun < now`` first: the due index finds the few rows due at all,
                # where the grace of each row alone would read the whole table.
                select(table.id)
                .where(
                    table.enabled,
                    table.nextrun < now,
                    before(table.nextrun, now, grace, dialect=dialect),
                )
                .order_by(table.nextrun)
                .limit(limit),
                select(run.periodic_task_id)
                .join(table, table.id == run.periodic_task_id)
                .where(run.status.in_(NON_FINAL_STATUSES), overdue_run)
                .group_by(run.periodic_task_id)
                .order_by(longest_waiting)
                .limit(limit),
            ]
            ids = {found for source in sources for found in session.scalars(source) if found}
            unsettled: list[int] = list(
                session.scalars(
                    select(Incident.periodic_task_id)
                    .distinct()
                    .where(
                        Incident.closed_at.is_(None),
                        Incident.periodic_task_id > cursors.unsettled_after,
                        ~settled(),
                    )
                    .order_by(Incident.periodic_task_id)
                    .limit(limit)
                )
            )
            unsettled_after = unsettled[-1] if len(unsettled) == limit else 0
            ids.update(unsettled)
            ended_since = now - ended_slack
            if cursors.ended_since is not None:
                ended = session.execute(
                    select(run.periodic_task_id, func.max(run.updated_at))
                    .where(
                        run.status.in_(FINAL_STATUSES),
                        run.updated_at >= cursors.ended_since,
                        run.periodic_task_id.is_not(None),
                    )
                    .group_by(run.periodic_task_id)
                    .order_by(func.max(run.updated_at))
                    .limit(limit)
                ).all()
                ids |= {schedule_id for schedule_id, _ in ended if schedule_id}
                if len(ended) == limit:
                    # Past a look's worth of runs that ended at one instant (a sweep marks
                    # a thousand lost in one statement), rather than read them again and
                    # again: the slow round catches any left among them.
                    last = ended[-1][1]
                    stuck = last <= cursors.ended_since
                    ended_since = last + timedelta(microseconds=1) if stuck else last
            in_trouble = (
                _failing_or_broken(dialect),
                or_(table.broken, table.enabled),  # a paused one is not failing
            )

            def turn(after: int, settled: bool, size: int) -> tuple[list[int], int]:
                has = has_incident_of_its_state()
                found = list(
                    session.scalars(
                        select(table.id)
                        .where(*in_trouble, table.id > after, has if settled else ~has)
                        .order_by(table.id)
                        .limit(size)
                    )
                )
                return found, found[-1] if len(found) == size else 0

            troubled, troubled_after = turn(cursors.troubled_after, False, limit)
            round_, settled_after = turn(cursors.settled_after, True, max(1, limit // 100))
            ids |= {*troubled, *round_}
        return Risks(
            sorted(ids), Cursors(troubled_after, settled_after, ended_since, unsettled_after)
        )

    def judged(
        self, schedule_ids: Sequence[int], now: datetime, *, waiting_since: Waiting
    ) -> list[AtRisk]:
        """The schedules a look found (:meth:`at_risk`) as the watchdog judges them: their
        columns and the runs their health is judged from; those gone since, not."""
        if not schedule_ids:
            return []
        table = PeriodicTask
        with self.database.session() as session:
            columns = [table.__table__.c[name] for name in WATCHED_COLUMNS]
            statement = select(*columns).where(among(session, table.id, schedule_ids))
            rows = {row["id"]: row for row in plain_rows(session, statement)}
            seen = runs_seen(session, list(schedule_ids), now, waiting_since)
        return [
            AtRisk(columns, seen.runs.get(schedule_id, []), seen.last_started.get(schedule_id))
            for schedule_id, columns in rows.items()
        ]

    @contextmanager
    def judging(self) -> Iterator[bool]:
        """Whether this watchdog is the one judging now: on PostgreSQL (an advisory lock)
        and MySQL (a named lock of the database) one holds a lock of the session while
        the others skip their pass, so that two never open or close the same incident
        from views taken a moment apart. SQLite has one beat."""
        if self.database.dialect not in _JUDGE_LOCKS:
            yield True
            return
        take, release = _JUDGE_LOCKS[self.database.dialect]
        with self.database.engine.connect() as connection:
            held = bool(connection.execute(take, {"key": _JUDGE_LOCK}).scalar())
            connection.commit()
            try:
                yield held
            finally:
                if held:
                    connection.execute(release, {"key": _JUDGE_LOCK})
                    connection.commit()

    def last_tick(self) -> datetime | None:
        """When some beat instance last ticked (None: none is registered)."""
        with self.database.session() as session:
            return session.scalar(select(func.max(BeatInstance.last_tick)))

    def counts(self, now: datetime, default_grace: float) -> StateCounts:
        """How many schedules are in each state their columns give (broken, finished,
        paused, late by its own grace, failing, new, ok), in one pass over
        ``periodic_task``, and the few schedules whose runs or open incidents say more
        (an overrun or late incident, a run held by a worker), each with that state and
        the one its columns gave: :func:`bridge.rules.health.states_counted` judges which
        wins."""
        table = PeriodicTask
        moved: dict[int, str] = {}
        counts: dict[str, int] = {}
        with self.database.session() as session:
            late = before(
                table.nextrun,
                now,
                func.coalesce(table.grace, default_grace),
                dialect=dialect_of(session),
            )
            category = case(
                (table.broken.is_(True), "broken"),
                (finished_rows(), "finished"),
                (table.enabled.is_(False), "paused"),
                (late, "late"),
                (table.failing_since.is_not(None), "failing"),
                (table.last_run_at.is_(None), "new"),
                else_="ok",
            ).label("category")
            for state, count in session.execute(select(category, func.count()).group_by(category)):
                counts[state] = count
            open_incidents = select(Incident.periodic_task_id, Incident.kind).where(
                Incident.closed_at.is_(None),
                Incident.periodic_task_id.is_not(None),
                Incident.kind.in_(("overrun", "late")),
            )
            for schedule_id, kind in session.execute(open_incidents):
                if schedule_id is not None:
                    moved[schedule_id] = kind
            held = select(TaskExecution.periodic_task_id).where(
                TaskExecution.status.in_(HELD_BY_WORKER),
                TaskExecution.periodic_task_id.is_not(None),
            )
            for holder in session.scalars(held.distinct()):
                if holder is not None:
                    moved.setdefault(holder, "running")
            changes = []
            if moved:
                found = select(table.id, category).where(table.id.in_(list(moved)))
                changes = [(moved[schedule_id], was) for schedule_id, was in session.execute(found)]
        return StateCounts({state: int(count) for state, count in counts.items()}, changes)


def _failing_or_broken(dialect: str) -> ColumnElement[bool]:
    """The schedules failing or broken, as the index of them reads them: the partial index
    ``ix_periodic_task_trouble`` repeats this predicate; MySQL and MariaDB, which have no
    partial index, index a generated column of it instead (revision 0015), which the
    model leaves out."""
    if dialect == "mysql":
        return literal_column("periodic_task.troubled") == 1
    return or_(PeriodicTask.failing_since.is_not(None), PeriodicTask.broken)
