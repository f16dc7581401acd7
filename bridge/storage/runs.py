"""Statements on run records that beat and the management side share.

Each function runs inside the caller's transaction (its ``session``): the
gateways of :mod:`bridge.storage` and the units of work of
:mod:`bridge.service` compose them into transactions of their own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Executable,
    Integer,
    Select,
    Table,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    or_,
    select,
    text,
    true,
    union,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from bridge.rules.decisions import EXPIRED, OpenRun
from bridge.rules.fire import Resumable
from bridge.rules.health import HELD_BY_WORKER, OpenRunView
from bridge.rules.kinds import FINAL_STATUSES, NON_FINAL_STATUSES, SCHEDULED_TRIGGERS, RunStatus
from bridge.storage.counts import count_unsettled
from bridge.storage.database import Database
from bridge.storage.models import OPEN_RUNS, PeriodicTask, TaskExecution, UTCDateTime
from bridge.storage.sql import (
    BINARY,
    among,
    changed_rows,
    dialect_of,
    insert_or_skip,
    insert_skipping,
    is_mysql,
    is_postgres,
    json_rows,
    json_values,
    one_of,
    plain_rows,
    unnest_bound,
    unnest_values,
    unnested,
    update_from_rows,
)

_RUN_TABLE: Table = TaskExecution.__table__  # type: ignore[assignment]
_SCHEDULE_TABLE: Table = PeriodicTask.__table__  # type: ignore[assignment]

#: How far back the health looks at runs that ended: expired ones, the latest start.
RECENT = timedelta(days=1)
#: Of a schedule's runs queued and not started (waiting, or expired unstarted), the health
#: reads the oldest this many that no start passed over (on PostgreSQL, this many of
#: each). While workers are down every occurrence adds one, and a run not final is never
#: pruned: read whole, a thousand schedules with a day of them cost a watchdog pass 11 s
#: of CPU and 488 MiB (``bench/backlog.py``). The oldest tells whether the schedule is
#: late and since when; the others are named with it.
QUEUED_SEEN = 3


@dataclass(frozen=True)
class RunsSeen:
    """What the health of several schedules is judged from besides their rows."""

    #: Per schedule, its runs not final and those that expired unstarted lately: those a
    #: worker holds, and the oldest queued ones no start passed over (:func:`runs_seen`).
    runs: dict[int, list[OpenRunView]]
    #: Per schedule with a run waiting to start, when a run of it last started lately, if
    #: since the earliest run waiting (of any schedule): what tells a run passed over
    #: (a worker took a later one) from a run no worker took.
    last_started: dict[int, datetime]
    #: Per schedule with runs not final, how many (more than :attr:`runs` may hold), when
    #: asked for (the metrics' ``open_runs``).
    open_counts: dict[int, int] = field(default_factory=dict)


#: Per schedule with a run waiting to start, since when the earliest of them waits, from
#: its open runs: the health's rule (:func:`bridge.rules.health.waiting_since`), handed in
#: by the caller, which tells the read which schedules' latest start to look up.
Waiting = Callable[[Mapping[int, Sequence[OpenRunView]]], Mapping[int, datetime]]


def runs_seen(
    session: Session,
    schedule_ids: Sequence[int],
    now: datetime,
    waiting_since: Waiting,
    count_open: bool = False,
) -> RunsSeen:
    """The runs of these schedules the health looks at: open ones, and those that expired
    unstarted or started within :data:`RECENT` of ``now``; of those queued and not
    started, only the oldest :data:`QUEUED_SEEN` that no later start passed over. With
    ``count_open``, how many runs of each are open (:attr:`RunsSeen.open_counts`).

    The latest start is read only for the schedules with a run waiting to start, and
    only since the earliest such run: the health compares it with when those runs began
    to wait (:func:`bridge.rules.health.health_of`), and nothing else. Read for every
    schedule of a watchdog pass, it took the database half a second at 1,000,000
    schedules, reading every run of the busy ones.

    The oldest queued runs are read first, before the latest start is known. A schedule
    whose oldest were all passed over (workers came back and ran later ones) while it may
    have more is read again past its latest start: one more statement, for such schedules
    only. On PostgreSQL each schedule is looked up on its own, its oldest queued runs in
    index order (:func:`_seen_on_postgres`): ranking them all took the server 2 to 4 s
    for a thousand schedules with a day of runs waiting each.
    """
    seen = RunsSeen({}, {})
    if not schedule_ids:
        return seen
    postgres = is_postgres(session)
    recent = now - RECENT
    # On the session's connection, as plain values: the ORM's loading of thousands of runs
    # (a backlog sent to workers that fell behind) was most of a watchdog pass, and its
    # handling of a statement costs a page of schedules as much as the database does.
    connection = session.connection()
    if postgres:
        runs = connection.execute(
            _seen_on_postgres(after=False, counted=count_open),
            {**unnest_values("wanted", {"id": list(schedule_ids)}), "recent": recent},
        )
    else:
        runs = connection.execute(_seen_elsewhere(), {"ids": list(schedule_ids), "recent": recent})
    queued: dict[int, list[OpenRunView]] = {}
    for found in runs:
        run = _view(found)
        seen.runs.setdefault(found.periodic_task_id, []).append(run)
        if found.open:
            seen.open_counts[found.periodic_task_id] = found.open
        if run.status not in HELD_BY_WORKER:
            queued.setdefault(found.periodic_task_id, []).append(run)
    waiting = waiting_since(seen.runs)
    if not waiting:
        return seen
    since = max(recent, min(waiting.values()))
    started = _last_starts(postgres)
    for schedule_id, last in connection.execute(started, {"ids": list(waiting), "recent": since}):
        if schedule_id is not None and last is not None:
            seen.last_started[schedule_id] = last
    passed_over = {
        schedule_id: seen.last_started[schedule_id]
        for schedule_id, read in queued.items()
        if len(read) >= QUEUED_SEEN
        and schedule_id in seen.last_started
        and all(
            run.waited_from is None or run.waited_from <= seen.last_started[schedule_id]
            for run in read
        )
    }
    if passed_over:
        if postgres:
            wanted: dict[str, list[Any]] = {
                "id": list(passed_over),
                "last": list(passed_over.values()),
            }
            later = connection.execute(
                _seen_on_postgres(after=True),
                {**unnest_values("wanted", wanted), "recent": recent},
            )
        else:
            later = connection.execute(_queued_after(passed_over), {"recent": recent})
        for found in later:
            seen.runs[found.periodic_task_id].append(_view(found))
    return seen


def _view(found: Any) -> OpenRunView:
    """A row of :data:`_SEEN_COLUMNS`, as the health reads it."""
    return OpenRunView(found.id, found.status, found.plan_time, found.started_at, found.queued_at)


if TYPE_CHECKING:
    #: The columns :func:`runs_seen` reads: a run's, and how many runs of its schedule
    #: are not final (types alone: SQLAlchemy 2.0's ``Select`` takes one type argument
    #: where 2.1's takes many).
    _SeenRuns = Select[str, int | None, str, datetime | None, datetime | None, datetime | None, int]
    _LastStarts = Select[int | None, datetime | None]


def _expired(run: type[TaskExecution]) -> ColumnElement[bool]:
    """A run that expired unstarted since ``recent`` (bound when the statement runs)."""
    return and_(
        run.status == RunStatus.REVOKED,
        run.error == EXPIRED,
        run.started_at.is_(None),
        run.finished_at >= bindparam("recent", type_=UTCDateTime()),
    )


def _waited(run: type[TaskExecution]) -> ColumnElement[datetime]:
    """Since when a worker could have started a run: :attr:`OpenRunView.waited_from`."""
    return case((run.queued_at > run.plan_time, run.queued_at), else_=run.plan_time)


def _oldest_first(run: type[TaskExecution]) -> tuple[Any, ...]:
    """Runs by when they began to wait (those that never did last), then by id."""
    waited = _waited(run)
    return (waited.is_(None), waited, run.id)


#: The statuses a run that started can have: not queued (the recorder writes a start with
#: its status).
_STARTABLE = sorted(set(RunStatus) - {RunStatus.PENDING, RunStatus.SENT})

_SEEN_COLUMNS = (
    TaskExecution.id,
    TaskExecution.status,
    TaskExecution.plan_time,
    TaskExecution.started_at,
    TaskExecution.queued_at,
)


@functools.cache
def _seen_on_postgres(after: bool, counted: bool = False) -> _SeenRuns:
    """:func:`runs_seen`'s read on PostgreSQL: for each schedule on its own, the runs a
    worker holds, the oldest :data:`QUEUED_SEEN` open ones in ``ix_task_execution_open``
    and the oldest that expired; with ``counted``, how many are open (``open``: one index
    entry an open run, where the rest of the read is a few). Bound: the schedules' ids,
    and ``recent``.

    With ``after``, for each schedule its queued runs since a moment (``last``, bound
    with the ids), and no others.
    """
    run = TaskExecution
    columns: dict[str, Any] = {"id": PeriodicTask.id.type}
    if after:
        columns["last"] = UTCDateTime()
    wanted = unnest_bound("wanted", columns)
    mine = run.periodic_task_id == wanted.c.id
    waiting = (
        select(*_SEEN_COLUMNS)
        .where(mine, text(OPEN_RUNS), run.status.not_in(HELD_BY_WORKER))
        .order_by(run.updated_at)
        .limit(QUEUED_SEEN)
    )
    expired = (
        select(*_SEEN_COLUMNS).where(mine, _expired(run)).order_by(run.plan_time).limit(QUEUED_SEEN)
    )
    if after:
        waiting = waiting.where(run.updated_at > wanted.c.last)
        expired = expired.where(run.plan_time > wanted.c.last)
        parts = union_all(waiting, expired)
    else:
        held = select(*_SEEN_COLUMNS).where(mine, run.status.in_(HELD_BY_WORKER))
        parts = union_all(held, waiting, expired)
    found = parts.subquery().lateral("found")
    open_count: Any = null()
    schedules: Any = wanted
    if counted:
        # Counted once per schedule, before its runs are joined to it.
        count = select(func.count().label("open")).where(mine, text(OPEN_RUNS)).lateral("counted")
        open_count, schedules = count.c.open, wanted.join(count, true())
    return (
        select(wanted.c.id.label("periodic_task_id"), *found.c, open_count.label("open"))
        .select_from(schedules)
        .join(found, true())
    )


@functools.cache
def _seen_elsewhere() -> _SeenRuns:
    """:func:`runs_seen`'s read on MySQL, MariaDB and SQLite (MariaDB has no ``LATERAL``):
    every run of the schedules that the health may look at, ranked, and the runs a worker
    holds with the oldest :data:`QUEUED_SEEN` of the others returned. Bound: ``ids`` and
    ``recent``."""
    run = TaskExecution
    seen = _ranked(
        "seen",
        (run.periodic_task_id, run.status.not_in(HELD_BY_WORKER)),
        (run.periodic_task_id.in_(bindparam("ids", expanding=True)),),
        func.count(case((run.status.in_(NON_FINAL_STATUSES), 1)))
        .over(partition_by=run.periodic_task_id)
        .label("open"),
    )
    columns = (seen.id, seen.status, seen.plan_time, seen.started_at, seen.queued_at)
    return select(*columns, seen.periodic_task_id, seen.open).where(
        or_(seen.rank <= QUEUED_SEEN, seen.status.in_(HELD_BY_WORKER))
    )


def _ranked(name: str, partition: tuple[Any, ...], where: tuple[Any, ...], *extra: Any) -> Any:
    """The runs the health may look at that also meet ``where``, each with its ``rank``
    from the oldest in its ``partition`` (and the ``extra`` columns): the columns of
    a subquery ``name``."""
    run = TaskExecution
    rank = func.row_number().over(partition_by=partition, order_by=_oldest_first(run))
    return (
        select(*_SEEN_COLUMNS, run.periodic_task_id, rank.label("rank"), *extra)
        .where(*where, or_(run.status.in_(NON_FINAL_STATUSES), _expired(run)))
        .subquery(name)
        .c
    )


@functools.cache
def _last_starts(postgres: bool) -> _LastStarts:
    """Each schedule's latest start since ``recent``. Bound: ``ids`` and ``recent``.

    Only the statuses a started run can have are looked at: in the index of runs by
    schedule and status, the runs still queued (thousands, with the workers down) are
    passed over, not read."""
    run = TaskExecution
    return (
        select(run.periodic_task_id, func.max(run.started_at))
        .where(
            one_of(run.periodic_task_id, postgres=postgres, name="ids"),
            run.status.in_(_STARTABLE),
            run.started_at >= bindparam("recent", type_=UTCDateTime()),
        )
        .group_by(run.periodic_task_id)
    )


def _queued_after(last_started: Mapping[int, datetime]) -> Select[Any]:
    """:func:`runs_seen`'s second read on MySQL, MariaDB and SQLite: of each of these
    schedules, the oldest :data:`QUEUED_SEEN` runs queued since its latest start (given).
    Bound: ``recent``."""
    run = TaskExecution
    waited = _waited(run)
    since_start = or_(
        *(
            and_(run.periodic_task_id == schedule_id, waited > literal(at, UTCDateTime()))
            for schedule_id, at in last_started.items()
        )
    )
    later = _ranked(
        "later", (run.periodic_task_id,), (since_start, run.status.not_in(HELD_BY_WORKER))
    )
    columns = (later.id, later.status, later.plan_time, later.started_at, later.queued_at)
    return select(*columns, later.periodic_task_id).where(later.rank <= QUEUED_SEEN)


class Sent(NamedTuple):
    """A run just published: its schedule, its id and when its message expires."""

    schedule_id: int
    run_id: str
    expires_at: datetime | None


def insert_runs(session: Session, runs: Sequence[dict[str, Any]]) -> set[str]:
    """Insert run records unless their id or occurrence key exists; the ids inserted.

    The ids come back from ``RETURNING``, which lists only the rows written.
    On PostgreSQL the rows go as one array per column (``INSERT ... SELECT
    FROM unnest(...)``, :func:`bridge.storage.sql.unnested`);
    elsewhere SQLAlchemy sends them as multi-row statements. The runs share their keys.
    """
    if not runs:
        return set()
    if is_postgres(session):
        names = list(runs[0])
        table = TaskExecution.__table__.c
        rows = unnested(
            "new_runs", {name: (table[name].type, [run[name] for run in runs]) for name in names}
        )
        statement = (
            insert_or_skip(session, TaskExecution)
            .from_select(names, select(*rows.c))
            .on_conflict_do_nothing()
            .returning(TaskExecution.id)
        )
        return set(session.scalars(statement))
    if is_mysql(session):
        return _insert_runs_on_mysql(session, runs)
    statement = (
        insert_or_skip(session, TaskExecution).on_conflict_do_nothing().returning(TaskExecution.id)
    )
    return set(session.scalars(statement, list(runs)))


def _insert_runs_on_mysql(session: Session, runs: Sequence[dict[str, Any]]) -> set[str]:
    """:func:`insert_runs` without ``RETURNING``: the ids inserted are those there after the
    insert and not before. A run whose occurrence another beat recorded first is
    skipped by the occurrence key, under another id, so it is not among them."""
    ids = [run["id"] for run in runs]
    there = select(TaskExecution.id).where(among(session, TaskExecution.id, ids))
    before = set(session.scalars(there))
    session.execute(insert_skipping(session, TaskExecution), list(runs))
    return set(session.scalars(there)) - before


_OPEN_RUN_COLUMNS = (
    TaskExecution.id,
    TaskExecution.status,
    TaskExecution.plan_time,
    TaskExecution.updated_at,
    TaskExecution.trigger,
    TaskExecution.attempt,
)


def open_runs_of(session: Session, schedule_ids: Sequence[int]) -> dict[int, list[OpenRun]]:
    """The open runs of each of these schedules, oldest first, in one query.

    On PostgreSQL the query looks each schedule up on its own in
    ``ix_task_execution_open``, which holds the open runs alone: asked as one
    ``IN`` list, or through the index of every run by schedule and status,
    the planner may read every open run of every schedule through the status
    index instead, which it believes selective (with millions of ended runs
    analysed, it did so even per schedule). During a burst every fired row
    adds an open run, and that read grew with each batch, to 0.2-0.4 s with
    10,000,000 runs in the table. The ``OFFSET 0`` keeps the per-schedule
    lookup from being flattened into a join the planner could reorder.
    """
    open_status = text(OPEN_RUNS)
    if is_postgres(session):
        wanted = unnested("wanted", {"id": (PeriodicTask.id.type, schedule_ids)})
        runs = (
            select(*_OPEN_RUN_COLUMNS)
            .where(TaskExecution.periodic_task_id == wanted.c.id, open_status)
            .offset(0)
            .lateral()
        )
        statement = select(wanted.c.id, *runs.c).join(runs, true()).order_by(runs.c.updated_at)
    else:
        statement = (
            select(TaskExecution.periodic_task_id, *_OPEN_RUN_COLUMNS)
            .where(TaskExecution.periodic_task_id.in_(schedule_ids), open_status)
            .order_by(TaskExecution.updated_at)
        )
    return _by_schedule(session, statement)


def open_runs_to_decide(
    session: Session, wanted: Sequence[Resumable], oldest: int
) -> dict[int, list[OpenRun]]:
    """Of each claimed row's open runs, oldest first, those its decision needs: the
    ``oldest`` first ones and every one its unfinished fire may have recorded
    (:class:`~bridge.rules.fire.Resumable`).

    On PostgreSQL each row is looked up on its own in ``ix_task_execution_open``
    (see :func:`open_runs_of`), its oldest runs in index order. SQLite, whose
    embedded use holds few open runs, reads them all.
    """
    if not is_postgres(session):
        return open_runs_of(session, [row.schedule_id for row in wanted])
    run = TaskExecution
    rows = unnested(
        "wanted",
        {
            "id": (PeriodicTask.id.type, [row.schedule_id for row in wanted]),
            "since": (UTCDateTime(), [row.since for row in wanted]),
            "retry_plan": (UTCDateTime(), [row.retry_plan for row in wanted]),
            "retry_attempt": (Integer(), [row.retry_attempt for row in wanted]),
        },
    )
    of_row = (run.periodic_task_id == rows.c.id, text(OPEN_RUNS))
    recorded = select(*_OPEN_RUN_COLUMNS).where(
        *of_row,
        or_(
            run.status == RunStatus.PENDING.value,
            run.plan_time >= rows.c.since,
            and_(run.plan_time == rows.c.retry_plan, run.attempt == rows.c.retry_attempt),
        ),
    )
    first = select(*_OPEN_RUN_COLUMNS).where(*of_row).order_by(run.updated_at).limit(oldest)
    runs = union(recorded, first).lateral()
    statement = select(rows.c.id, *runs.c).join(runs, true()).order_by(runs.c.updated_at)
    return _by_schedule(session, statement)


def _by_schedule(session: Session, statement: Select[Any]) -> dict[int, list[OpenRun]]:
    """The open runs a statement reads, after their schedule id, by schedule.

    Run on the session's connection: through the session, the ORM's loading
    machinery took half the time of a read of thousands of runs.
    """
    found: dict[int, list[OpenRun]] = {}
    for schedule_id, *columns in session.connection().execute(statement):
        found.setdefault(schedule_id, []).append(OpenRun(*columns))
    return found


def end_runs(
    session: Session,
    run_ids: Sequence[str],
    status: RunStatus,
    now: datetime,
    reason: str,
    statuses: Collection[RunStatus] = NON_FINAL_STATUSES,
) -> Sequence[tuple[str, int | None]]:
    """Close those of the runs still in one of the open ``statuses`` with ``status`` and
    ``reason``: the id and the schedule of each one closed.

    Nothing more: whoever ends runs counts them on their schedules
    (:func:`finish_runs`) or settles them (:mod:`bridge.service.settlement`).
    """
    if not run_ids:
        return []
    return changed_rows(
        session,
        update(TaskExecution)
        .where(
            among(session, TaskExecution.id, run_ids),
            TaskExecution.status.in_(sorted(statuses)),
        )
        .values(status=status, finished_at=now, updated_at=now, error=reason),
        TaskExecution.id,
        TaskExecution.id,
        TaskExecution.periodic_task_id,
        by_key=True,
    )


class RunEnding:
    """What the stores of beat and of the management side share: ending runs whose
    message they revoke or could not send, in a transaction of its own."""

    database: Database

    def finish_runs(
        self,
        run_ids: Sequence[str],
        status: RunStatus,
        now: datetime,
        reason: str,
        statuses: Collection[RunStatus] = NON_FINAL_STATUSES,
    ) -> list[str]:
        """End open runs ``status`` with ``reason``; see :func:`finish_runs`."""
        with self.database.session() as session:
            return finish_runs(session, run_ids, status, now, reason, statuses)


def finish_runs(
    session: Session,
    run_ids: Sequence[str],
    status: RunStatus,
    now: datetime,
    reason: str,
    statuses: Collection[RunStatus] = NON_FINAL_STATUSES,
) -> list[str]:
    """Close open runs that were replaced or cancelled (``REVOKED``) or could not be sent
    (``FAILURE``), each with ``reason``, and count them on their schedules; the ids closed
    (those still in one of the open ``statuses``).

    They stop blocking their schedule, and their end has no consequence for it
    (no retry, no fixed delay): a run that is lost is settled instead, by
    :func:`bridge.service.settlement.give_up`.
    """
    assert status is not RunStatus.LOST, "a lost run is settled: settlement.give_up"
    finished = end_runs(session, run_ids, status, now, reason, statuses)
    count_unsettled(session, [(rid, sid) for rid, sid in finished if sid is not None], status, now)
    return [run_id for run_id, _ in finished]


#: What a settlement reads of a run that ended (:meth:`bridge.rules.decisions.Outcome.of`).
_ENDED_READ = (
    TaskExecution.id,
    TaskExecution.periodic_task_id,
    TaskExecution.trigger,
    TaskExecution.status,
    TaskExecution.plan_time,
    TaskExecution.attempt,
    TaskExecution.finished_at,
    TaskExecution.updated_at,
    TaskExecution.error,
    TaskExecution.runtime,
)


def ended_runs(session: Session, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Those of the runs that are final, as plain rows of what their settlement reads."""
    return plain_rows(
        session,
        select(*_ENDED_READ).where(
            among(session, TaskExecution.id, run_ids),
            TaskExecution.status.in_(FINAL_STATUSES),
        ),
    )


def ended_run(session: Session, run_id: str) -> dict[str, Any] | None:
    """The run, as :func:`ended_runs` gives it, if it is final; else None.

    Read without a lock: beat holds the schedule's row here while a worker
    may hold the run's, and locking both ways round could deadlock. A worker
    that finishes the run after this read settles it itself.
    """
    found = ended_runs(session, [run_id])
    return found[0] if found else None


def has_open_runs(session: Session, schedule_id: int) -> bool:
    """Whether the schedule has a run that is not final."""
    return bool(
        session.scalar(
            select(func.count())
            .select_from(TaskExecution)
            .where(
                TaskExecution.periodic_task_id == schedule_id,
                TaskExecution.status.in_(NON_FINAL_STATUSES),
            )
        )
    )


def latest_scheduled(session: Session, schedule_id: int) -> str | None:
    """The id of the schedule's latest scheduled run (manual and backfill runs left out)."""
    return session.scalar(
        select(TaskExecution.id)
        .where(
            TaskExecution.periodic_task_id == schedule_id,
            TaskExecution.trigger.in_(list(SCHEDULED_TRIGGERS)),
        )
        .order_by(TaskExecution.plan_time.desc(), TaskExecution.attempt.desc())
        .limit(1)
    )


def mark_sent(session: Session, runs: Sequence[Sent], now: datetime) -> None:
    """``PENDING`` → ``SENT`` for these runs, each with its message's expiry.

    A worker that already reported progress keeps its status. A schedule
    that already names the run as its last shows it sent too; it is found
    by its id (``last_run_id`` has no index).

    The runs, then the schedules, are locked in id order first, the order
    every writer of runs keeps: an update's own order follows the plan, and
    a worker recording a batch of the same runs would otherwise deadlock
    with it.
    """
    if not runs:
        return
    runs = sorted(runs, key=lambda run: run.run_id)
    run_ids = [run.run_id for run in runs]
    schedule_ids = sorted({run.schedule_id for run in runs})
    statements = _mark_sent_statements(dialect_of(session))
    connection = session.connection()
    times = {"now": now, "pending": RunStatus.PENDING, "sent": RunStatus.SENT}
    connection.execute(statements.lock_runs, {"ids": run_ids, "pending": RunStatus.PENDING})
    if statements.dialect == "postgresql":
        expiries = [run.expires_at for run in runs]
        sent = unnest_values("sent", {"id": run_ids, "expires_at": expiries})
        connection.execute(statements.mark_runs, {**sent, **times})
    elif statements.dialect == "mysql":
        sent_json = json_values(
            "sent_runs", ("id", "expires_at"), ((run.run_id, run.expires_at) for run in runs)
        )
        connection.execute(statements.mark_runs, {**sent_json, **times})
    else:
        connection.execute(
            statements.mark_runs,
            [{"run_id": run.run_id, "expires": run.expires_at, **times} for run in runs],
        )
    named = {"ids": schedule_ids, "runs": run_ids, "pending": RunStatus.PENDING}
    connection.execute(statements.lock_schedules, named)
    connection.execute(statements.mark_schedules, {**named, "sent": RunStatus.SENT})


class _MarkSent(NamedTuple):
    dialect: str
    lock_runs: Executable
    mark_runs: Executable
    lock_schedules: Executable
    mark_schedules: Executable


@functools.cache
def _mark_sent_statements(dialect: str) -> _MarkSent:
    """:func:`mark_sent`'s statements, built once per dialect, their values bound when run.

    On PostgreSQL the runs and their expiries go as two arrays (see
    :func:`bridge.storage.sql.unnest_bound`), on MySQL and MariaDB as one JSON text
    (:func:`bridge.storage.sql.json_rows`); on SQLite the update runs once per run.
    Built anew for every batch, through the ORM, they cost beat more CPU than
    the server spent running them.
    """
    postgres = dialect == "postgresql"
    runs, schedules = _RUN_TABLE.c, _SCHEDULE_TABLE.c
    unsent = runs.status == bindparam("pending")
    run_ids = one_of(runs.id, postgres=postgres, name="ids")
    now: BindParameter[datetime] = bindparam("now", type_=UTCDateTime())
    # Keyed by column: on MySQL the update names the batch's rows first.
    values: dict[Any, Any] = {
        runs.status: bindparam("sent"),
        runs.queued_at: now,
        runs.updated_at: now,
    }
    if postgres:
        sent = unnest_bound("sent", {"id": runs.id.type, "expires_at": UTCDateTime()})
        mark_runs: Executable = (
            update(_RUN_TABLE)
            .where(runs.id == sent.c.id, unsent)
            .values({**values, runs.expires_at: sent.c.expires_at})
        )
    elif dialect == "mysql":
        sent_json = json_rows("sent_runs", {"id": runs.id.type, "expires_at": UTCDateTime()})
        mark_runs = update_from_rows(
            _RUN_TABLE, sent_json, runs.id == sent_json.c.id.collate(BINARY), unsent
        ).values({**values, runs.expires_at: sent_json.c.expires_at})
    else:
        mark_runs = (
            update(_RUN_TABLE)
            .where(runs.id == bindparam("run_id"), unsent)
            .values({**values, runs.expires_at: bindparam("expires", type_=UTCDateTime())})
        )
    named = (
        one_of(schedules.id, postgres=postgres, name="ids"),
        one_of(schedules.last_run_id, postgres=postgres, name="runs"),
        schedules.last_status == bindparam("pending"),
    )
    return _MarkSent(
        dialect,
        select(runs.id)
        .where(run_ids, unsent)
        .order_by(runs.id)
        .with_for_update()
        # MySQL and MariaDB would read (and lock) the runs through the status index:
        # every pending run, other batches' too, in no id order, which deadlocked
        # with the workers recording theirs.
        .with_hint(_RUN_TABLE, "FORCE INDEX (PRIMARY)", dialect_name="mysql"),
        mark_runs,
        select(schedules.id).where(*named).order_by(schedules.id).with_for_update(),
        update(_SCHEDULE_TABLE).where(*named).values(last_status=bindparam("sent")),
    )


def statuses(session: Session, run_ids: Sequence[str]) -> dict[str, str]:
    """The current status of each of these runs, read without a lock."""
    if not run_ids:
        return {}
    statement = select(TaskExecution.id, TaskExecution.status).where(
        among(session, TaskExecution.id, run_ids)
    )
    return dict(session.execute(statement).all())
