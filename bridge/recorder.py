"""Execution records written by Celery workers.

Install it with one line in the module that creates the Celery app::

    bridge.recorder.install(app)

It connects handlers to Celery's task signals and writes each run's status
(``RECEIVED``, ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE``, ``REVOKED``),
times, worker hostname, runtime and a bounded summary of the outcome into
``task_execution``. Tasks the bridge did not send carry none of its headers
and are left alone, unless ``bridge_record_all_tasks`` is on.

A final status is also settled on the run's schedule (see
:func:`bridge.lifecycle.settle_runs`): it may owe a retry, trip the breaker,
set a fixed delay's next run or free a held occurrence.

Recording never fails a task: a write the database refuses is retried a few
times and then held in memory and written, in order, once the database is
back (see :mod:`bridge.backlog`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery, signals
from sqlalchemy import Update, func, update
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from .backlog import UNREACHABLE, Backlog, Held
from .config import Settings
from .database import Database, database_for, error_reason
from .dispatch import HEADER_SCHEDULE_ID
from .lifecycle import settle_runs
from .liveness import WorkerHeartbeat
from .models import NON_FINAL_STATUSES, PeriodicTask, RunStatus, TaskExecution, Trigger, utcnow
from .store import insert_ignoring_duplicates

logger = logging.getLogger("bridge.recorder")

#: Statuses a worker may move a run out of (it never reopens a final run).
_OPEN = [status.value for status in NON_FINAL_STATUSES]
#: Statuses of a run no delivery has started yet (a RETRY waits for its next delivery).
_NOT_STARTED = [RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED, RunStatus.RETRY]
#: How long a worker shutting down waits for the database to take its held records.
SHUTDOWN_FLUSH_SECONDS = 5.0
#: Set on the request of a delivery :class:`bridge.task.BridgeTask` dropped as a
#: duplicate: the recorder then records nothing for it.
DUPLICATE = "bridge_duplicate"


def sent_by_bridge(headers: Mapping[str, Any] | None) -> bool:
    return bool(headers and HEADER_SCHEDULE_ID in headers)


def bounded(text: Any, limit: int) -> str:
    """At most ``limit`` characters of ``text``, marked when cut."""
    value = text if isinstance(text, str) else repr(text)
    return value if len(value) <= limit else value[: limit - 15] + "... [truncated]"


def _show_on_schedule(session: Session, run_id: str, status: RunStatus) -> None:
    """Copy a run's new status to the schedule whose last run it is."""
    session.execute(
        update(PeriodicTask)
        .where(PeriodicTask.last_run_id == run_id)
        .values(last_status=status.value)
        .execution_options(synchronize_session=False)
    )


class Recorder:
    """Writes run records for one app; one instance per process, shared by its threads."""

    def __init__(self, app: Celery, settings: Settings | None = None) -> None:
        self.app = app
        self.settings = settings or Settings.from_app(app)
        self.database: Database = database_for(self.settings.database_url)
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()
        self.backlog = Backlog()

    # -- which tasks are ours -----------------------------------------------

    def wants(self, headers: Mapping[str, Any] | None) -> bool:
        return self.settings.record_all_tasks or sent_by_bridge(headers)

    # -- signal handlers -----------------------------------------------------

    def on_received(self, request: Any, **_: Any) -> None:
        headers = request.request_dict
        if not self.wants(headers):
            return
        now = utcnow()
        self._write(
            request.id,
            request.task_name,
            headers,
            status=RunStatus.RECEIVED,
            worker=request.hostname,
            queued_at=func.coalesce(TaskExecution.queued_at, now),
            # This runs in the worker's consumer: waiting out a database hiccup
            # here would stall every task. STARTED follows and corrects it.
            retry=False,
            # Never back from STARTED: a second delivery of a running run
            # must not make it look unstarted. A run RECEIVED again (the
            # broker redelivered it) now belongs to the worker that has it.
            moves_from=[RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED],
        )

    def on_prerun(self, task_id: str, task: Any, **_: Any) -> None:
        if not self.wants(task.request.headers):
            return
        with self._lock:
            self._started[task_id] = time.monotonic()
        if getattr(task, "starts_once", False):
            return  # a BridgeTask records its start itself, as a compare-and-set
        self._write(
            task_id,
            task.name,
            task.request.headers,
            status=RunStatus.STARTED,
            worker=task.request.hostname,
            started_at=utcnow(),
        )

    def on_retry(self, request: Any, reason: Any = None, **kwargs: Any) -> None:
        if not self.wants(request.headers):
            return
        self._write(
            request.id,
            request.task,
            request.headers,
            status=RunStatus.RETRY,
            error=bounded(str(reason), self.settings.summary_max_chars),
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
        # is one of ours, which costs one statement for any other task.
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
        reason = "expired" if expired else "terminated" if terminated else "revoked"
        self._finish(request.id, task, headers, RunStatus.REVOKED, error=reason)

    # -- effectively once ----------------------------------------------------------

    def start_once(self, run_id: str, worker: str | None) -> bool:
        """Record that this delivery starts the run, if no other has; True to run the body.

        The compare-and-set moves the record from a not-yet-started status to
        STARTED; a second delivery finds it STARTED (or final) and gets False.
        A run with no record is not the bridge's to guard, and a database that
        cannot be reached lets the body run: both True.
        """
        now = utcnow()
        try:
            with self.database.session() as session:
                started = session.execute(
                    update(TaskExecution)
                    .where(TaskExecution.id == run_id, TaskExecution.status.in_(_NOT_STARTED))
                    .values(status=RunStatus.STARTED, started_at=now, worker=worker, updated_at=now)
                    .returning(TaskExecution.id)
                ).first()
                if started is not None:
                    _show_on_schedule(session, run_id, RunStatus.STARTED)
                    return True
                return session.get(TaskExecution, run_id) is None
        except (OperationalError, DBAPIError) as exc:
            logger.error("bridge: could not check run %s is new (%s); running it", run_id, exc)
            # Kept for when the database is back; the body runs meanwhile.
            self._write(
                run_id,
                "",
                None,
                status=RunStatus.STARTED,
                retry=False,
                moves_from=_NOT_STARTED,
                started_at=now,
                worker=worker,
            )
            return True

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
        now = utcnow()
        if started is not None:
            values["runtime"] = time.monotonic() - started
        if result is not None:
            values["result"] = bounded(result, self.settings.summary_max_chars)
        self._write(run_id, task, headers, status=status, finished_at=now, **values)

    def _write(
        self,
        run_id: str,
        task: str,
        headers: Mapping[str, Any] | None,
        retry: bool = True,
        moves_from: list[RunStatus] | None = None,
        **values: Any,
    ) -> None:
        """Apply a status change to the run and its schedule, retrying database hiccups."""
        now = utcnow()
        values |= {"updated_at": now}
        status: RunStatus = values["status"]
        external = headers is not None and not sent_by_bridge(headers)
        statement: Update = (
            update(TaskExecution)
            .where(TaskExecution.id == run_id, TaskExecution.status.in_(moves_from or _OPEN))
            .values(values)
        )

        def apply() -> None:
            with self.database.session() as session:
                if external:
                    insert_ignoring_duplicates(
                        session,
                        {
                            "id": run_id,
                            "task": task,
                            "trigger": Trigger.EXTERNAL.value,
                            "status": RunStatus.RECEIVED.value,
                            "updated_at": now,
                        },
                    )
                changed = session.execute(statement.returning(TaskExecution.id)).first()
                if changed is None:
                    return  # the run moved on without this write (a late or repeated one)
                _show_on_schedule(session, run_id, status)
                if status.is_final and not external:
                    # What the outcome does to the schedule: a retry, the
                    # breaker, a fixed delay's next run, a held run's start.
                    settle_runs(session, [run_id], now)

        held = Held(f"{status.value} of run {run_id}", apply)
        self._with_retries(held, self.settings.recorder_retries if retry else 0)

    def _with_retries(self, held: Held, retries: int) -> None:
        """Write now, retrying a refused write a few times; then hold it for later."""
        if len(self.backlog):
            self.backlog.hold(held)  # behind the writes held before it
            return
        for attempt in range(1, retries + 2):
            try:
                held.write()
                return
            except UNREACHABLE as exc:
                if attempt > retries:
                    logger.warning("bridge: could not record %s: %s", held.what, error_reason(exc))
                    self.backlog.hold(held)
                    return
                time.sleep(min(2.0, 0.1 * 2**attempt))
            except Exception:
                # Recording must never fail the task it records, and a write
                # the database refuses for its content will not get better.
                logger.exception("bridge: recording %s failed", held.what)
                return


_installed: dict[int, Recorder] = {}


def install(app: Celery, settings: Settings | None = None) -> Recorder:
    """Connect the recorder to the worker signals of ``app`` (idempotent)."""
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
