"""The workers' statements: run records in batches, and worker heartbeats.

A worker process never builds a statement: its recorder hands a batch of
status changes (:class:`bridge.rules.records.Change`) to :meth:`RecordStore.write`,
and its heartbeat thread calls :meth:`RecordStore.beat`.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Update, bindparam, delete, select, update
from sqlalchemy.orm import Session

from bridge.rules.kinds import RunStatus
from bridge.rules.records import Change, Effects
from bridge.storage.database import Database
from bridge.storage.lifecycle import SETTLE_COLUMNS, settle_run
from bridge.storage.models import PeriodicTask, TaskExecution, WorkerInstance
from bridge.storage.rows import locked_rows, snapshot, write_changed
from bridge.storage.sql import insert_skipping, one_of, upsert

#: One run's merged changes, by its id.
_UPDATE_RUN = update(TaskExecution).where(TaskExecution.id == bindparam("run_id"))


@dataclass(frozen=True)
class _Statements:
    """The statements of a batch, built once per kind of database."""

    #: The runs of a batch, locked in id order: two workers' batches never wait on each
    #: other in a circle, and their schedules are locked after them, as beat does.
    lock_runs: Select[*tuple[Any, ...]]
    #: One status, copied to the schedules whose latest run is one of the runs that took
    #: it. (A run belongs to one schedule, so the two lists need not be paired.)
    show_status: Update

    @staticmethod
    @functools.cache
    def of(postgres: bool) -> _Statements:
        return _Statements(
            lock_runs=select(
                TaskExecution.id,
                TaskExecution.status,
                TaskExecution.periodic_task_id,
                TaskExecution.trigger,
                TaskExecution.plan_time,
                TaskExecution.attempt,
                TaskExecution.queued_at,
            )
            .where(one_of(TaskExecution.id, postgres=postgres, name="runs"))
            .order_by(TaskExecution.id)
            .with_for_update(),
            show_status=update(PeriodicTask)
            .where(
                one_of(PeriodicTask.id, postgres=postgres, name="schedules"),
                one_of(PeriodicTask.last_run_id, postgres=postgres, name="runs"),
            )
            .values(last_status=bindparam("status")),
        )


class RecordStore:
    """Run records and worker heartbeats against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def write(self, changes: Sequence[Change]) -> None:
        """Write a batch of changes in one transaction, then answer those waited for.

        The runs are locked first, then the schedules of the runs that
        changed, each in id order, so that batches of several workers and
        beat's own writes (a run, then its schedule) never wait on each other
        in a circle. A run that ends is settled on its schedule in the same
        transaction (see :func:`bridge.storage.lifecycle.settle_run`).
        """
        with self.database.session() as session:
            connection = session.connection()
            statements = _Statements.of(connection.dialect.name == "postgresql")
            created = {c.run_id: c.external_record() for c in changes if c.external_task}
            if created:
                connection.execute(insert_skipping(session, TaskExecution), list(created.values()))
            ids = sorted({change.run_id for change in changes})
            effects = Effects.of(
                changes,
                {run.id: run for run in connection.execute(statements.lock_runs, {"runs": ids})},
            )
            by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
            for run_id, values in effects.values.items():
                by_columns[tuple(sorted(values))].append({"run_id": run_id, **values})
            for rows in by_columns.values():
                connection.execute(_UPDATE_RUN, rows)
            _apply_to_schedules(session, statements, effects)
        for reply, value in effects.replies:
            reply.give(value)

    def beat(self, name: str, pid: int, started_at: datetime, now: datetime) -> None:
        """Say the worker ``name`` is alive (its row in ``worker_instance``)."""
        row = {"pid": pid, "started_at": started_at, "last_seen": now}
        with self.database.session() as session:
            session.execute(
                upsert(
                    session,
                    WorkerInstance,
                    {"name": name, **row},
                    [WorkerInstance.name],
                    lambda _: row,
                )
            )

    def forget_worker(self, name: str) -> None:
        """Remove the worker's heartbeat: the runs of a worker shut down cleanly are final."""
        with self.database.session() as session:
            session.execute(delete(WorkerInstance).where(WorkerInstance.name == name))


def _apply_to_schedules(session: Session, statements: _Statements, effects: Effects) -> None:
    """Show each changed run's status on its schedule, and settle the runs that ended.

    Either way the schedule rows are locked in one pass, in id order.
    """
    schedule_of = {
        run_id: effects.runs[run_id].periodic_task_id
        for run_id in effects.values
        if effects.runs[run_id].periodic_task_id is not None
    }
    if not schedule_of:
        return
    if not effects.ended:
        # Nothing to settle: only the rows whose latest run changed are touched. Each
        # such row is locked by the one transaction that holds that run's lock.
        by_status: dict[RunStatus, list[str]] = defaultdict(list)
        for run_id in schedule_of:
            by_status[effects.status[run_id]].append(run_id)
        for status, run_ids in by_status.items():
            ids = sorted({schedule_of[run_id] for run_id in run_ids})
            parameters = {"schedules": ids, "runs": run_ids, "status": status.value}
            session.connection().execute(statements.show_status, parameters)
        return
    schedules = locked_rows(session, list(schedule_of.values()))
    before = snapshot(schedules, _SHOWN)
    for run_id, schedule_id in schedule_of.items():
        row = schedules.get(schedule_id)
        if row is not None and row.last_run_id == run_id:
            row.last_status = effects.status[run_id].value
    for run_id in effects.ended:
        row = schedules.get(schedule_of.get(run_id, -1))
        if row is not None:
            # What the outcome does to the schedule: a retry, the breaker,
            # a fixed delay's next run, a held run's start.
            settle_run(
                session, row, run_id, effects.outcome(run_id), effects.values[run_id]["updated_at"]
            )
    write_changed(session, schedules, before, _SHOWN)


#: What recording runs changes of their schedules' rows: the status of the latest run,
#: and what the settlement of those that ended changes.
_SHOWN = ("last_status", *SETTLE_COLUMNS)
