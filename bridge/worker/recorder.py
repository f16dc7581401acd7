"""Execution records written by Celery workers.

Install it with one line in the module that creates the Celery app::

    bridge.recorder.install(app)

It connects handlers to Celery's task signals and writes each run's status
(``RECEIVED``, ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE``, ``REVOKED``),
times, worker hostname, runtime and a bounded summary of the outcome into
``task_execution``. Tasks the bridge did not send carry none of its headers
and are left alone, unless ``bridge_record_all_tasks`` is on.

Writing costs a worker little: each status change joins the process's
queue of record writes (:mod:`bridge.backlog`), whose thread writes what has
gathered in one transaction of a few round trips, however many runs it
holds; a run's changes in one batch are merged into one update. A change is
written within :data:`bridge.backlog.GATHER` seconds; only the
compare-and-set start of a :class:`bridge.task.BridgeTask` waits for its
answer.

A final status is also settled on the run's schedule in the same
transaction (see :func:`bridge.lifecycle.settle_run`): it may owe a retry,
trip the breaker, set a fixed delay's next run or free a held occurrence.

Recording never fails a task: a batch the database refuses is retried a few
times and then held in memory and written, in order, once the database is
back.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery import Celery, signals
from sqlalchemy import ColumnElement, Select, Update, any_, bindparam, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import QueryableAttribute, Session

from bridge.broker import check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.rules.decisions import EXPIRED, Outcome
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus, Trigger
from bridge.rules.runs import HEADER_SCHEDULE_ID
from bridge.storage.database import Database
from bridge.storage.lifecycle import settle_run
from bridge.storage.models import PeriodicTask, TaskExecution
from bridge.storage.store import upsert_insert
from bridge.worker.backlog import Backlog, Reply
from bridge.worker.heartbeat import WorkerHeartbeat

logger = logging.getLogger("bridge.recorder")

#: Statuses a worker may move a run out of (it never reopens a final run).
_OPEN = NON_FINAL_STATUSES
#: Statuses of a run no delivery has started yet (a RETRY waits for its next delivery).
_NOT_STARTED = frozenset({RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED, RunStatus.RETRY})
#: Never back from STARTED: a second delivery of a running run must not make it
#: look unstarted. A run RECEIVED again (the broker redelivered it) now belongs
#: to the worker that has it.
_NOT_RECEIVED = frozenset({RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED})
#: How long a worker shutting down waits for the database to take its held records.
SHUTDOWN_FLUSH_SECONDS = 5.0
#: The longest a BridgeTask delivery waits to learn whether it starts its run.
START_ANSWER_SECONDS = 30.0
#: Set on the request of a delivery :class:`bridge.task.BridgeTask` dropped as a
#: duplicate: the recorder then records nothing for it.
DUPLICATE = "bridge_duplicate"


#: One run's merged changes, by its id.
_UPDATE_RUN = update(TaskExecution).where(TaskExecution.id == bindparam("run_id"))


def _one_of(column: QueryableAttribute[Any], name: str, postgres: bool) -> ColumnElement[bool]:
    """``column`` is one of the values bound to ``name``.

    On PostgreSQL the values go as one array (``= ANY(:name)``): the text of
    the statement is then the same whatever their number, and the driver and
    the server prepare it once instead of parsing a new ``IN`` list each time.
    """
    if postgres:
        return column == any_(bindparam(name, type_=postgresql.ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


@dataclass(frozen=True)
class _Statements:
    """The statements of a batch, built once per kind of database."""

    #: The runs of a batch, locked in id order: two workers' batches never wait on each
    #: other in a circle, and their schedules are locked after them, as beat does.
    lock_runs: Select[*tuple[Any, ...]]
    #: One status, copied to the schedules whose latest run is one of the runs that took
    #: it. (A run belongs to one schedule, so the two lists need not be paired.)
    show_status: Update
    #: The schedules of a batch's runs, locked in id order.
    lock_schedules: Select[PeriodicTask]

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
            .where(_one_of(TaskExecution.id, "runs", postgres))
            .order_by(TaskExecution.id)
            .with_for_update(),
            show_status=update(PeriodicTask)
            .where(
                _one_of(PeriodicTask.id, "schedules", postgres),
                _one_of(PeriodicTask.last_run_id, "runs", postgres),
            )
            .values(last_status=bindparam("status")),
            lock_schedules=select(PeriodicTask)
            .where(_one_of(PeriodicTask.id, "schedules", postgres))
            .order_by(PeriodicTask.id)
            .with_for_update(),
        )


def sent_by_bridge(headers: Mapping[str, Any] | None) -> bool:
    return bool(headers and HEADER_SCHEDULE_ID in headers)


def bounded(text: Any, limit: int) -> str:
    """At most ``limit`` characters of ``text``, marked when cut."""
    value = text if isinstance(text, str) else repr(text)
    return value if len(value) <= limit else value[: limit - 15] + "... [truncated]"


@dataclass(frozen=True)
class Change:
    """One status change of one run, as a worker signal reported it."""

    run_id: str
    status: RunStatus
    #: The statuses the run must be in for the change to apply.
    moves_from: frozenset[RunStatus]
    #: When it happened: the run's ``updated_at``.
    at: datetime
    #: Other columns it sets.
    values: Mapping[str, Any] = field(default_factory=dict)
    #: Set ``queued_at`` to ``at`` if the run has none (a delivery's receipt).
    queued: bool = False
    #: The task name of a run the bridge did not send, whose record is created first.
    external_task: str | None = None
    #: Given once the change is written, for a maker that waits for it.
    reply: Reply | None = None

    @property
    def key(self) -> str:
        return self.run_id

    @property
    def what(self) -> str:
        return f"{self.status.value} of run {self.run_id}"


@dataclass(frozen=True)
class _Parts:
    """What the recorder builds from the settings, once they are read."""

    settings: Settings
    database: Database
    backlog: Backlog[Change]


class Recorder:
    """Writes run records for one app; one instance per process, shared by its threads.

    The settings are read when first needed (at the worker's start, see
    :func:`install`), not when the app module installs the recorder: a bad
    setting then stops the worker with one line, instead of failing every
    import of the app, the CLI's included, with a traceback.
    """

    def __init__(self, app: Celery, settings: Settings | None = None) -> None:
        self.app = app
        self._given = settings
        self._parts: _Parts | None = None
        self._parts_lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def _built(self) -> _Parts:
        if self._parts is None:
            with self._parts_lock:
                if self._parts is None:
                    settings = self._given or Settings.from_app(self.app)
                    self._parts = _Parts(
                        settings,
                        # No connection check before each batch: a connection the server
                        # dropped fails its batch, which is tried again on a fresh one
                        # like any refused write.
                        Database(settings.database_url, pre_ping=False),
                        Backlog(self._apply, settings.recorder_retries),
                    )
        return self._parts

    @property
    def settings(self) -> Settings:
        return self._built().settings

    @property
    def database(self) -> Database:
        return self._built().database

    @property
    def backlog(self) -> Backlog[Change]:
        return self._built().backlog

    def check(self) -> None:
        """Read the settings and load the database driver and the broker's transport now,
        as a worker or beat starts.

        A bad setting or a missing library ends the process with one line naming it.
        """
        try:
            self.database.engine  # noqa: B018 - loads the database driver; does not connect
            check_broker(self.app)
        except BridgeError as exc:
            raise SystemExit(f"Error: {exc}") from None

    # -- which tasks are ours -----------------------------------------------

    def wants(self, headers: Mapping[str, Any] | None) -> bool:
        return self.settings.record_all_tasks or sent_by_bridge(headers)

    # -- signal handlers -----------------------------------------------------

    def on_received(self, request: Any, **_: Any) -> None:
        headers = request.request_dict
        if not self.wants(headers):
            return
        self._record(
            request.id,
            request.task_name,
            headers,
            RunStatus.RECEIVED,
            _NOT_RECEIVED,
            {"worker": request.hostname},
            queued=True,
        )

    def on_prerun(self, task_id: str, task: Any, **_: Any) -> None:
        if not self.wants(task.request.headers):
            return
        with self._lock:
            self._started[task_id] = time.monotonic()
        if getattr(task, "starts_once", False):
            return  # a BridgeTask records its start itself, as a compare-and-set
        self._record(
            task_id,
            task.name,
            task.request.headers,
            RunStatus.STARTED,
            _OPEN,
            {"worker": task.request.hostname, "started_at": utcnow()},
        )

    def on_retry(self, request: Any, reason: Any = None, **kwargs: Any) -> None:
        if not self.wants(request.headers):
            return
        error = bounded(str(reason), self.settings.summary_max_chars)
        self._record(
            request.id, request.task, request.headers, RunStatus.RETRY, _OPEN, {"error": error}
        )

    def on_success(self, sender: Any, result: Any = None, **_: Any) -> None:
        request = sender.request
        if not self.wants(request.headers) or getattr(request, DUPLICATE, False):
            return
        self._finish(request.id, sender.name, request.headers, RunStatus.SUCCESS, result=result)

    def on_failure(
        self, sender: Any, task_id: str, exception: BaseException, einfo: Any = None, **_: Any
    ) -> None:
        request = getattr(sender, "request", None)
        headers = getattr(request, "headers", None)
        # A failure the worker's main process reports (a killed child, a hard
        # time limit) comes without the message headers: update the run if it
        # is one of ours, which costs next to nothing for any other task.
        if (headers is not None and not self.wants(headers)) or getattr(request, DUPLICATE, False):
            return
        limit = self.settings.summary_max_chars
        self._finish(
            task_id,
            sender.name,
            headers,
            RunStatus.FAILURE,
            error=bounded(f"{type(exception).__name__}: {exception}", limit),
            traceback=bounded(getattr(einfo, "traceback", ""), limit),
        )

    def on_revoked(
        self, request: Any, terminated: bool = False, expired: bool = False, **_: Any
    ) -> None:
        # A run revoked before it starts comes as the worker's Request; one
        # terminated while running comes as the task's Context.
        headers = getattr(request, "request_dict", None) or getattr(request, "headers", None)
        if not self.wants(headers):
            return
        task = str(getattr(request, "task_name", None) or getattr(request, "task", ""))
        reason = EXPIRED if expired else "terminated" if terminated else "revoked"
        self._finish(request.id, task, headers, RunStatus.REVOKED, error=reason)

    # -- effectively once ----------------------------------------------------------

    def start_once(self, run_id: str, worker: str | None) -> bool:
        """Record that this delivery starts the run, if no other has; True to run the body.

        The compare-and-set moves the record from a not-yet-started status to
        STARTED under the run's row lock; a second delivery finds it STARTED
        (or final) and gets False. A run with no record is not the bridge's to
        guard, and a database that cannot answer lets the body run (the start
        is written when it is back): both True.
        """
        now = utcnow()
        change = Change(
            run_id,
            RunStatus.STARTED,
            _NOT_STARTED,
            now,
            {"started_at": now, "worker": worker},
            reply=Reply(),
        )
        answer = self.backlog.ask(change, START_ANSWER_SECONDS)
        if answer is None:
            logger.error(
                "bridge: could not check run %s is new (no answer from the database); running it",
                run_id,
            )
            return True
        return answer

    # -- writing ----------------------------------------------------------------

    def _finish(
        self,
        run_id: str,
        task: str,
        headers: Mapping[str, Any] | None,
        status: RunStatus,
        result: Any = None,
        **values: Any,
    ) -> None:
        with self._lock:
            started = self._started.pop(run_id, None)
        values["finished_at"] = utcnow()
        if started is not None:
            values["runtime"] = time.monotonic() - started
        if result is not None:
            values["result"] = bounded(result, self.settings.summary_max_chars)
        self._record(run_id, task, headers, status, _OPEN, values)

    def _record(
        self,
        run_id: str,
        task: str,
        headers: Mapping[str, Any] | None,
        status: RunStatus,
        moves_from: frozenset[RunStatus],
        values: Mapping[str, Any],
        queued: bool = False,
    ) -> None:
        """Queue a status change; the backlog's thread writes it, with those made meanwhile."""
        external = headers is not None and not sent_by_bridge(headers)
        self.backlog.add(
            Change(
                run_id,
                status,
                moves_from,
                utcnow(),
                values,
                queued=queued,
                external_task=task if external else None,
            )
        )

    def _apply(self, changes: Sequence[Change]) -> None:
        """Write a batch of changes in one transaction, then answer those waited for.

        The runs are locked first, then the schedules of the runs that
        changed, each in id order, so that batches of several workers and
        beat's own writes (a run, then its schedule) never wait on each other
        in a circle.
        """
        with self.database.session() as session:
            connection = session.connection()
            statements = _Statements.of(connection.dialect.name == "postgresql")
            created = {c.run_id: _external_record(c) for c in changes if c.external_task}
            if created:
                insert = upsert_insert(session, TaskExecution).on_conflict_do_nothing()
                connection.execute(insert, list(created.values()))
            ids = sorted({change.run_id for change in changes})
            effects = _Effects.of(
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


@dataclass
class _Effects:
    """What a batch of changes does to the runs it names, locked as they were read."""

    #: The runs as read: status, schedule, trigger, plan time, attempt, queued_at.
    runs: Mapping[str, Any]
    #: Per run that changed, the columns to set: its changes merged, the last one winning.
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per run, its status once the batch is written.
    status: dict[str, RunStatus] = field(default_factory=dict)
    #: The runs the batch makes final, in the order they ended.
    ended: list[str] = field(default_factory=list)
    #: The answers owed to the makers of changes that wait for one.
    replies: list[tuple[Reply, bool]] = field(default_factory=list)

    @classmethod
    def of(cls, changes: Sequence[Change], runs: Mapping[str, Any]) -> _Effects:
        """Check each change against its run's status as the changes before it left it.

        A change so applies exactly when it would have in a transaction of
        its own: a late or repeated one finds the run moved on and is left
        out, and of two compare-and-set starts of one run only the first wins.
        """
        effects = cls(runs, status={run_id: RunStatus(run.status) for run_id, run in runs.items()})
        for change in changes:
            run = runs.get(change.run_id)
            applies = run is not None and effects.status[change.run_id] in change.moves_from
            if change.reply is not None:
                # A run without a record is not the bridge's to guard.
                effects.replies.append((change.reply, applies or run is None))
            if run is None or not applies:
                continue
            values = effects.values.setdefault(change.run_id, {})
            if change.queued and run.queued_at is None and "queued_at" not in values:
                values["queued_at"] = change.at
            values.update(change.values, status=change.status.value, updated_at=change.at)
            effects.status[change.run_id] = change.status
            if change.status.is_final:
                effects.ended.append(change.run_id)
        return effects

    def outcome(self, run_id: str) -> Outcome:
        """The end of a run the batch made final, for its schedule's settlement."""
        run, values = self.runs[run_id], self.values[run_id]
        return Outcome(
            trigger=Trigger(run.trigger),
            status=self.status[run_id],
            plan_time=run.plan_time,
            attempt=run.attempt,
            finished_at=values.get("finished_at", values["updated_at"]),
            error=values.get("error"),
        )


def _apply_to_schedules(session: Session, statements: _Statements, effects: _Effects) -> None:
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
    schedules = {
        row.id: row
        for row in session.scalars(
            statements.lock_schedules, {"schedules": sorted(set(schedule_of.values()))}
        )
    }
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


def _external_record(change: Change) -> dict[str, Any]:
    """The record of a run the bridge did not send, created by its first change."""
    return {
        "id": change.run_id,
        "task": change.external_task,
        "trigger": Trigger.EXTERNAL.value,
        "status": RunStatus.RECEIVED.value,
        "updated_at": change.at,
    }


_installed: dict[int, Recorder] = {}


def install(app: Celery, settings: Settings | None = None) -> Recorder:
    """Connect the recorder to the worker signals of ``app`` (idempotent).

    The settings, and the library of the broker's transport, are checked
    when a worker or beat of the app starts; a bad setting stops it with
    ``Error: <setting>: got ..., expected ...``, a missing library with the
    extra to install.
    """
    if id(app) in _installed:
        return _installed[id(app)]
    recorder = Recorder(app, settings)

    def for_app(handler: Callable[..., None]) -> Callable[..., None]:
        def receiver(sender: Any = None, **kwargs: Any) -> None:
            task_app = getattr(sender, "app", None)
            if task_app is not None and task_app is not app:
                return
            handler(sender=sender, **kwargs)

        return receiver

    def received(sender: Any = None, request: Any = None, **_: Any) -> None:
        recorder.on_received(request)

    def prerun(sender: Any = None, task_id: str = "", task: Any = None, **_: Any) -> None:
        recorder.on_prerun(task_id, task)

    def retry(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
        recorder.on_retry(request, reason)

    def revoked(sender: Any = None, request: Any = None, **kwargs: Any) -> None:
        recorder.on_revoked(request, **kwargs)

    heartbeats: list[WorkerHeartbeat] = []

    def starting(sender: Any = None, **_: Any) -> None:
        # Sent when a process loads the app's task modules: the worker and beat
        # (through the loader's init_worker, which marks itself first) before
        # either builds anything, and the CLI (which does not) when it checks
        # task names. Only the first two need the settings and the broker.
        if sender is app and app.loader.worker_initialized:
            recorder.check()

    def worker_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            interval = recorder.settings.worker_timeout / 3
            heartbeat = WorkerHeartbeat(recorder.database, sender.hostname, interval)
            heartbeat.start()
            heartbeats.append(heartbeat)

    def worker_shutdown(**_: Any) -> None:
        recorder.backlog.flush(SHUTDOWN_FLUSH_SECONDS)
        while heartbeats:
            heartbeats.pop().stop()

    def pool_process_shutdown(**_: Any) -> None:
        recorder.backlog.flush(SHUTDOWN_FLUSH_SECONDS)

    signals.import_modules.connect(starting, weak=False)
    signals.worker_ready.connect(worker_ready, weak=False)
    signals.worker_shutdown.connect(worker_shutdown, weak=False)
    signals.worker_process_shutdown.connect(pool_process_shutdown, weak=False)
    for signal, handler in (
        (signals.task_received, received),
        (signals.task_prerun, prerun),
        (signals.task_retry, retry),
        (signals.task_success, recorder.on_success),
        (signals.task_failure, recorder.on_failure),
        (signals.task_revoked, revoked),
    ):
        signal.connect(for_app(handler), weak=False)
    _installed[id(app)] = recorder
    return recorder
