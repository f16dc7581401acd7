"""Beat at rest on a large history: its idle CPU, with its finishing process, and whether
retention holds.

For each database given (``--template``, one per scale: seeded by
``bench/web.py --keep``, 1,000 to 1,000,000 schedules over 10,000,000 runs of
the last 30 days), on a copy made with ``CREATE DATABASE ... TEMPLATE``:

1. moves every schedule's next run a day ahead, so that nothing is due;
2. starts one ``celery beat -S bridge`` with ``--keep-runs`` and
   ``--keep-days`` as the app's retention, lets it run ``--settle`` seconds
   (its first passes), then takes its CPU time and its finishing process's
   over ``--idle`` seconds;
3. stops beat and checks retention on what is left: per schedule, its final
   runs beyond its ``keep_runs`` (the target: at most one batch, 500), and
   the oldest final run that is not the latest of its status, against its
   ``keep_days`` (the target: at most an hour past).

    .venv/bin/python -m bench.idle --template URL [--template URL ...]

Exit status: 0 when every scale met both targets, 1 otherwise, 2 when the run
could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import create_engine, make_url, text

from bench.broker_probe import new_queue
from bench.harness import (
    Beat,
    add_service_options,
    exit_status,
    machine_load,
    process_env,
    run_sql,
    safe_url,
    table,
    workdir,
)

TARGET_IDLE_CPU = 0.01
#: Final runs a schedule may keep beyond its ``keep_runs``: one batch of the pruning.
TARGET_EXCESS = 500
TARGET_AGE = timedelta(hours=1)

NOTHING_DUE = """
UPDATE periodic_task SET nextrun = nextrun + interval '1 day',
    next_occurrence = next_occurrence + interval '1 day'
WHERE nextrun < now() + interval '1 hour'
"""

#: Per schedule: final runs beyond ``keep_runs``, and how far its oldest final run that is
#: not the latest of its status is past ``keep_days`` (the worst of each, over all).
RETENTION = """
WITH final AS (
    SELECT periodic_task_id AS s, plan_time,
        row_number() OVER (
            PARTITION BY periodic_task_id, status ORDER BY plan_time DESC, attempt DESC
        ) AS nth_of_status
    FROM task_execution
    WHERE status IN ('SUCCESS', 'FAILURE', 'REVOKED', 'LOST')
), per AS (
    SELECT s, count(*) AS n, min(plan_time) FILTER (WHERE nth_of_status > 1) AS oldest
    FROM final GROUP BY s
)
SELECT
    max(per.n - coalesce(p.keep_runs, :keep_runs))
        FILTER (WHERE coalesce(p.keep_runs, :keep_runs) > 0),
    extract(epoch FROM max(now() - (per.oldest + coalesce(p.keep_days, :keep_days)
        * interval '1 day')) FILTER (WHERE coalesce(p.keep_days, :keep_days) > 0)),
    (SELECT count(*) FROM task_execution),
    (SELECT count(*) FROM periodic_task)
FROM per JOIN periodic_task p ON p.id = per.s
"""


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.idle", description="Beat's idle CPU on a large history."
    )
    parser.add_argument(
        "--template", action="append", required=True, help="a seeded database (repeatable)"
    )
    parser.add_argument("--keep-runs", type=int, default=100, help="the app's keep_runs (100)")
    parser.add_argument("--keep-days", type=int, default=30, help="the app's keep_days (30)")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds before (60)")
    parser.add_argument("--idle", type=float, default=120.0, help="seconds measured (120)")
    add_service_options(parser)
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Result:
    schedules: int
    runs_before: int
    runs_after: int
    settle_cpu: float
    idle_cpu: float
    excess: int
    age_past: float

    @property
    def met(self) -> bool:
        return (
            self.idle_cpu <= TARGET_IDLE_CPU
            and self.excess <= TARGET_EXCESS
            and self.age_past <= TARGET_AGE.total_seconds()
        )


@contextlib.contextmanager
def copy_of(template: str) -> Iterator[str]:
    """A database copied from ``template`` (which no one may be connected to); its URL."""
    source = make_url(template)
    name = f"bridge_idle_{uuid.uuid4().hex[:10]}"
    admin = create_engine(source.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{source.database}"'))
        yield source.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def retention(url: str, options: argparse.Namespace) -> tuple[int, float, int, int]:
    [(excess, past, runs, schedules)] = run_sql(
        url, RETENTION, keep_runs=options.keep_runs, keep_days=options.keep_days
    )
    return int(excess or 0), float(past or 0.0), int(runs), int(schedules)


def measure(template: str, options: argparse.Namespace) -> Result:
    with workdir("idle") as folder, copy_of(template) as url:
        run_sql(url, NOTHING_DUE)
        [(runs_before,)] = run_sql(url, "SELECT count(*) FROM task_execution")
        env = process_env(
            url,
            options.redis_url,
            new_queue("idle"),
            history_keep_runs=str(options.keep_runs),
            history_keep_days=str(options.keep_days),
        )
        with Beat(env, folder) as beat:
            beat.ready()
            began, cpu = time.monotonic(), beat.cpu_seconds()
            beat.observe(options.settle)
            settle_cpu = (beat.cpu_seconds() - cpu) / (time.monotonic() - began)
            began, cpu = time.monotonic(), beat.cpu_seconds()
            beat.observe(options.idle)
            idle_cpu = (beat.cpu_seconds() - cpu) / (time.monotonic() - began)
        excess, past, runs_after, schedules = retention(url, options)
        result = Result(schedules, runs_before, runs_after, settle_cpu, idle_cpu, excess, past)
        print(
            f"  {safe_url(template)}: {schedules:,} schedules, runs {runs_before:,} ->"
            f" {runs_after:,}; CPU {100 * settle_cpu:.2f} % over the first {options.settle:g}s,"
            f" {100 * idle_cpu:.2f} % over the next {options.idle:g}s; final runs beyond"
            f" keep_runs at most {excess}, oldest past keep_days by {past / 3600:.2f} h",
            flush=True,
        )
        return result


def run(options: argparse.Namespace) -> int:
    print(
        f"idle: keep_runs {options.keep_runs}, keep_days {options.keep_days},"
        f" {options.settle:g}s settling then {options.idle:g}s measured",
        flush=True,
    )
    results = [measure(template, options) for template in options.template]
    print(
        table(
            ("schedules", "runs", "CPU % first", "CPU % idle", "excess runs", "age past h", ""),
            [
                (
                    f"{r.schedules:,}",
                    f"{r.runs_before:,}",
                    f"{100 * r.settle_cpu:.2f}",
                    f"{100 * r.idle_cpu:.2f}",
                    str(r.excess),
                    f"{r.age_past / 3600:.2f}",
                    "met" if r.met else "missed",
                )
                for r in results
            ],
        )
    )
    print(
        f"targets: idle CPU <= {100 * TARGET_IDLE_CPU:.0f} % of a core (beat and its finishing"
        f" process), excess <= {TARGET_EXCESS}, age past <= {TARGET_AGE.total_seconds() / 3600:g} h"
    )
    print(machine_load())
    return 0 if all(r.met for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
