"""Execution records written by Celery workers.

Install it with one line in the module that creates the Celery app::

    bridge.recorder.install(app)

It connects handlers to Celery's task signals and writes each run's status
(``RECEIVED``, ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE``, ``REVOKED``),
times, worker hostname, runtime and a bounded summary of the outcome into
``task_execution``. Tasks the bridge did not send carry none of its headers
and are left alone, unless ``bridge_record_all_tasks`` is on.

Writing costs a worker little: each status change joins the process's
queue of record writes (:mod:`bridge.worker.backlog`), whose thread writes what has
gathered in one transaction of a few round trips, however many runs it
holds; a run's changes in one batch are merged into one update. A change is
written within :data:`bridge.worker.backlog.GATHER` seconds; only the
compare-and-set start of a :class:`bridge.celery.task.BridgeTask` waits for its
answer.

A final status is also settled on the run's schedule in the same
transaction (see :mod:`bridge.service.records`): it may owe a retry,
trip the breaker, set a fixed delay's next run or free a held occurrence.

Recording never fails a task: a batch the database refuses is retried a few
times and then held in memory and written, in order, once the database is
back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals

from bridge.celery.broker import CeleryBroker, check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.rules.canvas import HEADER_PART, HEADER_RUN, run_of
from bridge.rules.decisions import EXPIRED
from bridge.rules.kinds import RunStatus
from bridge.rules.records import NOT_RECEIVED, NOT_STARTED, ON_ITS_WAY, OPEN, Change
from bridge.rules.releases import Fit
from bridge.rules.runs import HEADER_SCHEDULE_ID
from bridge.service.records import Recording
from bridge.storage.database import Database, DatabaseError, SchemaMismatch, error_reason
from bridge.storage.records import RecordStore
from bridge.tracing import Tracer
from bridge.version import __version__
from bridge.worker.backlog import Backlog, Reply
from bridge.worker.heartbeat import BeatWatch, WorkerHeartbeat

logger = logging.getLogger("bridge.recorder")

#: How long a worker shutting down waits for the database to take its held records.
SHUTDOWN_FLUSH_SECONDS = 5.0
#: The longest a BridgeTask delivery waits to learn whether it starts its run.
START_ANSWER_SECONDS = 30.0
#: Set on the request of a delivery :class:`bridge.celery.task.BridgeTask` dropped as a
#: duplicate: the recorder then records nothing for it.
DUPLICATE = "bridge_duplicate"
#: How many canvas tasks a worker remembers the run of, for a failure its main process
#: reports without the message's headers (a hard time limit): the latest received.
CANVAS_TASKS_KEPT = 10_000


def sent_by_bridge(headers: Mapping[str, Any] | None) -> bool:
    return bool(headers and HEADER_SCHEDULE_ID in headers)


def _canvas_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """What of a canvas task's headers says which run it is of."""
    return {
        key: headers[key] for key in (HEADER_SCHEDULE_ID, HEADER_RUN, HEADER_PART) if key in headers
    }


def bounded(text: Any, limit: int) -> str:
    """At most ``limit`` characters of ``text``, marked when cut."""
    value = text if isinstance(text, str) else repr(text)
    return value if len(value) <= limit else value[: limit - 15] + "... [truncated]"


@dataclass(frozen=True)
class _Parts:
    """What the recorder builds from the settings, once they are read."""

    settings: Settings
    store: RecordStore
    backlog: Backlog[Change]
    #: Opens the span of each run (``bridge_tracing``); None when not tracing.
    tracer: Tracer | None = None


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
        #: The open span of each run this process executes, when tracing.
        self._spans: dict[str, Any] = {}
        #: The bridge's headers of the canvas tasks this worker received, by task id, oldest
        #: first (see :data:`CANVAS_TASKS_KEPT`).
        self._canvas_tasks: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _built(self) -> _Parts:
        if self._parts is None:
            with self._parts_lock:
                if self._parts is None:
                    settings = self._given or Settings.from_app(self.app)
                    # No connection check before each batch: a connection the server
                    # dropped fails its batch, which is tried again on a fresh one
                    # like any refused write.
                    database = Database(settings.database_url, pre_ping=False)
                    self._parts = _Parts(
                        settings,
                        RecordStore(database),
                        Backlog(
                            Recording(database, settings.thresholds).write,
                            settings.recorder_retries,
                        ),
                        Tracer() if settings.tracing else None,
                    )
        return self._parts

    @property
    def settings(self) -> Settings:
        return self._built().settings

    @property
    def store(self) -> RecordStore:
        return self._built().store

    @property
    def backlog(self) -> Backlog[Change]:
        return self._built().backlog

    def check(self) -> None:
        """Read the settings, load the database driver and the broker's transport, and ask
        whether this release may run against the store's schema, as a worker or beat starts.

        A bad setting, a missing library or a schema behind or ahead of the release ends
        the process with one line naming it. A store not migrated yet, or not answering,
        does not: the run records wait in the backlog until it is.
        """
        try:
            self.store.database.engine  # noqa: B018 - loads the driver; does not connect
            check_broker(self.app)
            self.store.database.require_schema(__version__)
        except SchemaMismatch as exc:
            if exc.fit is not Fit.EMPTY:
                raise SystemExit(f"Error: {exc}") from None
            logger.warning("bridge: %s; run records wait for it", exc)
        except BridgeError as exc:
            raise SystemExit(f"Error: {exc}") from None
        except DatabaseError as exc:
            logger.warning(
                "bridge: database unreachable as the worker starts (%s); its schema is not checked",
                error_reason(exc),
            )

    # -- which tasks are ours -----------------------------------------------

    def wants(self, headers: Mapping[str, Any] | None) -> bool:
        return self.settings.record_all_tasks or sent_by_bridge(headers)

    # -- signal handlers -----------------------------------------------------

    def on_received(self, request: Any, **_: Any) -> None:
        headers = request.request_dict
        if not self.wants(headers):
            return
        if not run_of(request.id, headers)[1]:
            # A task of a canvas after its first: the run is received already. Kept for a
            # failure the main process reports without the message's headers.
            with self._lock:
                self._canvas_tasks[request.id] = _canvas_headers(headers)
                while len(self._canvas_tasks) > CANVAS_TASKS_KEPT:
                    self._canvas_tasks.pop(next(iter(self._canvas_tasks)))
            return
        self._record(
            request.id,
            request.task_name,
            headers,
            RunStatus.RECEIVED,
            NOT_RECEIVED,
            {"worker": request.hostname},
            queued=True,
        )

    def on_prerun(self, task_id: str, task: Any, **_: Any) -> None:
        if not self.wants(task.request.headers):
            return
        tracer = self._built().tracer
        span = None if tracer is None else tracer.run(task_id, task.name, task.request.headers)
        with self._lock:
            self._started[task_id] = time.monotonic()
            if span is not None:
                self._spans[task_id] = span
        run_id, first, _last = run_of(task_id, task.request.headers)
        if not first:
            # A task of a canvas after its first: the run has started, and is now on this
            # worker, which the sweep of dead workers' runs must look at rather than the
            # first task's (which may have been restarted since, its task done).
            self._record(
                run_id,
                task.name,
                task.request.headers,
                RunStatus.STARTED,
                ON_ITS_WAY,
                {"worker": task.request.hostname},
            )
            return
        if getattr(task, "starts_once", False):
            return  # a BridgeTask records its start itself, as a compare-and-set
        self._record(
            task_id,
            task.name,
            task.request.headers,
            RunStatus.STARTED,
            OPEN,
            {"worker": task.request.hostname, "started_at": utcnow()},
        )

    def on_retry(self, request: Any, reason: Any = None, **kwargs: Any) -> None:
        if not self.wants(request.headers):
            return
        error = bounded(str(reason), self.settings.summary_max_chars)
        self._end_span(request.id, error)
        if not run_of(request.id, request.headers)[1]:
            return  # a task of a canvas after its first retries within the run
        self._record(
            request.id, request.task, request.headers, RunStatus.RETRY, OPEN, {"error": error}
        )

    def on_success(self, sender: Any, result: Any = None, **_: Any) -> None:
        request = sender.request
        if not self.wants(request.headers) or getattr(request, DUPLICATE, False):
            return
        run_id, _first, last = run_of(request.id, request.headers)
        if not last:
            # A task of a canvas that others follow: the run goes on, on no worker until
            # the next task starts (the sweep of dead workers' runs leaves it alone).
            self._end_task(request.id, None)
            self._record(
                run_id,
                sender.name,
                request.headers,
                RunStatus.STARTED,
                ON_ITS_WAY,
                {"worker": None},
            )
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
        if headers is None:
            with self._lock:
                headers = self._canvas_tasks.pop(task_id, None)
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
            NOT_STARTED,
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

    def _end_span(self, task_id: str, error: str | None) -> None:
        """End the span of a task this process ran, marked with ``error`` when it failed."""
        with self._lock:
            span = self._spans.pop(task_id, None)
        tracer = self._built().tracer
        if span is not None and tracer is not None:
            tracer.end(span, error)

    def _end_task(self, task_id: str, error: str | None) -> float | None:
        """Forget a task this process ran, ending its span; how long it ran, if seen."""
        with self._lock:
            started = self._started.pop(task_id, None)
        self._end_span(task_id, error)
        return None if started is None else time.monotonic() - started

    def _finish(
        self,
        task_id: str,
        task: str,
        headers: Mapping[str, Any] | None,
        status: RunStatus,
        result: Any = None,
        **values: Any,
    ) -> None:
        """Record the end a task reports on its run: the task's own, or its canvas's (see
        :mod:`bridge.rules.canvas`), whose run lasts from its first task to its end."""
        runtime = self._end_task(
            task_id, None if status is RunStatus.SUCCESS else values.get("error")
        )
        run_id, _, last = run_of(task_id, headers)
        values["finished_at"] = utcnow()
        canvas = HEADER_RUN in (headers or {})
        if runtime is not None and not canvas:
            values["runtime"] = runtime
        if result is not None:
            values["result"] = bounded(result, self.settings.summary_max_chars)
        part = canvas and status is RunStatus.SUCCESS and last
        self._record(run_id, task, headers, status, OPEN, values, part=part)

    def _record(
        self,
        run_id: str,
        task: str,
        headers: Mapping[str, Any] | None,
        status: RunStatus,
        moves_from: frozenset[RunStatus],
        values: Mapping[str, Any],
        queued: bool = False,
        part: bool = False,
    ) -> None:
        """Queue a status change; the backlog's thread writes it, with those made meanwhile.

        Any change of a task the bridge did not send may create its record, not only the
        receipt: the pool child's ``STARTED`` and ``SUCCESS`` (whose request shows no
        headers at all when the message carries none of its own) can reach the database
        before the main process's ``RECEIVED``, and would find no record to update.
        Creating it skips a record that exists, so a bridge run whose headers a killed
        child's failure lacks is only updated.
        """
        external = self.settings.record_all_tasks and not sent_by_bridge(headers)
        self.backlog.add(
            Change(
                run_id,
                status,
                moves_from,
                utcnow(),
                values,
                queued=queued,
                external_task=task if external else None,
                part=part,
            )
        )


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
            watch = BeatWatch(CeleryBroker(app), recorder.settings, recorder.store)
            heartbeat = WorkerHeartbeat(recorder.store, sender.hostname, interval, watch)
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
