"""Beat with many rows, a handful due: startup, memory, idle CPU and tick time by row count.

For each size (1,000, 100,000 and 1,000,000 rows by default) on a fresh
database: seeds the rows through ``bridge import`` (a JSON Lines file), of
which ``--due`` (5) fire every ``--every`` (2) seconds and the rest are due
days from now; starts one ``celery beat -S bridge -l debug`` once the due
rows are overdue, and measures from outside:

* startup: from the process start to beat's ``bridge: beat instance`` line,
  and to the first message of a due row at the broker;
* a firing window of ``--window`` seconds with the due rows firing: beat's
  tick times (its ``bridge: tick claimed N fired M in X ms`` lines), the
  lateness of the due rows' messages at the broker, beat's CPU;
* an idle window of ``--idle`` seconds after the due rows were paused: the
  tick times and beat's CPU when nothing is due;
* beat's largest resident memory (``VmRSS`` sampled, and ``VmHWM``), and the
  largest proportional set size of beat with its finishing process (PSS: a
  page the two share counts once), the issue's measure.

    .venv/bin/python -m bench.scale
    .venv/bin/python -m bench.scale --sizes 1000,100000 --window 10 --idle 10

Exit status: 0 when the run completed, 2 when it could not be set up.
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench import SetupError
from bench.beat_app import TASK, app
from bench.broker_probe import MessageProbe, new_queue
from bench.harness import (
    STORES,
    Beat,
    Tick,
    add_service_options,
    admin_url,
    database,
    exit_status,
    import_schedules,
    machine_load,
    percentile,
    process_env,
    settle,
    spread,
    table,
    workdir,
    write_jsonl,
)
from bridge import Bridge

DUE_PREFIX = "due-"
#: The far rows' occurrences are spread over the week from an hour after seeding.
FAR_TIMER = "every 7d"
FAR_FROM = timedelta(hours=1)
FAR_SPAN = timedelta(days=7) - FAR_FROM
#: The issue's targets at 1,000,000 rows: beat with its finishing process within 120 MB
#: (MB: 10**6 bytes) of PSS, and idle under a hundredth of a core.
TARGET_PSS_MB = 120.0
TARGET_IDLE_CPU = 0.01


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="Beat's startup, memory, idle CPU and tick time by number of rows.",
    )
    parser.add_argument(
        "--sizes",
        type=row_counts,
        default="1000,100000,1000000",
        help="row counts, comma-separated, each on a fresh database (1000,100000,1000000)",
    )
    parser.add_argument("--due", type=int, default=5, help="rows that fire (5)")
    parser.add_argument("--every", type=int, default=2, help="seconds between their runs (2)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds firing (30)")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds with nothing due (30)")
    parser.add_argument("--db", choices=STORES, default="postgresql", help="store (postgresql)")
    add_service_options(parser)
    options = parser.parse_args(argv)
    if min(options.sizes) <= options.due or options.due < 1 or options.every < 1:
        parser.error("--due and --every must be at least 1, and every size larger than --due")
    if options.window <= 0 or options.idle <= 0:
        parser.error("--window and --idle must be greater than 0")
    return options


def row_counts(text: str) -> list[int]:
    """``1000,100_000`` -> ``[1000, 100000]``."""
    try:
        return [int(size) for size in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not numbers separated by commas") from None


@dataclass(frozen=True)
class Result:
    """The figures of one size."""

    rows: int
    import_seconds: float
    ready: float
    first_message: float
    rss_max_kib: int
    rss_peak_kib: int
    pss_max_kib: int
    busy_cpu: float
    idle_cpu: float
    busy_ticks: list[Tick]
    idle_ticks: list[Tick]
    lateness: list[float]

    @property
    def rss_mib(self) -> float:
        """The largest resident memory seen, sampled or as the kernel kept it."""
        return max(self.rss_max_kib, self.rss_peak_kib) / 1024

    @property
    def firing_ticks(self) -> list[Tick]:
        return [tick for tick in self.busy_ticks if tick.fired]


def schedules(rows: int, due: int, every: int, now: datetime) -> Iterator[dict[str, object]]:
    """The lines of the seed file: ``due`` rows firing, the rest days away."""
    for i in range(due):
        yield {
            "name": f"{DUE_PREFIX}{i}",
            "task": TASK,
            "timer": f"every {every}s",
            "anchor": now,
            # Nothing finishes the runs: overlap skip would skip all but the first.
            "overlap": "allow",
        }
    far = rows - due
    for i in range(far):
        yield {
            "name": f"far-{i:07d}",
            "task": TASK,
            "timer": FAR_TIMER,
            "anchor": now + FAR_FROM + FAR_SPAN * (i / far),
        }


def measure(options: argparse.Namespace, rows: int) -> Result:
    queue = new_queue("scale")
    with (
        workdir("scale") as folder,
        database(options.db, admin_url(options.db, options), folder) as url,
        MessageProbe(options.redis_url, queue) as probe,
    ):
        env = process_env(url, options.redis_url, queue)
        seed = folder / "schedules.jsonl"
        write_jsonl(seed, schedules(rows, options.due, options.every, datetime.now(UTC)))
        began = time.monotonic()
        said = import_schedules(seed, env, folder)
        imported = time.monotonic()
        print(f"  bridge import {imported - began:.1f}s ({said})", flush=True)
        if options.db != "sqlite":
            settle(url)
            print(f"  settled (statistics, pages) {time.monotonic() - imported:.1f}s", flush=True)
        # The due rows' first occurrence comes at most one interval after the
        # import: beat starts once they are overdue, so its first tick fires them.
        time.sleep(max(0.0, imported + options.every + 0.5 - time.monotonic()))
        with Beat(env, folder, loglevel="debug") as beat:
            ready = beat.ready()
            first = probe.wait_for(lambda a: a.schedule.startswith(DUE_PREFIX), 120.0)
            if first is None:
                raise SetupError(f"no message of a due row within 120s:\n{beat.tail()}")
            beat.observe(1.0)  # past the catch-up of the first tick

            busy_from, cpu = time.monotonic(), beat.cpu_seconds()
            beat.observe(options.window)
            busy_cpu = (beat.cpu_seconds() - cpu) / (time.monotonic() - busy_from)
            busy_ticks = beat.ticks(busy_from)
            lateness = [
                a.lateness
                for a in probe.since(busy_from)
                if a.schedule.startswith(DUE_PREFIX) and a.trigger == "scheduled"
            ]

            bridge = Bridge(app, database_url=url)
            for i in range(options.due):
                bridge.pause(f"{DUE_PREFIX}{i}", note="bench: idle window")
            bridge.database.dispose()
            beat.observe(1.0)  # a tick that may still have held a paused row
            idle_from, cpu = time.monotonic(), beat.cpu_seconds()
            beat.observe(options.idle)
            idle_cpu = (beat.cpu_seconds() - cpu) / (time.monotonic() - idle_from)
            return Result(
                rows=rows,
                import_seconds=imported - began,
                ready=ready,
                first_message=first.at - beat.started,
                rss_max_kib=beat.rss_max_kib,
                rss_peak_kib=beat.status_kib("VmHWM"),
                pss_max_kib=beat.pss_max_kib,
                busy_cpu=busy_cpu,
                idle_cpu=idle_cpu,
                busy_ticks=busy_ticks,
                idle_ticks=beat.ticks(idle_from),
                lateness=lateness,
            )


def tick_seconds(ticks: Sequence[Tick]) -> list[float]:
    """Tick durations in seconds, like every other figure before it is printed."""
    return [tick.ms / 1000 for tick in ticks]


def report(options: argparse.Namespace, results: Sequence[Result]) -> None:
    """The figures of every size, one block each, then a table to compare them."""
    logs_ticks = any(r.busy_ticks or r.idle_ticks for r in results)
    for r in results:
        print(f"{r.rows:,} rows ({options.due} due every {options.every}s):")
        print(f"  startup: beat instance line {r.ready:.2f}s, first message {r.first_message:.2f}s")
        print(
            f"  RSS: max sampled {r.rss_max_kib / 1024:.1f} MiB,"
            f" peak (VmHWM) {r.rss_peak_kib / 1024:.1f} MiB;"
            f" PSS of beat and its finishing process: max sampled {r.pss_max_kib / 1024:.1f} MiB"
            f" ({r.pss_max_kib * 1024 / 1e6:.1f} MB)"
        )
        print(
            f"  CPU: idle {100 * r.idle_cpu:.2f} % over {options.idle:g}s,"
            f" firing {100 * r.busy_cpu:.2f} % over {options.window:g}s"
        )
        if logs_ticks:
            print(f"  tick time, idle ticks: {spread(tick_seconds(r.idle_ticks))}")
            print(f"  tick time, ticks that fired: {spread(tick_seconds(r.firing_ticks))}")
        print(f"  lateness at the broker (arrival - plan time): {spread(r.lateness)}")
    if not logs_ticks:
        print(
            "note: beat logged no 'bridge: tick claimed N fired M in X ms' line;"
            " the lateness of the due rows at the broker stands in for the tick time"
        )
    print()
    print(
        table(
            (
                "rows",
                "import s",
                "ready s",
                "1st msg s",
                "RSS MiB",
                "PSS MiB",
                "idle CPU %",
                "idle tick ms p50/p99",
                "firing tick ms p50/p99",
                "lateness ms p50/p99",
            ),
            [
                (
                    f"{r.rows:,}",
                    f"{r.import_seconds:.1f}",
                    f"{r.ready:.2f}",
                    f"{r.first_message:.2f}",
                    f"{r.rss_mib:.1f}",
                    f"{r.pss_max_kib / 1024:.1f}",
                    f"{100 * r.idle_cpu:.2f}",
                    p50_p99(tick_seconds(r.idle_ticks)),
                    p50_p99(tick_seconds(r.firing_ticks)),
                    p50_p99(r.lateness),
                )
                for r in results
            ],
        )
    )
    biggest = max(results, key=lambda r: r.rows)
    print(
        f"targets at {biggest.rows:,} rows: PSS <= {TARGET_PSS_MB:.0f} MB"
        f" {'met' if biggest.pss_max_kib * 1024 / 1e6 <= TARGET_PSS_MB else 'missed'},"
        f" idle CPU < {100 * TARGET_IDLE_CPU:.0f} %"
        f" {'met' if biggest.idle_cpu < TARGET_IDLE_CPU else 'missed'}"
    )
    print(machine_load())


def p50_p99(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"{percentile(values, 0.5) * 1000:.1f} / {percentile(values, 0.99) * 1000:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    print(f"scale: {options.db}, sizes {', '.join(f'{s:,}' for s in options.sizes)}", flush=True)

    def run() -> int:
        results: list[Result] = []
        for rows in options.sizes:
            print(f"{rows:,} rows:", flush=True)
            results.append(measure(options, rows))
        report(options, results)
        return 0

    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
