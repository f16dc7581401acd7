"""Reading runs: pages of a schedule's runs or of every schedule's, one run, and the figures
of a schedule's runs over a window.

Pages are read newest first along an index (``plan_time, id`` across
schedules; the occurrence key within one), so the thousandth page costs
what the first does, with ten million records in the table. The attempts
of one occurrence share its plan time: the latest comes first.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, bindparam, func, select, true, tuple_
from sqlalchemy.orm import Session

from bridge.errors import RunNotFound
from bridge.rules.kinds import NON_FINAL_STATUSES
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, ScheduleLabel, ScheduleTally, TaskExecution
from bridge.storage.sql import one_of, plain_rows, unnest_bound, unnest_values
from bridge.storage.tally import COUNTS, hour_of

#: The kinds of the sort key of a page of runs: plan time, attempt, id.
PAGE_KEY: tuple[type, ...] = (datetime, int, str)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing shows; None or empty leaves a criterion out."""

    schedule_id: int | None = None
    statuses: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()
    #: Runs planned at or after this instant, and before ``until``.
    since: datetime | None = None
    until: datetime | None = None

    def criteria(self) -> list[ColumnElement[bool]]:
        """The conditions of the filter, for a ``WHERE`` on ``task_execution``."""
        criteria: list[ColumnElement[bool]] = [TaskExecution.plan_time.is_not(None)]
        if self.schedule_id is not None:
            criteria.append(TaskExecution.periodic_task_id == self.schedule_id)
        if self.statuses:
            criteria.append(TaskExecution.status.in_(self.statuses))
        if self.triggers:
            criteria.append(TaskExecution.trigger.in_(self.triggers))
        if self.since is not None:
            criteria.append(TaskExecution.plan_time >= self.since)
        if self.until is not None:
            criteria.append(TaskExecution.plan_time < self.until)
        return criteria


@dataclass(frozen=True)
class Window:
    """A schedule's runs in a window, as the statistics need them."""

    #: The hourly tallies summed over the hours the window touches: runs ended by
    #: final status, occurrences skipped and missed, alerts, runtime.
    tallied: dict[str, float]
    #: Its runs planned in the window that have not ended, by status.
    open: dict[str, int]
    #: Seconds each run ran, of the latest runs that have a runtime.
    runtimes: list[float]
    #: Seconds from each occurrence to its run's start, of the latest started runs.
    start_delays: list[float]


class HistoryStore:
    """The runs of the schedules, for the management side."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def page(
        self, where: RunFilter, after: Sequence[Any] | None, limit: int
    ) -> list[tuple[dict[str, Any], str | None]]:
        """Up to ``limit`` runs matching ``where``, newest occurrence first and, within an
        occurrence, its latest attempt first (a retry above the attempt it replaced), each
        with its schedule's name; after the key :data:`PAGE_KEY` ``after`` of the previous
        page. Every listing of runs, in every surface, is read here: as plain rows of the
        columns, since ORM objects cost a page more than the database spends on it."""
        run = TaskExecution
        statement = (
            select(*run.__table__.columns, PeriodicTask.name.label("schedule_name"))
            .outerjoin(PeriodicTask, PeriodicTask.id == run.periodic_task_id)
            .where(*where.criteria())
        )
        if after is not None:
            # The plan time alone bounds the index scan; the whole key picks the row after.
            statement = statement.where(
                run.plan_time <= after[0],
                tuple_(run.plan_time, run.attempt, run.id) < tuple_(*after),
            )
        statement = statement.order_by(
            run.plan_time.desc(), run.attempt.desc(), run.id.desc()
        ).limit(limit)
        with self.database.reading() as session:
            return [(row, row["schedule_name"]) for row in plain_rows(session, statement)]

    def latest_attempts(
        self, schedule_id: int, plan_times: Sequence[datetime]
    ) -> dict[datetime, int]:
        """The number of the latest attempt recorded of each of the schedule's occurrences
        ``plan_times``, along the occurrence key."""
        if not plan_times:
            return {}
        run = TaskExecution
        statement = (
            select(run.plan_time, func.max(run.attempt))
            .where(run.periodic_task_id == schedule_id, run.plan_time.in_(set(plan_times)))
            .group_by(run.plan_time)
        )
        with self.database.session() as session:
            found = session.execute(statement).all()
        return {plan_time: attempt for plan_time, attempt in found if plan_time is not None}

    def get(self, run_id: str) -> tuple[TaskExecution, str | None]:
        """The run ``run_id`` and its schedule's name; :class:`RunNotFound` if none."""
        with self.database.session() as session:
            return _run(session, run_id)

    def window(self, schedule_id: int, since: datetime, until: datetime, cap: int) -> Window:
        """A schedule's tallies of the hours from ``since``'s to ``until``, its open runs
        planned in ``[since, until)``, and the runtimes and start delays of the latest
        ``cap`` runs planned then (those still recorded)."""
        in_window = (
            TaskExecution.periodic_task_id == schedule_id,
            TaskExecution.plan_time >= since,
            TaskExecution.plan_time < until,
        )
        hours = select(
            *(func.coalesce(func.sum(ScheduleTally.__table__.c[name]), 0) for name in COUNTS)
        ).where(
            ScheduleTally.periodic_task_id == schedule_id,
            ScheduleTally.hour >= hour_of(since),
            ScheduleTally.hour < until,
        )
        latest = (
            select(
                TaskExecution.runtime,
                TaskExecution.started_at,
                TaskExecution.plan_time,
            )
            .where(*in_window)
            .order_by(TaskExecution.plan_time.desc())
            .limit(cap)
        )
        open_counts = (
            select(TaskExecution.status, func.count())
            .where(*in_window, TaskExecution.status.in_(NON_FINAL_STATUSES))
            .group_by(TaskExecution.status)
        )
        with self.database.session() as session:
            tallied = session.execute(hours).one()
            opened = session.execute(open_counts).all()
            rows = session.execute(latest).all()
        return Window(
            tallied=dict(zip(COUNTS, tallied, strict=True)),
            open={status: count for status, count in opened},  # noqa: C416 - rows, not pairs
            runtimes=[row.runtime for row in rows if row.runtime is not None],
            start_delays=[
                (row.started_at - row.plan_time).total_seconds()
                for row in rows
                if row.started_at is not None
            ],
        )

    def gaps(
        self, schedule_id: int, since: datetime, limit: int
    ) -> list[tuple[datetime, int, int]]:
        """The hours, from ``since``'s on, in which the schedule skipped or missed occurrences,
        with how many of each, newest first (at most ``limit``): its tallies, read along
        their key."""
        tally = ScheduleTally
        statement = (
            select(tally.hour, tally.skipped, tally.missed)
            .where(
                tally.periodic_task_id == schedule_id,
                tally.hour >= hour_of(since),
                (tally.skipped > 0) | (tally.missed > 0),
            )
            .order_by(tally.hour.desc())
            .limit(limit)
        )
        with self.database.session() as session:
            return [(hour, skipped, missed) for hour, skipped, missed in session.execute(statement)]

    def label_tallies(self, since: datetime, limit: int) -> list[tuple[str, dict[str, int]]]:
        """Each label's runs ended since the hour ``since`` falls in, by status (the tallies
        of its schedules summed), by label, the first ``limit`` labels with any."""
        tally = ScheduleTally
        ended = ("success", "failure", "revoked", "lost")
        statement = (
            select(
                ScheduleLabel.label,
                *(func.sum(tally.__table__.c[name]) for name in ended),
            )
            .join(tally, tally.periodic_task_id == ScheduleLabel.periodic_task_id)
            .where(tally.hour >= hour_of(since))
            .group_by(ScheduleLabel.label)
            .order_by(ScheduleLabel.label)
            .limit(limit)
        )
        with self.database.session() as session:
            return [
                (label, {name: int(count or 0) for name, count in zip(ended, counts, strict=True)})
                for label, *counts in session.execute(statement)
            ]

    def recent_statuses(
        self, schedule_ids: Sequence[int], count: int
    ) -> dict[int, list[tuple[str, str]]]:
        """The plan times and statuses of the latest ``count`` runs of each schedule,
        oldest first (a retry after the attempt it follows): one query for a whole page of
        schedules, each read along its own index entries (a ``LATERAL`` join on
        PostgreSQL, a window elsewhere).

        Each time is ISO 8601 text in UTC to the second (``2026-01-31T09:00:00Z``), as
        the list's strips show it: a page holds hundreds, and each read as a time, then
        written as text, cost more than the database took to find it. PostgreSQL writes
        them; the other stores' times are read and written in Python."""
        if not schedule_ids:
            return {}
        postgres = self.database.is_postgres
        found: dict[int, list[tuple[str, str]]] = {}
        with self.database.reading() as session:
            statement = _recent_statement(postgres)
            # On the session's connection: the ORM's handling of the statement cost about a
            # third of the read (:func:`bridge.storage.sql.plain_rows`); and fetched at once:
            # fetched one by one, a page's runs took a quarter longer (6.2 against 4.7 ms).
            bound = {**unnest_values("page", {"id": list(schedule_ids)}), "count": count}
            rows = session.connection().execute(statement, bound).all()
        for schedule_id, plan_time, status in rows:
            if plan_time is not None:
                at = plan_time if postgres else plan_time.strftime(ISO_UTC)
                found.setdefault(schedule_id, []).append((at, status))
        return found


#: A strip's time, as PostgreSQL writes it for :meth:`HistoryStore.recent_statuses`.
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"


@functools.cache
def _recent_statement(postgres: bool) -> Select[Any]:
    """The statement of :meth:`HistoryStore.recent_statuses`, built once: building it anew
    took a page of schedules as long as running it. Bound: the schedules' ids (as
    :func:`bridge.storage.sql.unnest_values` names them, ``page``) and ``count``. The
    database orders the runs as the strips show them, by schedule, oldest first."""
    run = TaskExecution
    newest_first = (run.plan_time.desc(), run.attempt.desc())
    count = bindparam("count", type_=Integer())
    if postgres:
        ids = unnest_bound("page", {"id": Integer()})
        latest = (
            select(run.plan_time, run.attempt, run.status)
            .where(run.periodic_task_id == ids.c.id)
            .order_by(*newest_first)
            .limit(count)
            .lateral()
        )
        # In UTC whatever the session's zone (a pooler may lend a server connection
        # that never saw the bridge's ``SET TIME ZONE``).
        iso = func.to_char(func.timezone("UTC", latest.c.plan_time), 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
        return (
            select(ids.c.id, iso, latest.c.status)
            .select_from(ids.join(latest, true()))
            .order_by(ids.c.id, latest.c.plan_time, latest.c.attempt)
        )
    ranked = (
        select(
            run.periodic_task_id.label("id"),
            run.plan_time,
            run.attempt,
            run.status,
            func.row_number()
            .over(partition_by=run.periodic_task_id, order_by=newest_first)
            .label("n"),
        )
        .where(one_of(run.periodic_task_id, postgres=False, name="page_id"))
        .subquery()
    )
    return (
        select(ranked.c.id, ranked.c.plan_time, ranked.c.status)
        .where(ranked.c.n <= count)
        .order_by(ranked.c.id, ranked.c.plan_time, ranked.c.attempt)
    )


def _run(session: Session, run_id: str) -> tuple[TaskExecution, str | None]:
    found = session.execute(
        select(TaskExecution, PeriodicTask.name)
        .outerjoin(PeriodicTask, PeriodicTask.id == TaskExecution.periodic_task_id)
        .where(TaskExecution.id == run_id)
    ).first()
    if found is None:
        raise RunNotFound(run_id)
    return found[0], found[1]
