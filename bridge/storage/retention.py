"""Keeping ``task_execution`` in bounds: each schedule's old final runs are deleted.

A schedule keeps its latest ``keep_runs`` runs and those planned in the last
``keep_days`` days (its own values, else the app's; 0 lifts a limit): a
final run beyond either limit goes. Never pruned: a run that has not ended,
and the latest run of each final status, so that "when did it last fail?"
always has its record. Counts do not suffer: they live on the schedule row
and in its hourly tallies.

Pruning goes a slice of schedules at a time, each schedule in a short
transaction of its own that deletes at most a batch of its runs, then notes
on the schedule's row the latest occurrence it pruned (``pruned_through``),
so that a backfill never sends a pruned occurrence again. On PostgreSQL it
locks the final runs it deletes, which neither beat nor the workers write
to, and the schedule's row for that one update, in the order the workers
use (runs, then the schedule); on SQLite each of its transactions takes the
database's write lock for a moment, as every writer there does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, or_, select, tuple_, update

from bridge.rules.kinds import FINAL_STATUSES
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, TaskExecution

#: The most runs of one schedule a transaction deletes: a few tens of milliseconds at most,
#: well inside the quiet before beat's next tick in which the watchdog starts one.
BATCH = 500


@dataclass(frozen=True)
class Limits:
    """The app's retention: runs kept per schedule by count and by age (0: no limit)."""

    keep_runs: int
    keep_days: int


@dataclass(frozen=True)
class Pruned:
    """What a slice of pruning did (or, dry, would do)."""

    schedules: int
    runs: int
    #: The id of the last schedule done; None when the slice reached the end.
    last_id: int | None


class Retention:
    """Pruning of run records against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def prune(
        self,
        after_id: int,
        schedules: int,
        limits: Limits,
        now: datetime,
        dry_run: bool = False,
        thorough: bool = False,
        go_on: Callable[[], bool] = lambda: True,
    ) -> Pruned:
        """Prune the runs of up to ``schedules`` schedules whose id follows ``after_id``:
        one batch of each (``thorough``: batches until each is done; ``dry_run``: count
        what would go, all of it). ``go_on`` is asked before each schedule: when it says
        no, the slice ends there, and the next one starts after the last schedule done."""
        table = PeriodicTask
        with self.database.session() as session:
            rows = session.execute(
                select(table.id, table.keep_runs, table.keep_days)
                .where(table.id > after_id)
                .order_by(table.id)
                .limit(schedules)
            ).all()
        removed = 0
        for done_with, (schedule_id, keep_runs, keep_days) in enumerate(rows):
            if not go_on():
                return Pruned(done_with, removed, rows[done_with - 1][0] if done_with else after_id)
            runs = limits.keep_runs if keep_runs is None else keep_runs
            days = limits.keep_days if keep_days is None else keep_days
            while runs or days:
                done = self._prune_one(schedule_id, runs, days, now, dry_run)
                removed += done
                if dry_run or not thorough or done < BATCH:
                    break
        last = rows[-1][0] if len(rows) == schedules else None
        return Pruned(len(rows), removed, last)

    def _prune_one(
        self, schedule_id: int, keep_runs: int, keep_days: int, now: datetime, dry_run: bool
    ) -> int:
        run = TaskExecution
        of_schedule = run.periodic_task_id == schedule_id
        with self.database.session() as session:
            beyond: list[ColumnElement[bool]] = []
            if keep_runs:
                last_kept = session.execute(
                    select(run.plan_time, run.attempt)
                    .where(of_schedule)
                    .order_by(run.plan_time.desc(), run.attempt.desc())
                    .offset(keep_runs)
                    .limit(1)
                ).first()
                if last_kept is not None:
                    beyond.append(tuple_(run.plan_time, run.attempt) <= tuple_(*last_kept))
            if keep_days:
                beyond.append(run.plan_time < now - timedelta(days=keep_days))
            if not beyond:
                return 0
            final_beyond = (of_schedule, run.status.in_(FINAL_STATUSES), or_(*beyond))
            if session.scalar(select(run.id).where(*final_beyond).limit(1)) is None:
                return 0  # most schedules, most passes: one look, not the six below
            kept = [
                session.scalar(
                    select(run.id)
                    .where(of_schedule, run.status == status)
                    .order_by(run.plan_time.desc(), run.attempt.desc())
                    .limit(1)
                )
                for status in sorted(FINAL_STATUSES)
            ]
            doomed: Select[Any] = select(run.id).where(
                *final_beyond, run.id.not_in([run_id for run_id in kept if run_id is not None])
            )
            if dry_run:
                return session.scalar(select(func.count()).select_from(doomed.subquery())) or 0
            gone = session.scalars(
                delete(run)
                .where(run.id.in_(doomed.limit(BATCH).scalar_subquery()))
                .returning(run.plan_time)
            ).all()
            latest = max((plan for plan in gone if plan is not None), default=None)
            if latest is not None:
                # A backfill must not take a pruned occurrence for one never sent.
                session.execute(
                    update(PeriodicTask)
                    .where(
                        PeriodicTask.id == schedule_id,
                        or_(
                            PeriodicTask.pruned_through.is_(None),
                            PeriodicTask.pruned_through < latest,
                        ),
                    )
                    .values(pruned_through=latest)
                    .execution_options(synchronize_session=False)
                )
            return len(gone)
