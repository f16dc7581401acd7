"""The health's read of a backlog: what judging schedules costs when workers have been down.

On a fresh PostgreSQL database, two sets of ``--schedules`` (1,000) schedules
every minute:

- **backlog**: each with ``--hours`` (24) hours of runs sent and never
  started, one a minute: a day of workers down under ``--expires never``
  (runs that expire end, and retention prunes them to ``keep_runs``; runs
  not final are never pruned);
- **baseline**: each with its latest occurrence sent and waiting alone.

Then, ``--repeat`` (5) times for each set, the read the watchdog, the pages
and the overview judge a thousand schedules' health from
(:func:`bridge.storage.runs.runs_seen`, through ``HealthStore.runs_seen``):
its wall and CPU time, the runs it hands the health, and the peak of the
memory Python allocated for it (``tracemalloc``, in a run of its own after
the timed ones). Printed: each figure beside the baseline's and their ratio;
what the read costs should not grow with the backlog.

    .venv/bin/python -m bench.backlog
    .venv/bin/python -m bench.backlog --schedules 1000 --hours 4

Exit status: 0 when both sets were judged late, 1 otherwise, 2 when the run
could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bench.harness import add_service_options, database, exit_status, run_sql, workdir
from bridge import Bridge
from bridge.clock import utcnow
from bridge.rules.health import waiting_since
from bridge.storage.database import database_for
from bridge.storage.health import HealthStore

#: The seeding of one set's runs, inside PostgreSQL: each schedule's last ``:minutes``
#: occurrences sent and waiting, as beat leaves them with the workers down.
SEED = """
INSERT INTO task_execution
    (id, periodic_task_id, task, plan_time, attempt, trigger, status, queued_at, updated_at)
SELECT gen_random_uuid()::text, s.id, s.task, :now - make_interval(mins => m), 1,
       'scheduled', 'SENT', :now - make_interval(mins => m), :now - make_interval(mins => m)
FROM periodic_task s CROSS JOIN generate_series(1, :minutes) AS m
WHERE s.name LIKE :prefix
"""


@dataclass(frozen=True)
class Reading:
    """One set's read: the median of its timed runs, and its allocation peak."""

    wall: float
    cpu: float
    runs: int
    peak_mib: float
    late: int


def read(bridge: Bridge, ids: Sequence[int], now: datetime, repeat: int) -> Reading:
    store = HealthStore(bridge.database)
    walls, cpus, runs = [], [], 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.thread_time()
        seen = store.runs_seen(ids, now, waiting_since)
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
        runs = sum(len(found) for found in seen.runs.values())
    tracemalloc.start()
    store.runs_seen(ids, now, waiting_since)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    late = sum(1 for schedule in bridge.list() if schedule.id in ids and schedule.health == "late")
    return Reading(
        sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2], runs, peak / 2**20, late
    )


def run(options: argparse.Namespace) -> int:
    with workdir("backlog") as folder, database("postgresql", options.pg_url, folder) as url:
        bridge = Bridge(database_url=url)
        started = time.perf_counter()
        for prefix in ("backlog", "baseline"):
            for number in range(options.schedules):
                bridge.add(f"{prefix}-{number}", task="bench.task", timer="every 1m")
        now = utcnow()
        minutes = {"backlog": options.hours * 60, "baseline": 1}
        for prefix, count in minutes.items():
            run_sql(url, SEED, now=now, minutes=count, prefix=f"{prefix}-%")
        run_sql(url, "ANALYZE")
        seeded = run_sql(url, "SELECT count(*) FROM task_execution")[0][0]
        print(
            f"{options.schedules:,} schedules with {options.hours} h of runs waiting and"
            f" {options.schedules:,} without; {seeded:,} runs seeded in"
            f" {time.perf_counter() - started:.0f} s"
        )
        ids = {
            prefix: [s.id for s in bridge.list() if s.name.startswith(prefix)] for prefix in minutes
        }
        found = {prefix: read(bridge, ids[prefix], now, options.repeat) for prefix in minutes}
        backlog, baseline = found["backlog"], found["baseline"]
        for label, unit, scale, name in (
            ("wall", " ms", 1000.0, "wall"),
            ("CPU", " ms", 1000.0, "cpu"),
            ("runs read", "", 1.0, "runs"),
            ("peak allocated", " MiB", 1.0, "peak_mib"),
        ):
            mine, base = getattr(backlog, name) * scale, getattr(baseline, name) * scale
            print(
                f"{label:>15}: backlog {mine:,.1f}{unit}, baseline {base:,.1f}{unit}:"
                f" x{mine / base if base else float('nan'):.2f}"
            )
        print(f"{'judged late':>15}: backlog {backlog.late:,}, baseline {baseline.late:,}")
        database_for(url).dispose()
        return 0 if backlog.late == baseline.late == options.schedules else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_service_options(parser)
    parser.add_argument("--schedules", type=int, default=1000, help="schedules per set (1000)")
    parser.add_argument("--hours", type=int, default=24, help="hours of backlog (24)")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads per set (5)")
    options = parser.parse_args(argv)
    if options.schedules < 1 or options.hours < 1 or options.repeat < 1:
        parser.error("--schedules, --hours and --repeat must be at least 1")
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
