"""Pruning off the hot path: does a prune pass make a schedule firing every second late?

On a database of ``--schedules`` (10,000) schedules and ``--runs``
(10,000,000) run records, seeded inside PostgreSQL as ``bench/web.py`` seeds
(most of them beyond the default retention of 100 runs or 30 days), one
``celery beat -S bridge`` fires a lone schedule every second for
``--duration`` seconds, twice:

1. **pruning off** (``BRIDGE_HISTORY_KEEP_RUNS=0``, ``..._DAYS=0``): the
   baseline;
2. **pruning on** (the defaults): the watchdog prunes for up to a second
   every ``bridge_watchdog_interval`` (5 s), in beat's sleep between two
   ticks, deleting thousands of runs a pass.

A probe pops each message of the lone schedule off the Redis queue as it
lands and takes its lateness (arrival - plan time). Printed for each phase:
lateness p50, p99 and max, and the runs deleted meanwhile; the target is a
p99 with pruning no higher than without.

    .venv/bin/python -m bench.prune
    .venv/bin/python -m bench.prune --schedules 1000 --runs 1000000 --duration 60

Exit status: 0 when every occurrence of both phases arrived once, 1
otherwise, 2 when the run could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.beat_app import TASK, app
from bench.broker_probe import MessageProbe, new_queue
from bench.harness import (
    Beat,
    add_service_options,
    exit_status,
    machine_load,
    percentile,
    process_env,
    run_sql,
    workdir,
)
from bench.web import seeded_database
from bridge import Bridge

#: Seconds from adding the lone schedule to its first occurrence.
LEAD = 3.0
#: Seconds after the last occurrence allowed for its message.
GRACE = 10.0


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prune",
        description="A schedule firing every second, with the watchdog pruning and without.",
    )
    parser.add_argument("--schedules", type=int, default=10_000, help="schedules (10000)")
    parser.add_argument("--runs", type=int, default=10_000_000, help="run records (10000000)")
    parser.add_argument(
        "--duration", type=int, default=120, help="seconds of firing in each phase (120)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    parser.add_argument("--reuse", metavar="URL", help="measure on a kept database, unseeded")
    add_service_options(parser)
    options = parser.parse_args(argv)
    if options.schedules < 100 or options.runs < options.schedules or options.duration < 10:
        parser.error("--schedules at least 100, --runs at least --schedules, --duration >= 10")
    return options


def runs_count(url: str) -> int:
    [(count,)] = run_sql(url, "SELECT count(*) FROM task_execution")
    return int(count)


def phase(url: str, options: argparse.Namespace, folder: Path, name: str, prune: bool) -> bool:
    """Fire the lone schedule ``name`` for ``--duration`` seconds; print its figures."""
    queue = new_queue(f"prune-{name}")
    off = {} if prune else {"history_keep_runs": "0", "history_keep_days": "0"}
    before = runs_count(url)
    with (
        MessageProbe(options.redis_url, queue) as probe,
        Beat(process_env(url, options.redis_url, queue, **off), folder) as beat,
    ):
        beat.ready()
        start = datetime.fromtimestamp(math.ceil(time.time() + LEAD), UTC)
        end = start + timedelta(seconds=options.duration - 1)
        bridge = Bridge(app, database_url=url)
        bridge.add(
            name, task=TASK, timer="every 1s", anchor=start, start=start, end=end, overlap="allow"
        )
        bridge.database.dispose()
        time.sleep(max(0.0, end.timestamp() - time.time()))
        probe.wait_for(lambda a: a.plan_time >= end, GRACE)
        arrivals = [a for a in probe.arrivals if a.schedule == name]
    late = [a.lateness * 1000 for a in arrivals]
    plans = {a.plan_time for a in arrivals}
    complete: bool = len(plans) == len(arrivals) == int(options.duration)
    # The lone schedule's own runs are added meanwhile; pruned ones are gone.
    pruned = before + len(arrivals) - runs_count(url)
    print(
        f"pruning {'on ' if prune else 'off'}: lateness p50 {percentile(late, 0.5):.1f} ms"
        f" p99 {percentile(late, 0.99):.1f} ms max {max(late, default=0):.1f} ms;"
        f" {len(arrivals)} of {options.duration} occurrences;"
        f" {max(pruned, 0):,} runs pruned meanwhile",
        flush=True,
    )
    return complete


def run(options: argparse.Namespace) -> int:
    with workdir("prune") as folder, seeded_database(options, folder) as (url, _):
        quiet = phase(url, options, folder, "lone-without-pruning", prune=False)
        busy = phase(url, options, folder, "lone-with-pruning", prune=True)
    print(machine_load())
    return 0 if quiet and busy else 1


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
