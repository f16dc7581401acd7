"""Lateness of a lone schedule firing every second, measured at the broker.

One schedule, ``every 1s``, one ``celery beat -S bridge`` and no worker. A
probe pops each of beat's messages off the Redis queue the moment it lands
and takes its lateness: the arrival time minus the run's plan time (the
``bridge_plan_time`` header). The schedule's ``start`` and ``end`` bounds
give it exactly ``--duration`` occurrences, so a lost or doubled one shows.

    .venv/bin/python -m bench.lone --duration 180
    .venv/bin/python -m bench.lone --duration 180 --db sqlite

Exit status: 0 when every occurrence arrived once, 1 otherwise, 2 when the
run could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from bench.beat_app import TASK, app
from bench.broker_probe import Message, MessageProbe, new_queue
from bench.harness import (
    STORES,
    Beat,
    add_service_options,
    admin_url,
    database,
    exit_status,
    machine_load,
    percentile,
    process_env,
    safe_url,
    spread,
    workdir,
)
from bridge import Bridge

NAME = "lone"
#: The target of the issue: p99 lateness at the broker.
TARGET_P99 = 0.020
#: How long after the last occurrence its message may still arrive.
GRACE = 5.0


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lone",
        description="Lateness at the broker of one schedule firing every second.",
    )
    parser.add_argument("--duration", type=int, default=180, help="seconds of occurrences (180)")
    parser.add_argument("--db", choices=STORES, default="postgresql", help="store (postgresql)")
    parser.add_argument(
        "--lead", type=float, default=2.0, help="seconds from beat ready to the first occurrence"
    )
    add_service_options(parser)
    options = parser.parse_args(argv)
    if options.duration < 1 or options.lead <= 0:
        parser.error("--duration must be at least 1 and --lead greater than 0")
    return options


def run(options: argparse.Namespace) -> int:
    queue = new_queue("lone")
    with (
        workdir("lone") as folder,
        database(options.db, admin_url(options.db, options), folder) as url,
        MessageProbe(options.redis_url, queue) as probe,
    ):
        print(
            f"lone schedule: every 1s for {options.duration}s on {safe_url(url)},"
            f" broker {options.redis_url} queue {queue}",
            flush=True,
        )
        with Beat(process_env(url, options.redis_url, queue), folder) as beat:
            print(f"beat ready {beat.ready():.2f}s after its start", flush=True)
            start = datetime.fromtimestamp(math.ceil(time.time() + options.lead), UTC)
            end = start + timedelta(seconds=options.duration - 1)
            bridge = Bridge(app, database_url=url)
            bridge.add(
                NAME,
                task=TASK,
                timer="every 1s",
                anchor=start,
                start=start,
                end=end,
                # Nothing finishes the runs: overlap skip would skip all but the first.
                overlap="allow",
            )
            bridge.database.dispose()
            cpu_before, wall_before = beat.cpu_seconds(), time.monotonic()
            beat.observe(max(0.0, end.timestamp() - time.time()))
            probe.wait_for(lambda a: a.plan_time >= end, GRACE)
            cpu = beat.cpu_seconds() - cpu_before
            wall = time.monotonic() - wall_before
            rss = beat.status_kib("VmHWM")
    return report(options.duration, start, probe.arrivals, cpu, wall, rss)


def report(
    duration: int,
    start: datetime,
    arrivals: Sequence[Message],
    cpu: float,
    wall: float,
    rss_kib: int,
) -> int:
    """Print the figures; the exit status."""
    plans = Counter(a.plan_time for a in arrivals)
    expected = {start + timedelta(seconds=k) for k in range(duration)}
    missing = len(expected - set(plans))
    doubled = sum(1 for count in plans.values() if count > 1)
    unexpected = len(set(plans) - expected)
    lateness = [a.lateness for a in arrivals]
    print(f"lateness (arrival at the broker - plan time): {spread(lateness)}")
    if lateness:
        verdict = "met" if percentile(lateness, 0.99) <= TARGET_P99 else "missed"
        print(f"target p99 <= {TARGET_P99 * 1000:.0f} ms: {verdict}")
    triggers = Counter(a.trigger for a in arrivals)
    print(
        f"occurrences: {duration} expected, {len(plans)} arrived, {missing} missing,"
        f" {doubled} doubled, {unexpected} unexpected;"
        " triggers: " + ", ".join(f"{k} {v}" for k, v in sorted(triggers.items()))
    )
    print(
        f"beat: cpu {cpu:.2f}s in {wall:.0f}s ({100 * cpu / wall:.2f} %),"
        f" peak RSS {rss_kib / 1024:.1f} MiB"
    )
    print(machine_load())
    return 0 if not (missing or doubled or unexpected) else 1


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
