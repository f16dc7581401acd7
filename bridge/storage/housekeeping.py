"""Beat's housekeeping statements: runs to give up on, heartbeats, instances gone silent.

Beat runs these between fires: it reads the runs that went silent or whose
worker died, and ends those whose message expired unreceived (the
settlement of both is :mod:`bridge.service.sweeps`), and writes its own
heartbeat. Each method is one transaction; each function runs in its
caller's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from bridge.rules.decisions import EXPIRED
from bridge.rules.kinds import NON_FINAL_STATUSES, SCHEDULED_TRIGGERS, RunStatus
from bridge.storage.database import Database
from bridge.storage.models import BeatInstance, PeriodicTask, TaskExecution, WorkerInstance
from bridge.storage.sql import among, changed_rows, upsert

#: Statuses of a run whose fate hangs on one worker's life. A run only
#: RECEIVED is still unacknowledged in the broker, which hands it to another
#: worker if this one dies; a run in RETRY waits in the broker for any worker.
_HELD_BY_A_WORKER = [RunStatus.STARTED]

#: Why a run still ``SENT`` after its message expired was ended.
EXPIRED_UNRECEIVED = "expired before a worker received it"


class LostRun(NamedTuple):
    """A run given up on: its id, its schedule's name and why."""

    id: str
    schedule: str | None
    reason: str


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


class Housekeeping:
    """The runs beat's sweeps give up on, and beat's heartbeats, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def stale_runs(self, now: datetime, stale_after: timedelta, reason: str) -> list[LostRun]:
        """The open runs silent for longer than ``stale_after``, each given ``reason``.

        Beat's records not sent yet are left out: beat resumes them.
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
        return found

    def runs_of_dead_workers(self, now: datetime, timeout: timedelta) -> list[LostRun]:
        """The runs held by workers that died, with the reason of each.

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
        return [
            LostRun(run_id, name, _death_of(worker, last_seen, started_at, now - timeout))
            for run_id, name, worker, last_seen, started_at in candidates
        ]

    def forget_workers(self, before: datetime) -> None:
        """Delete the heartbeats of workers silent since ``before``."""
        with self.database.session() as session:
            session.execute(delete(WorkerInstance).where(WorkerInstance.last_seen < before))

    def heartbeat(
        self, instance: str, host: str, pid: int, started_at: datetime, now: datetime, sent: int
    ) -> None:
        """Record that ``instance`` ticks and how many runs it has sent."""
        row = {
            "id": instance,
            "host": host,
            "pid": pid,
            "started_at": started_at,
            "last_tick": now,
            "sent": sent,
            "stopped_at": None,
        }
        with self.database.session() as session:
            ticked = {"last_tick": now, "sent": sent, "stopped_at": None}
            session.execute(upsert(session, BeatInstance, row, ["id"], lambda _: ticked))

    def stopped(self, instance: str, now: datetime) -> None:
        """Mark ``instance`` stopped: it no longer ticks, and its row keeps its last tick."""
        with self.database.session() as session:
            session.execute(
                update(BeatInstance).where(BeatInstance.id == instance).values(stopped_at=now)
            )

    def forget_instances(self, before: datetime) -> None:
        """Delete the heartbeats older than ``before``, but for the latest: when the last
        beat ticked must outlive every beat, or the workers would count the silence of the
        scheduler from their own start and page at a beat's clean restart."""
        with self.database.session() as session:
            latest = session.scalar(select(func.max(BeatInstance.last_tick)))
            if latest is not None:
                session.execute(
                    delete(BeatInstance).where(
                        BeatInstance.last_tick < before, BeatInstance.last_tick < latest
                    )
                )


def expire_sent(
    session: Session, cutoff: datetime, now: datetime, limit: int
) -> Sequence[tuple[str, int | None]]:
    """End, as ``REVOKED`` ``expired``, up to ``limit`` runs still ``SENT`` at ``cutoff``
    although their message expired before it: the id and schedule of each.

    The candidates are locked by one statement (those another transaction
    holds are left for the next sweep) and ended by another. As a subquery of
    the ``UPDATE`` they were read again for every ``SENT`` run while the
    table's statistics said it was nearly empty, as they do during a burst:
    the sweep grew to seconds at 10,000 open runs and held beat's ticks back.
    """
    candidates = session.scalars(
        select(TaskExecution.id)
        .where(TaskExecution.status == RunStatus.SENT, TaskExecution.expires_at < cutoff)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    if not candidates:
        return []
    return changed_rows(
        session,
        update(TaskExecution)
        .where(
            among(session, TaskExecution.id, candidates),
            TaskExecution.status == RunStatus.SENT,
        )
        .values(status=RunStatus.REVOKED, finished_at=now, updated_at=now, error=EXPIRED),
        TaskExecution.id,
        TaskExecution.id,
        TaskExecution.periodic_task_id,
    )


def names_of(session: Session, schedule_ids: Collection[int]) -> dict[int, str]:
    """The names of these schedules, by id."""
    return dict(
        session.execute(
            select(PeriodicTask.id, PeriodicTask.name).where(
                among(session, PeriodicTask.id, schedule_ids)
            )
        ).all()
    )
