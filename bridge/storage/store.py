"""The SQL primitives of the fire sequence: claim, check, record, advance, release.

Every write that follows the claim names the claiming instance in its
``WHERE`` clause, so an instance whose mark was taken over can no longer move
a schedule it does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    Select,
    any_,
    bindparam,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bridge.rules.decisions import EXPIRED, OpenRun
from bridge.rules.kinds import NON_FINAL_STATUSES, SCHEDULED_TRIGGERS, RunStatus
from bridge.storage.database import Database
from bridge.storage.lifecycle import settle_runs
from bridge.storage.models import (
    Base,
    BeatInstance,
    PeriodicTask,
    TaskExecution,
    UTCDateTime,
    WorkerInstance,
)


def upsert_insert(session: Session, table: type[Base]) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` that can take ``ON CONFLICT DO NOTHING`` on this session's database."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def insert_ignoring_duplicates(session: Session, row: dict[str, Any]) -> bool:
    """Insert a run record unless its id or occurrence key exists; True if inserted."""
    return bool(insert_runs(session, [row]))


def among(session: Session, column: Any, values: Iterable[Any]) -> ColumnElement[bool]:
    """``column IN (values)``, written ``column = ANY(:array)`` on PostgreSQL.

    An IN list binds one parameter per value, and psycopg parses a statement
    of over 50 parameters anew at each execution (it caches small ones only):
    about 10 ms for a list of 500, several times per batch. One array
    parameter keeps the statement short and the same for any batch size.
    """
    values = list(values)
    condition: ColumnElement[bool]
    if session.get_bind().dialect.name != "postgresql":
        condition = column.in_(values)
    else:
        condition = column == any_(literal(values, ARRAY(column.type)))
    return condition


def insert_runs(session: Session, runs: Sequence[dict[str, Any]]) -> set[str]:
    """Insert run records unless their id or occurrence key exists; the ids inserted.

    The ids come back from ``RETURNING``, which lists only the rows written.
    On PostgreSQL the rows go as one array per column (``INSERT ... SELECT
    FROM unnest(...)``), for the reason given in :func:`among`; elsewhere
    SQLAlchemy sends them as multi-row statements. The runs share their keys.
    """
    if not runs:
        return set()
    if session.get_bind().dialect.name == "postgresql":
        names = list(runs[0])
        table = TaskExecution.__table__.c
        arrays = [literal([run[name] for run in runs], ARRAY(table[name].type)) for name in names]
        rows = func.unnest(*arrays).table_valued(*names).render_derived(name="new_runs")
        statement = (
            postgresql.insert(TaskExecution)
            .from_select(names, select(*rows.c))
            .on_conflict_do_nothing()
            .returning(TaskExecution.id)
        )
        return set(session.scalars(statement))
    statement = (
        upsert_insert(session, TaskExecution).on_conflict_do_nothing().returning(TaskExecution.id)
    )
    return set(session.scalars(statement, list(runs)))


def _held_rows(
    session: Session, schedule_ids: Sequence[int], instance: str, marked: datetime
) -> Select[Any]:
    """The ids of the rows whose mark is still exactly the one ``instance`` wrote."""
    return select(PeriodicTask.id).where(
        among(session, PeriodicTask.id, schedule_ids),
        PeriodicTask.worker == instance,
        PeriodicTask.marked == marked,
    )


class _LeaseLost(Exception):
    """The mark a write was guarded by is no longer this instance's."""


@dataclass(frozen=True)
class Recorded:
    """What recording a batch of runs found.

    ``inserted``: the runs this call wrote (the others existed already);
    ``statuses``: the status now of each run of a row still held;
    ``lost``: the rows whose mark was taken over, for which nothing was recorded.
    """

    inserted: set[str]
    statuses: dict[str, RunStatus]
    lost: set[int]


#: Statuses of a run whose fate hangs on one worker's life. A run only
#: RECEIVED is still unacknowledged in the broker, which hands it to another
#: worker if this one dies; a run in RETRY waits in the broker for any worker.
_HELD_BY_A_WORKER = [RunStatus.STARTED]


class LostRun(NamedTuple):
    """A run given up on: its id, its schedule's name and why."""

    id: str
    schedule: str | None
    reason: str


class Sent(NamedTuple):
    """A run just published: its schedule, its id and when its message expires."""

    schedule_id: int
    run_id: str
    expires_at: datetime | None


def _death_of(
    worker: str | None,
    last_seen: datetime | None,
    started_at: datetime | None,
    silent_since: datetime,
) -> str:
    """Why ``worker`` is taken for dead, in words for the run's record."""
    if last_seen is None:
        return f"worker {worker} has no heartbeat; presumed dead"
    if last_seen < silent_since:
        return f"worker {worker} silent since {last_seen.isoformat()}; presumed dead"
    assert started_at is not None
    return f"worker {worker} restarted at {started_at.isoformat()} while running it"


class Store:
    """Fire-sequence statements against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def claim_due(
        self, instance: str, now: datetime, lease: timedelta, limit: int
    ) -> list[PeriodicTask]:
        """Mark up to ``limit`` due rows for ``instance``, oldest ``nextrun`` first.

        A row is claimable when it is unmarked, its mark has expired, or the
        mark is this instance's own (left by a tick that failed half-way). On
        PostgreSQL the candidate rows are locked with ``SKIP LOCKED`` so that
        concurrent instances claim disjoint batches without waiting; SQLite
        serialises writers, which makes the same statement a compare-and-set.
        """
        candidates = (
            select(PeriodicTask.id)
            .where(
                PeriodicTask.enabled,
                PeriodicTask.nextrun <= now,
                or_(
                    PeriodicTask.worker.is_(None),
                    PeriodicTask.worker == instance,
                    PeriodicTask.marked < now - lease,
                ),
            )
            .order_by(PeriodicTask.nextrun)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        statement = (
            update(PeriodicTask)
            .where(PeriodicTask.id.in_(candidates.scalar_subquery()))
            .values(worker=instance, marked=now)
            .returning(PeriodicTask)
            .execution_options(synchronize_session=False)
        )
        with self.database.session() as session:
            rows = list(session.scalars(statement))
        return sorted(rows, key=lambda row: (row.nextrun or now, row.id))

    def open_runs(self, schedule_id: int) -> list[OpenRun]:
        """Runs of the schedule that have not reached a final status, oldest first."""
        return self.open_runs_of([schedule_id]).get(schedule_id, [])

    def open_runs_of(self, schedule_ids: Sequence[int]) -> dict[int, list[OpenRun]]:
        """The open runs of each of these schedules, oldest first, in one query.

        On PostgreSQL the query looks each schedule up on its own in
        ``ix_task_execution_schedule_status``: asked as one ``IN`` list, the
        planner may read every open run of every schedule through the status
        index instead, which it believes selective until the table is next
        analysed. During a burst every fired row adds an open run, and that
        read grew with each batch. The ``OFFSET 0`` keeps the per-schedule
        lookup from being flattened into a join the planner could reorder.
        """
        open_status = TaskExecution.status.in_(NON_FINAL_STATUSES)
        columns = (
            TaskExecution.id,
            TaskExecution.status,
            TaskExecution.plan_time,
            TaskExecution.updated_at,
            TaskExecution.trigger,
            TaskExecution.attempt,
        )
        with self.database.session() as session:
            if session.get_bind().dialect.name == "postgresql":
                ids = cast(list(schedule_ids), ARRAY(Integer))
                wanted = func.unnest(ids).table_valued("id").render_derived(name="wanted")
                runs = (
                    select(*columns)
                    .where(TaskExecution.periodic_task_id == wanted.c.id, open_status)
                    .offset(0)
                    .lateral()
                )
                statement = (
                    select(wanted.c.id, *runs.c).join(runs, true()).order_by(runs.c.updated_at)
                )
            else:
                statement = (
                    select(TaskExecution.periodic_task_id, *columns)
                    .where(TaskExecution.periodic_task_id.in_(schedule_ids), open_status)
                    .order_by(TaskExecution.updated_at)
                )
            found: dict[int, list[OpenRun]] = {}
            for schedule_id, *run in session.execute(statement):
                found.setdefault(schedule_id, []).append(OpenRun(*run))
        return found

    def finish_runs(
        self, run_ids: Sequence[str], status: RunStatus, now: datetime, reason: str
    ) -> None:
        """Close runs that will not report (LOST), were replaced (REVOKED) or not sent (FAILURE).

        They stop blocking their schedule; a LOST run is then settled like a
        failure a worker reported.
        """
        with self.database.session() as session:
            finished = list(
                session.scalars(
                    update(TaskExecution)
                    .where(
                        TaskExecution.id.in_(run_ids),
                        TaskExecution.status.in_(NON_FINAL_STATUSES),
                    )
                    .values(status=status, finished_at=now, updated_at=now, error=reason)
                    .returning(TaskExecution.id)
                )
            )
            if status is RunStatus.LOST:
                settle_runs(session, finished, now)

    def record_runs(
        self, runs: Sequence[dict[str, Any]], instance: str, marked: datetime
    ) -> Recorded:
        """Insert run records (``PENDING``) for the rows whose mark ``instance`` still holds.

        One transaction for a whole batch: the records are inserted, then the
        schedule rows are locked and their marks checked, and the records of
        rows whose lease was taken over are removed again, so an instance that
        lost a lease records nothing through it and learns it must not
        publish. The lock keeps another instance from taking a row over in
        between (its claim skips locked rows). The runs are written before
        the schedule rows are locked, the order the workers use (a run, then
        its schedule), so the two never deadlock. The statuses returned say
        which runs still need publishing.
        """
        schedule_ids = sorted({run["periodic_task_id"] for run in runs})
        run_ids = [run["id"] for run in runs]
        with self.database.session() as session:
            inserted = insert_runs(session, runs)
            held = set(
                session.scalars(
                    _held_rows(session, schedule_ids, instance, marked)
                    .order_by(PeriodicTask.id)
                    .with_for_update()
                )
            )
            lost = set(schedule_ids) - held
            undone = [run["id"] for run in runs if run["periodic_task_id"] in lost]
            if undone:
                session.execute(
                    delete(TaskExecution).where(
                        among(session, TaskExecution.id, inserted & set(undone))
                    )
                )
            statuses = {
                run_id: RunStatus(status)
                for run_id, status in session.execute(
                    select(TaskExecution.id, TaskExecution.status).where(
                        among(session, TaskExecution.id, run_ids),
                        among(session, TaskExecution.periodic_task_id, held),
                    )
                )
            }
        return Recorded(inserted - set(undone), statuses, lost)

    def mark_sent(self, runs: Sequence[Sent], now: datetime) -> None:
        """``PENDING`` → ``SENT`` for these runs, each with its message's expiry.

        A worker that already reported progress keeps its status. A schedule
        that already names the run as its last shows it sent too; it is found
        by its id (``last_run_id`` has no index).
        """
        if not runs:
            return
        schedule_ids = sorted({run.schedule_id for run in runs})
        run_ids = [run.run_id for run in runs]
        values = {"status": RunStatus.SENT, "queued_at": now, "updated_at": now}
        with self.database.session() as session:
            unsent = TaskExecution.status == RunStatus.PENDING
            if session.get_bind().dialect.name == "postgresql":
                # One statement, its runs and expiries bound as two arrays (see among).
                sent = (
                    func.unnest(
                        literal(run_ids, ARRAY(TaskExecution.id.type)),
                        literal([run.expires_at for run in runs], ARRAY(UTCDateTime())),
                    )
                    .table_valued("id", "expires_at")
                    .render_derived(name="sent")
                )
                session.execute(
                    update(TaskExecution)
                    .where(TaskExecution.id == sent.c.id, unsent)
                    .values(**values, expires_at=sent.c.expires_at)
                )
            else:
                session.connection().execute(
                    update(TaskExecution)
                    .where(TaskExecution.id == bindparam("run_id"), unsent)
                    .values(**values, expires_at=bindparam("expires", type_=UTCDateTime())),
                    [{"run_id": run.run_id, "expires": run.expires_at} for run in runs],
                )
            session.execute(
                update(PeriodicTask)
                .where(
                    among(session, PeriodicTask.id, schedule_ids),
                    among(session, PeriodicTask.last_run_id, run_ids),
                    PeriodicTask.last_status == RunStatus.PENDING,
                )
                .values(last_status=RunStatus.SENT)
                .execution_options(synchronize_session=False)
            )

    def expire_unreceived(self, cutoff: datetime, now: datetime, limit: int) -> list[LostRun]:
        """End, as ``REVOKED`` ``expired``, up to ``limit`` runs still ``SENT`` at ``cutoff``
        although their message expired before it; returns them.

        No worker has said it received such a run, so it never started: the
        broker dropped the message at its expiry (RabbitMQ turns Celery's
        expiry into a per-message TTL), or a worker will find it expired and
        discard it. Either way it will never run, and left ``SENT`` it would
        block its schedule until it went stale. Its schedule is settled like
        a worker's record of the expiry: a fixed delay's next run, a held
        occurrence or waiting catch-up work may go, and it is counted.
        """
        with self.database.session() as session:
            candidates = (
                select(TaskExecution.id)
                .where(TaskExecution.status == RunStatus.SENT, TaskExecution.expires_at < cutoff)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            expired = session.execute(
                update(TaskExecution)
                .where(
                    TaskExecution.id.in_(candidates.scalar_subquery()),
                    TaskExecution.status == RunStatus.SENT,
                )
                .values(status=RunStatus.REVOKED, finished_at=now, updated_at=now, error=EXPIRED)
                .returning(TaskExecution.id, TaskExecution.periodic_task_id)
                .execution_options(synchronize_session=False)
            ).all()
            if not expired:
                return []
            settle_runs(session, [run_id for run_id, _ in expired], now)
            names: dict[int | None, str] = dict(
                session.execute(
                    select(PeriodicTask.id, PeriodicTask.name).where(
                        among(session, PeriodicTask.id, {s for _, s in expired if s is not None})
                    )
                )
                .tuples()
                .all()
            )
        reason = "expired before a worker received it"
        return [LostRun(run_id, names.get(schedule_id), reason) for run_id, schedule_id in expired]

    @contextmanager
    def locked(
        self, schedule_id: int, instance: str, marked: datetime
    ) -> Iterator[tuple[Session, PeriodicTask] | None]:
        """The row locked for update while this instance's mark on it holds, else None.

        The guard is the mark exactly as this instance wrote it (``worker`` and
        ``marked``), so a mark taken over by another instance fails it.
        """
        with self.locked_rows([schedule_id], instance, marked) as (session, rows):
            yield (session, rows[schedule_id]) if rows else None

    @contextmanager
    def locked_rows(
        self, schedule_ids: Sequence[int], instance: str, marked: datetime
    ) -> Iterator[tuple[Session, dict[int, PeriodicTask]]]:
        """Those of the rows whose mark ``instance`` still holds, locked for update, by id.

        Locked in id order, so two transactions locking overlapping sets
        cannot deadlock on each other.
        """
        with self.database.session() as session:
            statement = (
                select(PeriodicTask)
                .where(
                    among(session, PeriodicTask.id, schedule_ids),
                    PeriodicTask.worker == instance,
                    PeriodicTask.marked == marked,
                )
                .order_by(PeriodicTask.id)
                .with_for_update()
            )
            yield session, {row.id: row for row in session.scalars(statement)}

    def statuses(self, session: Session, run_ids: Sequence[str]) -> dict[str, str]:
        """The current status of each of these runs, read without a lock."""
        if not run_ids:
            return {}
        statement = select(TaskExecution.id, TaskExecution.status).where(
            among(session, TaskExecution.id, run_ids)
        )
        return dict(session.execute(statement).tuples().all())

    def renew(self, instance: str, schedule_ids: Sequence[int], now: datetime) -> set[int]:
        """Restart the leases ``instance`` still holds on these rows; the ids it holds.

        A row another instance has taken over is not renewed and not returned.
        """
        with self.database.session() as session:
            return set(
                session.scalars(
                    update(PeriodicTask)
                    .where(PeriodicTask.id.in_(schedule_ids), PeriodicTask.worker == instance)
                    .values(marked=now)
                    .returning(PeriodicTask.id)
                    .execution_options(synchronize_session=False)
                )
            )

    def reread(self, schedule_id: int, instance: str, marked: datetime) -> PeriodicTask | None:
        """The row as it is now, while this instance's mark on it holds, else None."""
        with self.database.session() as session:
            return session.scalar(
                select(PeriodicTask).where(
                    PeriodicTask.id == schedule_id,
                    PeriodicTask.worker == instance,
                    PeriodicTask.marked == marked,
                )
            )

    def sweep_stale(self, now: datetime, stale_after: timedelta, reason: str) -> list[LostRun]:
        """Mark ``LOST`` every open run silent for longer than ``stale_after``.

        Their schedules are settled too: a lost run may owe a retry, count
        towards the breaker, free a held occurrence or start a fixed delay.
        """
        with self.database.session() as session:
            found = [
                LostRun(run_id, name, reason)
                for run_id, name in session.execute(
                    select(TaskExecution.id, PeriodicTask.name)
                    .outerjoin(PeriodicTask, PeriodicTask.id == TaskExecution.periodic_task_id)
                    .where(
                        TaskExecution.status.in_(NON_FINAL_STATUSES),
                        TaskExecution.updated_at < now - stale_after,
                        # Beat's unsent records are resumed, never lost.
                        or_(
                            TaskExecution.status != RunStatus.PENDING,
                            TaskExecution.trigger.not_in(list(SCHEDULED_TRIGGERS)),
                        ),
                    )
                )
            ]
        return self.give_up(found, now)

    def sweep_dead_workers(self, now: datetime, timeout: timedelta) -> list[LostRun]:
        """Mark ``LOST`` the runs held by workers that died, with the reason of each.

        A worker is dead when its heartbeat is older than ``timeout``, missing,
        or younger than the run's last change (it restarted since, under the
        same name). Runs changed within ``timeout`` are left alone: their
        worker was alive then, and its heartbeat may be a moment behind.
        """
        with self.database.session() as session:
            candidates = session.execute(
                select(
                    TaskExecution.id,
                    PeriodicTask.name,
                    TaskExecution.worker,
                    WorkerInstance.last_seen,
                    WorkerInstance.started_at,
                )
                .outerjoin(PeriodicTask, PeriodicTask.id == TaskExecution.periodic_task_id)
                .outerjoin(WorkerInstance, WorkerInstance.name == TaskExecution.worker)
                .where(
                    TaskExecution.status.in_(_HELD_BY_A_WORKER),
                    TaskExecution.worker.is_not(None),
                    TaskExecution.updated_at < now - timeout,
                    or_(
                        WorkerInstance.name.is_(None),
                        WorkerInstance.last_seen < now - timeout,
                        WorkerInstance.started_at > TaskExecution.updated_at,
                    ),
                )
            ).all()
        return self.give_up(
            [
                LostRun(run_id, name, _death_of(worker, last_seen, started_at, now - timeout))
                for run_id, name, worker, last_seen, started_at in candidates
            ],
            now,
        )

    def give_up(self, runs: list[LostRun], now: datetime) -> list[LostRun]:
        """Mark ``runs`` LOST, each with its reason, and settle their schedules; returns them."""
        for reason in {run.reason for run in runs}:
            ids = [run.id for run in runs if run.reason == reason]
            self.finish_runs(ids, RunStatus.LOST, now, reason)
        return runs

    def forget_workers(self, before: datetime) -> None:
        """Delete the heartbeats of workers silent since ``before``."""
        with self.database.session() as session:
            session.execute(delete(WorkerInstance).where(WorkerInstance.last_seen < before))

    def disable(self, schedule_id: int, instance: str, now: datetime, note: str) -> None:
        """Take a schedule whose row cannot be used out of rotation, with the reason."""
        with self.database.session() as session:
            session.execute(
                update(PeriodicTask)
                .where(PeriodicTask.id == schedule_id, PeriodicTask.worker == instance)
                .values(enabled=False, note=note, worker=None, marked=None, updated_at=now)
                .execution_options(synchronize_session=False)
            )

    def release(self, instance: str, schedule_ids: Sequence[int] | None = None) -> None:
        """Clear the marks ``instance`` holds (all of them, or those of ``schedule_ids``)."""
        statement = update(PeriodicTask).where(PeriodicTask.worker == instance)
        if schedule_ids is not None:
            statement = statement.where(PeriodicTask.id.in_(schedule_ids))
        with self.database.session() as session:
            session.execute(
                statement.values(worker=None, marked=None).execution_options(
                    synchronize_session=False
                )
            )

    def heartbeat(
        self, instance: str, host: str, pid: int, started_at: datetime, now: datetime, sent: int
    ) -> None:
        """Record that ``instance`` ticks, and clear instances silent since ``now - stale``."""
        row = {
            "id": instance,
            "host": host,
            "pid": pid,
            "started_at": started_at,
            "last_tick": now,
            "sent": sent,
        }
        with self.database.session() as session:
            statement = upsert_insert(session, BeatInstance).values(row)
            session.execute(
                statement.on_conflict_do_update(
                    index_elements=["id"], set_={"last_tick": now, "sent": sent}
                )
            )

    def forget_instances(self, before: datetime, instance: str | None = None) -> None:
        """Delete the heartbeats older than ``before`` (and ``instance``'s own, if given)."""
        stale = BeatInstance.last_tick < before
        if instance is not None:
            stale = or_(stale, BeatInstance.id == instance)
        with self.database.session() as session:
            session.execute(delete(BeatInstance).where(stale))

    def next_due(self) -> datetime | None:
        """The earliest ``nextrun`` of the enabled schedules no instance holds.

        Rows another instance holds are left out: it unmarks them when done,
        and a mark that expires is noticed at the next poll.
        """
        with self.database.session() as session:
            return session.scalar(
                select(func.min(PeriodicTask.nextrun)).where(
                    PeriodicTask.enabled, PeriodicTask.worker.is_(None)
                )
            )
