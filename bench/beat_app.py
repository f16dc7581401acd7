"""The Celery app of the beat benchmarks: ``bench/lone.py``, ``scale.py``, ``pickup.py``,
``burst.py`` and ``peers.py``; ``bench/web.py`` serves the HTTP API with it.

No worker runs: the benchmarks take beat's messages straight off the Redis
queue (``bench/broker_probe.py``) to see when each one reached the broker.
The settings every scheduler's app shares are in :func:`shared_settings`,
which the peers' apps under ``bench/peers/`` use too (they run in a
virtualenv of their own, where only Celery is common, so this module imports
nothing else). Everything comes from the environment the bench gives its
processes:

* ``CELERY_BROKER_URL``: the Redis broker;
* ``BENCH_QUEUE``: a queue name unique to the run, so that a run never reads
  or leaves messages in anybody else's queue;
* ``BRIDGE_DATABASE_URL`` and any other ``BRIDGE_*`` setting, for the bridge's beat.

Run as a script, the module is the burst's raw ceiling: one process that
waits for the due instant, then publishes with a plain ``app.send_task``
loop, and prints the wall and CPU seconds the loop took as JSON::

    python -m bench.beat_app --count 1000 --due 1795000000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.signals import beat_init

#: The task every bench schedule sends; nothing executes it.
TASK = "bench.beat_app.noop"
#: What a beat of any bench app logs once its scheduler is set up and about to tick.
READY = "bench: beat ready"


def shared_settings() -> dict[str, Any]:
    """Celery settings of every bench app: the run's queue, and nothing else on Redis."""
    return {
        "broker_url": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
        "task_default_queue": os.environ.get("BENCH_QUEUE", "bridge-bench"),
        "task_ignore_result": True,
        "task_send_sent_event": False,
        "worker_enable_remote_control": False,
        # No result backend, so no nightly clean-up entry in anybody's schedule.
        "result_expires": None,
        "timezone": "UTC",
        "enable_utc": True,
        "broker_connection_retry_on_startup": True,
    }


def _say_ready(sender: Any = None, **kwargs: Any) -> None:
    """Celery sends ``beat_init`` once the scheduler is built, just before the first tick.

    A scheduler that loads its whole schedule when it starts is only then
    ready for the burst, so the burst bench waits for this line, not for
    beat's banner. Logged at WARNING so that any log level shows it.
    """
    logging.getLogger("bench.beat").warning(READY)


beat_init.connect(_say_ready)


app = Celery("bench")
app.conf.update(
    shared_settings(),
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


def send_raw(count: int, due: float) -> dict[str, float]:
    """Wait for ``due`` (epoch seconds), then send ``count`` messages.

    Returns the wall and CPU seconds of the loop, as the loop itself sees them.
    """
    time.sleep(max(0.0, due - time.time()))
    started, before = time.perf_counter(), time.process_time()
    for _ in range(count):
        app.send_task(TASK)
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - before}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.beat_app", description="The raw ceiling: a plain send_task loop."
    )
    parser.add_argument("--count", type=int, required=True, help="messages to send")
    parser.add_argument("--due", type=float, required=True, help="when to start (epoch seconds)")
    args = parser.parse_args(argv)
    print(json.dumps(send_raw(args.count, args.due)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
