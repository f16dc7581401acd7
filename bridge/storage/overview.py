"""What a scrape of ``/metrics`` reads: every schedule's counters in one pass, capped.

A few statements whatever the table holds: the first ``cap`` schedules by
name with the columns the per-schedule series show (their counters live on
the row, so no run record is counted), their open runs, the schedules
counted by state and their counters summed over the whole table, and the
heartbeats of beats and workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, select

from bridge.rules.kinds import NON_FINAL_STATUSES
from bridge.storage.counts import COUNTER_OF
from bridge.storage.database import Database
from bridge.storage.models import (
    BeatInstance,
    Incident,
    PeriodicTask,
    TaskExecution,
    WorkerInstance,
)
from bridge.storage.runs import RunsSeen, Waiting, runs_seen
from bridge.storage.schedules import finished_rows, paused_rows

#: The columns of each schedule a scrape shows.
SCHEDULE_COLUMNS = (
    "id",
    "name",
    "task",
    "timer",
    "timezone",
    "overlap",
    "catchup",
    "enabled",
    "broken",
    "note",
    "nextrun",
    "grace",
    "max_runtime",
    "last_run_at",
    "last_success_at",
    "last_failure_at",
    "failure_streak",
    "failing_since",
    "success_streak",
    "success_count",
    "failure_count",
    "revoked_count",
    "lost_count",
    "skipped_count",
    "missed_count",
    "excluded_count",
    "expired_count",
    "runtime_total",
)
#: The column counting the runs of a schedule that ended with each final status.
ENDED_COLUMNS = {status: column for status, (column, _) in COUNTER_OF.items()}
#: The counters summed over every schedule.
SUMMED = (
    "success_count",
    "failure_count",
    "revoked_count",
    "lost_count",
    "skipped_count",
    "missed_count",
    "excluded_count",
    "expired_count",
)


@dataclass(frozen=True)
class Overview:
    """Everything one scrape shows."""

    #: The first schedules by name, each a mapping of :data:`SCHEDULE_COLUMNS`.
    schedules: list[dict[str, Any]]
    #: The runs the health of each schedule shown is judged from.
    seen: RunsSeen
    #: How many schedules there are: all, enabled, paused (disabled, neither broken nor
    #: finished), finished, broken.
    counts: dict[str, int]
    #: :data:`SUMMED` over every schedule.
    totals: dict[str, int]
    #: Open runs of every schedule, by status.
    open_totals: dict[str, int]
    instances: list[BeatInstance]
    workers: list[WorkerInstance]
    #: Enabled schedules due before ``now`` minus their grace: late ones.
    late: int
    #: Open incidents, by kind.
    incidents: dict[str, int]


def _count_where(*conditions: ColumnElement[bool]) -> ColumnElement[int]:
    """How many rows meet ``conditions``: a sum of cases, which MySQL and MariaDB take,
    where they refuse ``count(*) FILTER (WHERE ...)``."""
    return func.coalesce(func.sum(case((and_(*conditions), 1), else_=0)), 0)


class OverviewStore:
    """The statements of a metrics scrape."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def read(
        self, cap: int, late_before: datetime, now: datetime, waiting_since: Waiting
    ) -> Overview:
        table = PeriodicTask.__table__.c
        shown = select(*(table[name] for name in SCHEDULE_COLUMNS)).order_by(table.name).limit(cap)
        counted = select(
            func.count(),
            _count_where(table.enabled.is_(True)),
            _count_where(paused_rows()),
            _count_where(finished_rows()),
            _count_where(table.broken.is_(True)),
            _count_where(table.enabled.is_(True), table.nextrun < late_before),
            *(func.coalesce(func.sum(table[name]), 0) for name in SUMMED),
        )
        open_status = TaskExecution.status.in_(NON_FINAL_STATUSES)
        with self.database.session() as session:
            schedules = [dict(row._mapping) for row in session.execute(shown)]
            ids = [row["id"] for row in schedules]
            seen = runs_seen(session, ids, now, waiting_since, count_open=True)
            open_totals = dict(
                session.execute(
                    select(TaskExecution.status, func.count())
                    .where(open_status)
                    .group_by(TaskExecution.status)
                ).all()
            )
            incidents = dict(
                session.execute(
                    select(Incident.kind, func.count())
                    .where(Incident.closed_at.is_(None))
                    .group_by(Incident.kind)
                ).all()
            )
            every, enabled, paused, finished, broken, late, *sums = session.execute(counted).one()
            instances = list(
                session.scalars(
                    select(BeatInstance)
                    .where(BeatInstance.stopped_at.is_(None))
                    .order_by(BeatInstance.id)
                )
            )
            workers = list(session.scalars(select(WorkerInstance).order_by(WorkerInstance.name)))
        return Overview(
            schedules=schedules,
            seen=seen,
            counts={
                "all": every,
                "enabled": enabled,
                "paused": paused,
                "finished": finished,
                "broken": broken,
            },
            totals={name: int(value) for name, value in zip(SUMMED, sums, strict=True)},
            open_totals=open_totals,
            instances=instances,
            workers=workers,
            late=late,
            incidents=incidents,
        )
