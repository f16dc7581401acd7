"""The Celery app of the worker throughput bench (see ``bench/worker_throughput.py``).

Everything comes from the environment the bench gives the worker:

* ``CELERY_BROKER_URL``: the Redis broker;
* ``BENCH_QUEUE``: a queue name unique to the run; the broker's bookkeeping
  of unacknowledged messages is kept under keys named after it too, so the
  bench can tell when every message has been processed and delete them all;
* ``BRIDGE_DATABASE_URL``: the run's own PostgreSQL database;
* ``BENCH_RECORDER``: ``1`` installs the bridge's recorder, anything else
  leaves the app a plain Celery app;
* ``BENCH_COUNT_DIR``: a folder where each worker process writes, when it
  shuts down, how many SQL statements, commits, pool checkouts and new
  connections it made (``counts-<pid>.json``).

Messages are acknowledged after the task ran (``task_acks_late``), so a
message leaves the broker's unacknowledged set only once it is done: the
queue plus that set is the work left. The ack happens once per message
either way; only its moment moves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from celery import Celery, signals
from sqlalchemy import Engine, event
from sqlalchemy.pool import Pool

import bridge.recorder
from bridge import BridgeTask

QUEUE = os.environ.get("BENCH_QUEUE", "bridge-rec")

app = Celery("bench", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14"))
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    task_acks_late=True,
    broker_transport_options={
        "unacked_key": f"{QUEUE}.unacked",
        "unacked_index_key": f"{QUEUE}.unacked_index",
        "unacked_mutex_key": f"{QUEUE}.unacked_mutex",
    },
    # Nothing on the shared Redis database but the run's own keys: no events,
    # no remote control (the bench also turns off mingle and gossip).
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
    broker_connection_retry_on_startup=True,
    bridge_sync_beat_schedule=False,
)

if os.environ.get("BENCH_RECORDER") == "1":
    bridge.recorder.install(app)


@app.task  # type: ignore[untyped-decorator]
def noop() -> None:
    """Does nothing: what is left is the cost of running a task."""


@app.task(base=BridgeTask)  # type: ignore[untyped-decorator]
def noop_once() -> None:
    """Does nothing, under the compare-and-set start of :class:`bridge.BridgeTask`."""


class DatabaseCounts:
    """What this process asked of the database, counted by SQLAlchemy's events.

    ``executions`` are the statements SQLAlchemy executed, each a round trip
    (psycopg sends the rows of an ``executemany`` in one pipeline);
    ``statements`` counts each row of an ``executemany`` as the statement the
    server runs for it. The pool's connection check before each checkout
    bypasses these events and is counted as a checkout. ``commits`` are the
    transactions committed.
    """

    KEYS = ("executions", "statements", "commits", "checkouts", "connections")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.KEYS, 0)
        event.listen(Engine, "before_cursor_execute", self._execution)
        event.listen(Engine, "commit", self._commit)
        event.listen(Pool, "checkout", self._checkout)
        event.listen(Pool, "connect", self._connect)
        # A forked pool child counts its own work from zero.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.counts = dict.fromkeys(self.KEYS, 0)

    def _execution(
        self, _conn: Any, _cursor: Any, _sql: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        self.counts["executions"] += 1
        self.counts["statements"] += len(parameters) if many else 1

    def _commit(self, *_: Any) -> None:
        self.counts["commits"] += 1

    def _checkout(self, *_: Any) -> None:
        self.counts["checkouts"] += 1

    def _connect(self, *_: Any) -> None:
        self.counts["connections"] += 1

    def write(self, folder: Path) -> None:
        path = folder / f"counts-{os.getpid()}.json"
        path.write_text(json.dumps(self.counts))


if os.environ.get("BENCH_COUNT_DIR"):
    _counts = DatabaseCounts()
    _folder = Path(os.environ["BENCH_COUNT_DIR"])

    def _write_counts(**_: Any) -> None:
        _counts.write(_folder)

    # A pool child reports when it exits, the main process when the worker stops.
    signals.worker_process_shutdown.connect(_write_counts, weak=False)
    signals.worker_shutdown.connect(_write_counts, weak=False)
