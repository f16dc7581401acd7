"""The workers' statements: run records in batches, and worker heartbeats.

A worker process never builds a statement: its recorder hands a batch of
status changes to :class:`bridge.service.records.Recording`, which writes
them through the functions here in one transaction, and its heartbeat
thread calls :meth:`RecordStore.beat`.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Update, bindparam, delete, select, update
from sqlalchemy.orm import Session

from bridge.rules.kinds import RunStatus
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, TaskExecution, WorkerInstance
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
                TaskExecution.started_at,
                TaskExecution.canvas_left,
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
    """Worker heartbeats against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

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


def _statements(session: Session) -> _Statements:
    return _Statements.of(session.connection().dialect.name == "postgresql")


def insert_external(session: Session, records: Sequence[dict[str, Any]]) -> None:
    """Insert the records of runs started outside the bridge (a task sent by hand), unless
    a record of the same id is there already."""
    if records:
        session.connection().execute(insert_skipping(session, TaskExecution), list(records))


def lock_runs(session: Session, run_ids: Sequence[str]) -> dict[str, Any]:
    """The runs, locked in id order (what a batch's changes read of them), by id.

    Two workers' batches never wait on each other in a circle, and their
    schedules are locked after them, as beat does.
    """
    ids = sorted(set(run_ids))
    found = session.connection().execute(_statements(session).lock_runs, {"runs": ids})
    return {run.id: run for run in found}


def update_runs(session: Session, values: Mapping[str, Mapping[str, Any]]) -> None:
    """Write each run's new values (by run id), one statement per set of columns."""
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for run_id, columns in values.items():
        by_columns[tuple(sorted(columns))].append({"run_id": run_id, **columns})
    for rows in by_columns.values():
        session.connection().execute(_UPDATE_RUN, rows)


def show_status(
    session: Session, schedule_ids: Sequence[int], run_ids: Sequence[str], status: RunStatus
) -> None:
    """Copy ``status`` to those of the schedules whose latest run is one of the runs.

    Each such row is locked by the one transaction that holds that run's
    lock, so no other order of locks is needed.
    """
    parameters = {"schedules": sorted(schedule_ids), "runs": list(run_ids), "status": status.value}
    session.connection().execute(_statements(session).show_status, parameters)
