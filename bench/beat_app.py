"""The Celery app of the beat benchmarks (``bench/lone.py``, ``scale.py``, ``pickup.py``).

No worker runs: the benchmarks pop beat's messages straight off the Redis
queue to see when each one reached the broker. Everything comes from the
environment the bench gives its processes:

* ``CELERY_BROKER_URL``: the Redis broker;
* ``BENCH_QUEUE``: a queue name unique to the run, so that a run never reads
  or leaves messages in anybody else's queue;
* ``BRIDGE_DATABASE_URL`` and any other ``BRIDGE_*`` setting.
"""

from __future__ import annotations

import logging
import os

from celery import Celery

#: The task every bench schedule sends; nothing executes it.
TASK = "bench.beat_app.noop"

app = Celery("bench", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"))
app.conf.update(
    task_default_queue=os.environ.get("BENCH_QUEUE", "bridge-bench"),
    task_ignore_result=True,
    # Nothing on the shared Redis database but the run's own queue.
    task_send_sent_event=False,
    worker_enable_remote_control=False,
    beat_scheduler="bridge",
    bridge_sync_beat_schedule=False,
)

# ``beat -l debug`` sets the root logger to DEBUG, which would make
# SQLAlchemy log every statement and row beat runs: the cost of that logging
# would be measured as the cost of a tick.
logging.getLogger("sqlalchemy").setLevel(logging.WARNING)


@app.task(name=TASK)  # type: ignore[untyped-decorator]
def noop() -> None:
    """A task for the schedules to name; the benchmarks never run it."""
