"""Lag: workers are down for N minutes; does beat keep its pace, and its memory?

In one run, on a fresh PostgreSQL database and a Redis queue no worker reads:

1. ``--schedules`` (10,000) schedules ``every 1m``, all due at the same whole
   second, under ``--overlap`` (``allow``) and ``--expires`` (``next``, the
   default), imported once one beat is ready. No worker runs: every run beat
   sends stays ``SENT`` until its message expires (beat then ends it
   ``REVOKED``), or for good with ``--expires never``, as when the workers
   are down or far behind.
2. Each minute, for ``--minutes`` (10) minutes: a probe pops the burst off
   the queue as it arrives (``bench/broker_probe.py``); then, 42 s into the
   minute, the raw ``send_task`` loop sends the same number of messages to a
   queue of its own (``bench/burst.py``), the yardstick of that minute; then
   beat's memory is read.

Printed, one line a minute: the messages that arrived, their rate (first to
last arrival) beside the raw loop's of the same minute and beside beat's own
rate in the first minute, when the first and last of them arrived after the
due instant, beat's CPU over the minute, its proportional set size (PSS:
each page shared by beat and its finishing process counted once, summed over
both from ``/proc/<pid>/smaps_rollup``) and RSS, and the runs still open in
the table. Under overlap ``skip`` a minute whose runs of the minute before
are still open (their message expires as the next one is due, and beat ends
them two seconds later) sends nothing: that is the policy (docs/policies.md,
Message expiry), and the line says so.

    .venv/bin/python -m bench.lag                                 # 10 minutes, allow
    .venv/bin/python -m bench.lag --minutes 5 --expires never     # runs pile up
    .venv/bin/python -m bench.lag --overlap skip
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.beat_app import TASK
from bench.broker_probe import Probe, check_broker, purge_queue, rate
from bench.burst import (
    Options,
    add_common_arguments,
    common_options,
    due_in,
    iso,
    raw_ceiling,
    run_tag,
    start_beats,
)
from bench.harness import (
    CELERY,
    Process,
    exit_status,
    process_env,
    run_checked,
    run_sql,
    server_database,
    status_kib,
    table,
    tree_cpu_seconds,
    tree_kib,
    write_jsonl,
)

#: Seconds into each minute at which the probe of beat's burst gives up.
BURST_LIMIT = 40.0
#: Seconds into each minute at which the raw loop's messages are due.
RAW_AT = 45.0
#: Seconds before each due instant the probe starts polling.
PROBE_LEAD = 1.5
OPEN_RUNS = "SELECT count(*) FROM task_execution WHERE status IN ('PENDING', 'SENT')"


@dataclass(frozen=True)
class Minute:
    """What one minute of lag looked like."""

    index: int
    received: int
    rate: float | None
    raw: float | None
    first: float | None
    last: float | None
    cpu: float
    pss_mib: float
    rss_mib: float
    open_runs: int


def write_schedules(path: Path, size: int, due: float, overlap: str, expires: str) -> None:
    """``size`` schedules every minute whose first occurrence is ``due``."""
    anchor = iso(due)
    write_jsonl(
        path,
        (
            {
                "name": f"lag-{i:06d}",
                "task": TASK,
                "timer": "every 1m",
                "timezone": "UTC",
                "anchor": anchor,
                "overlap": overlap,
                "expires": expires,
            }
            for i in range(size)
        ),
    )


def run(options: Options, size: int, minutes: int, overlap: str, expires: str) -> list[Minute]:
    """The lag run; one :class:`Minute` a minute, printed as it ends."""
    check_broker(options.broker_url)
    queue = f"bridge-lag-{run_tag()}"
    found: list[Minute] = []
    with server_database(options.pg_url, "bridge_lag_") as url:
        env = process_env(url, options.broker_url, queue)
        run_checked([*CELERY, "bridge", "migrate"], env, options.workdir)
        beat = Process(
            "beat",
            [*CELERY, "beat", "-S", "bridge", "-l", options.loglevel],
            options.workdir,
            env,
        )
        try:
            start_beats([beat])
            due = due_in(options.lead_for(size))
            seed = options.workdir / f"{queue}.jsonl"
            write_schedules(seed, size, due, overlap, expires)
            run_checked([*CELERY, "bridge", "import", str(seed)], env, options.workdir)
            print(
                f"{size:,} schedules every minute, overlap {overlap}, expires {expires};"
                f" no worker; beat pid {beat.pid}; logs in {options.workdir}",
                flush=True,
            )
            for index in range(minutes):
                found.append(one_minute(index, due + 60 * index, size, beat, queue, url, options))
                print(describe(found[-1], found[0]), flush=True)
                if not beat.alive():
                    print(f"beat exited:\n{beat.log_tail()}", file=sys.stderr)
                    break
        finally:
            beat.stop()
            purge_queue(options.broker_url, queue)
    return found


def one_minute(
    index: int, due: float, size: int, beat: Process, queue: str, url: str, options: Options
) -> Minute:
    """Probe the burst due at ``due``, then run the raw loop, then read beat's memory."""
    time.sleep(max(0.0, due - PROBE_LEAD - time.time()))
    cpu_before = tree_cpu_seconds(beat.pid)
    with Probe(options.broker_url, queue, size, due, BURST_LIMIT, options.interval) as probe:
        arrivals = probe.result()
    figures = arrivals.figures(due)
    time.sleep(max(0.0, due + RAW_AT - 3.0 - time.time()))
    raw = raw_ceiling(size, options).figures
    cpu = tree_cpu_seconds(beat.pid) - cpu_before
    return Minute(
        index=index,
        received=arrivals.received,
        rate=None if figures is None else figures.rate,
        raw=None if raw is None else raw.rate,
        first=None if figures is None else figures.first,
        last=None if figures is None else figures.last,
        cpu=cpu,
        pss_mib=tree_kib(beat.pid, "Pss") / 1024,
        rss_mib=status_kib(beat.pid, "VmRSS") / 1024,
        open_runs=int(run_sql(url, OPEN_RUNS)[0][0]),
    )


def describe(minute: Minute, first: Minute) -> str:
    """One minute's line."""

    def ratio(mine: float | None, other: float | None) -> str:
        return "-" if mine is None or not other else f"{mine / other:.2f}"

    seconds = "-" if minute.last is None else f"{minute.first:.3f} / {minute.last:.2f}"
    return (
        f"minute {minute.index + 1:>2}: {minute.received:>6,} sent, {rate(minute.rate):>6}/s"
        f" (raw {rate(minute.raw)}/s: x{ratio(minute.rate, minute.raw)};"
        f" x{ratio(minute.rate, first.rate)} of minute 1), first / last {seconds} s,"
        f" beat {minute.cpu:.1f} CPU s, PSS {minute.pss_mib:.1f} MiB"
        f" (RSS {minute.rss_mib:.1f}), {minute.open_runs:,} runs open"
    )


def summary(minutes: Sequence[Minute]) -> str:
    """The minutes as a table, for docs/performance.md."""

    def cell(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    first = minutes[0]
    rows = [
        [
            str(m.index + 1),
            f"{m.received:,}",
            cell(m.rate, ",.0f"),
            cell(m.raw, ",.0f"),
            "-" if m.rate is None or not m.raw else f"{m.rate / m.raw:.2f}",
            "-" if m.rate is None or not first.rate else f"{m.rate / first.rate:.2f}",
            cell(m.first, ".3f"),
            cell(m.last, ".2f"),
            f"{m.cpu:.1f}",
            f"{m.pss_mib:.1f}",
            f"{m.open_runs:,}",
        ]
        for m in minutes
    ]
    header = [
        "minute",
        "sent",
        "rate/s",
        "raw/s",
        "x raw",
        "x minute 1",
        "first s",
        "last s",
        "CPU s",
        "PSS MiB",
        "open runs",
    ]
    return table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lag",
        description="Every-minute schedules with no worker for N minutes: beat's pace and memory.",
    )
    add_common_arguments(parser, sizes=False)
    parser.add_argument("--schedules", type=int, default=10_000, help="schedules (10000)")
    parser.add_argument("--minutes", type=int, default=10, help="minutes of lag (10)")
    parser.add_argument("--overlap", default="allow", help="the schedules' overlap policy (allow)")
    parser.add_argument(
        "--expires", default="next", help="the schedules' message expiry: next, never, 30s (next)"
    )
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.minutes < 1:
        parser.error("--schedules and --minutes must be at least 1")
    args.sizes = [args.schedules]
    options = common_options(parser, args)

    def go() -> int:
        minutes = run(options, args.schedules, args.minutes, args.overlap, args.expires)
        if minutes:
            print("\n" + summary(minutes))
        return 0

    return exit_status(go)


if __name__ == "__main__":
    sys.exit(main())
