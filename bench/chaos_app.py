"""The Celery app of the chaos bench's beats and workers (see ``bench/chaos.py``).

Everything comes from the environment the bench gives its processes:

* ``CELERY_BROKER_URL``: the Redis broker;
* ``BENCH_QUEUE``: a queue name unique to the run, so that a run never reads
  or leaves messages in anybody else's queue;
* ``BRIDGE_DATABASE_URL``: the run's own PostgreSQL database, where the task
  also writes one ``chaos_hit`` row each time its body executes.

The task is a :class:`bridge.BridgeTask`, so a second delivery of a run is
dropped before the body runs; a ``chaos_hit`` row per body execution lets the
bench count executions independently of the run records.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from celery import Celery
from sqlalchemy import Engine, create_engine, text

import bridge.recorder
from bridge import BridgeTask

#: Created by the bench before any process starts; no constraint, so a second
#: execution of the same run is a second row, not an error.
HIT_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS chaos_hit (
    run_id VARCHAR(36) NOT NULL,
    worker VARCHAR(255),
    pid INTEGER NOT NULL,
    at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
)
"""

app = Celery("bench", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13"))
app.conf.update(
    task_default_queue=os.environ.get("BENCH_QUEUE", "bridge-chaos"),
    task_ignore_result=True,
    # No broadcast traffic on the shared Redis database: no events, no
    # remote control, no mingle or gossip.
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
    beat_scheduler="bridge",
    bridge_sync_beat_schedule=False,
)

bridge.recorder.install(app)

_engines: dict[int, Engine] = {}
_engines_lock = threading.Lock()


def _engine() -> Engine:
    """One engine per process: the prefork pool forks after this module is imported."""
    pid = os.getpid()
    with _engines_lock:
        if pid not in _engines:
            _engines[pid] = create_engine(
                os.environ["BRIDGE_DATABASE_URL"], pool_size=4, max_overflow=4
            )
        return _engines[pid]


@app.task(bind=True, base=BridgeTask)  # type: ignore[untyped-decorator]
def hit(self: Any) -> str:
    """Record that the body of this run executed, once more."""
    with _engine().begin() as connection:
        connection.execute(
            text("INSERT INTO chaos_hit (run_id, worker, pid) VALUES (:run_id, :worker, :pid)"),
            {
                "run_id": self.request.id,
                "worker": self.request.hostname or socket.gethostname(),
                "pid": os.getpid(),
            },
        )
    return "hit"
