"""The quick start: ``make demo`` (or ``python -m workers.demo``).

Runs the reference app on the embedded default (SQLite for the table, a
folder for the broker, both under ``.demo/``): migrates, adds a few example
schedules, starts one worker and ``celery beat -S bridge``, and every few
seconds prints the schedules and their latest runs until you press Ctrl-C
(or ``--seconds`` pass).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bridge.errors import DuplicateSchedule

DEMO_DIR = Path(".demo")
#: The environment that points the reference app at the demo's database and broker folder.
DEMO_SETTINGS = ("BRIDGE_DATABASE_URL", "BRIDGE_BROKER_DIR")

EXAMPLES = [
    {
        "name": "quick-every-10s",
        "task": "workers.app.quick",
        "timer": "every 10s",
        "kwargs": {"x": 40, "y": 2},
    },
    {
        "name": "slow-every-15s",
        "task": "workers.app.slow",
        "timer": "every 15s",
        "kwargs": {"seconds": 20},
    },
    {"name": "fail-every-minute", "task": "workers.app.fail", "timer": "* * * * *"},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    parser.add_argument("--every", type=float, default=10, help="seconds between reports")
    options = parser.parse_args()

    DEMO_DIR.mkdir(exist_ok=True)
    os.environ.setdefault("BRIDGE_DATABASE_URL", f"sqlite:///{DEMO_DIR / 'bridge.db'}")
    os.environ.setdefault("BRIDGE_BROKER_DIR", str(DEMO_DIR / "broker"))
    # The failing schedule's incident is alerted: workers.app.alert logs it in worker.log.
    os.environ.setdefault("BRIDGE_ALERT_TASK", "workers.app.alert")

    from bridge import Bridge
    from workers.app import app

    api = Bridge(app)
    api.migrate()
    for example in EXAMPLES:
        with contextlib.suppress(DuplicateSchedule):
            api.add(**example)  # type: ignore[arg-type]

    celery = [sys.executable, "-m", "celery", "-A", "workers.app"]
    processes = [
        start("worker", [*celery, "worker", "-l", "info", "-c", "2"]),
        start("beat", [*celery, "beat", "-S", "bridge", "-l", "info"]),
    ]
    print(f"worker and beat started; their logs are in {DEMO_DIR}/. Ctrl-C stops the demo.\n")
    deadline = time.monotonic() + options.seconds if options.seconds else None
    # Ctrl-C, or a supervisor's SIGTERM, sets a flag the loop looks at: an exception
    # raised by the signal inside a database call could be swallowed on the way out
    # of it, and the demo would go on reporting with its worker and beat gone.
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        while not stopping.is_set() and (deadline is None or time.monotonic() < deadline):
            if _slept(options.every, stopping):
                report(api)
    finally:
        print("\nstopping: the worker first finishes the runs it has started...")
        for process in processes:
            process.terminate()
        for process in processes:
            stop(process)
    # Every setting the demo's processes use, so that a command copied from
    # here (a `bridge run` too) reaches the demo's database and worker.
    settings = " ".join(f"{key}={os.environ[key]}" for key in DEMO_SETTINGS)
    print("\nstopped. Look around with, for example:")
    print(f"  {settings} .venv/bin/celery -A workers.app bridge history slow-every-15s")


def _slept(seconds: float, stopping: threading.Event) -> bool:
    """Sleep ``seconds`` in short steps; False if a stop was asked for meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stopping.is_set():
            return False
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return not stopping.is_set()


def stop(process: subprocess.Popen[bytes], grace: float = 40.0) -> None:
    """Wait for a warm shutdown (the slow task sleeps 20 s); kill what outlives it."""
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start(name: str, command: list[str]) -> subprocess.Popen[bytes]:
    log = (DEMO_DIR / f"{name}.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def report(api: object) -> None:
    from bridge import Bridge

    assert isinstance(api, Bridge)
    stamp = time.strftime("%H:%M:%S")
    print(f"--- {stamp} " + "-" * 60)
    for schedule in api.list():
        print(
            f"{schedule.name:20} {schedule.timer:12} runs={schedule.total_run_count:<3} "
            f"skipped={schedule.skipped_count:<3} last={schedule.last_status or '-'}"
        )
        for run in api.history(schedule.name, limit=3):
            plan = run.plan_time.astimezone().strftime("%H:%M:%S") if run.plan_time else "-"
            outcome = run.error or run.result or ""
            print(f"    {run.status:8} plan {plan}  {run.trigger:9} {outcome[:50]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
