"""Burst: N schedules due at the same instant, measured at the broker against a raw loop.

For each size N (1,000 and 10,000 by default), in one run:

1. **Raw ceiling.** One process waits for a due instant, then publishes N
   messages with a plain ``app.send_task`` loop (``bench/beat_app.py``).
2. **Bridge.** A fresh PostgreSQL database ``bridge_burst_<random>`` (MariaDB or
   MySQL with ``--db mariadb``), migrated
   with ``celery bridge migrate``; ``--beats`` (1) ``celery beat -S bridge``
   processes started on it; then N schedules ``every 1h`` anchored on a due
   instant a whole second ahead, written to a JSON Lines file and loaded with
   ``celery bridge import``. Every schedule's first occurrence is that instant.

Both bursts go to a queue of their own that no worker consumes, on Redis
(the default) or on RabbitMQ (``--broker rabbitmq``), and
``bench/broker_probe.py`` notes when each message arrives there. Each is
reported as the publish rate (from the first arrival to the last, and from
the due instant), its ratio to the raw loop's, the lateness (arrival - due
instant) of the median, 99th-percentile and last message, and the CPU seconds
the publisher spent from the due instant to the end of the burst.

    .venv/bin/python -m bench.burst                       # 1,000 and 10,000
    .venv/bin/python -m bench.burst --sizes 100000 --beats 2
    .venv/bin/python -m bench.burst --broker rabbitmq       # the same on RabbitMQ
    .venv/bin/python -m bench.burst --db mariadb            # the schedules on MariaDB

Beats inherit the environment, so ``BRIDGE_BATCH_SIZE=500 python -m
bench.burst`` runs them with that setting. ``bench/peers.py`` runs the same
burst against Celery's own scheduler, django-celery-beat and RedBeat.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from bench.beat_app import READY, TASK
from bench.broker_probe import (
    DEFAULT_INTERVAL,
    Figures,
    Probe,
    check_broker,
    lateness,
    purge_queue,
    rate,
)
from bench.harness import (
    CELERY,
    SERVERS,
    Process,
    add_service_options,
    admin_url,
    exit_status,
    process_env,
    run_checked,
    server_database,
    start_all,
    stop_all,
    tree_cpu_seconds,
    tree_status_kib,
    write_jsonl,
)

#: The RabbitMQ of ``--broker rabbitmq``.
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
#: Seconds between starting the raw loop's process and its due instant.
RAW_LEAD = 3.0
#: How long before the due instant the publishers' CPU time is read.
CPU_READ_LEAD = 0.05
#: The longest a beat may take to start.
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class Options:
    """Where the bursts run and how they are timed; shared with ``bench/peers.py``."""

    sizes: list[int]
    #: The store of the bridge's schedules: ``postgresql`` or ``mariadb``.
    db: str
    pg_url: str
    mysql_url: str
    redis_url: str
    #: Where the bursts are published: the Redis above, or RabbitMQ (``--broker rabbitmq``).
    broker_url: str
    #: Seconds after the due instant after which a burst is cut short.
    limit: float
    #: Seconds from the start of set-up (starting beat, seeding) to the due
    #: instant; None: :func:`auto_lead`.
    lead: float | None
    interval: float
    #: The log level of every beat.
    loglevel: str
    workdir: Path

    def lead_for(self, size: int) -> float:
        return self.lead if self.lead is not None else auto_lead(size)


def auto_lead(size: int) -> float:
    """Room for seeding ``size`` schedules and starting beat before the due instant."""
    return 6.0 + size / 1500


def add_common_arguments(parser: argparse.ArgumentParser, sizes: bool = True) -> None:
    """The options of ``bench/burst.py`` and ``bench/peers.py`` alike (``bench/catchup.py``:
    all but ``--sizes``)."""
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 10_000],
        help="burst sizes, each run in turn (1000 10000)" if sizes else argparse.SUPPRESS,
    )
    add_service_options(parser, "BRIDGE_BURST", "redis://127.0.0.1:6379/12", "each burst")
    parser.add_argument(
        "--limit",
        type=float,
        default=120.0,
        help="seconds after the due instant to give a burst up (120)",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=None,
        help="seconds from the start of set-up (beat, seeding) to the due instant"
        " (6 + 1 per 1,500 schedules)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help=f"seconds between two polls of the broker probe ({DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--loglevel",
        choices=["debug", "info", "warning"],
        default="info",
        help="log level of the beats (info: one line per message, as in production)",
    )


def common_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Options:
    if any(size < 1 for size in args.sizes):
        parser.error("--sizes must be at least 1")
    if args.limit <= 0 or args.interval <= 0 or (args.lead is not None and args.lead <= 0):
        parser.error("--limit, --lead and --interval must be greater than 0")
    return Options(
        sizes=args.sizes,
        db=getattr(args, "db", "postgresql"),
        pg_url=args.pg_url,
        mysql_url=args.mysql_url,
        redis_url=args.redis_url,
        broker_url=args.redis_url,
        limit=args.limit,
        lead=args.lead,
        interval=args.interval,
        loglevel=args.loglevel,
        workdir=Path(tempfile.mkdtemp(prefix="bridge-burst-")),
    )


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One scheduler's burst, as the broker saw it."""

    label: str
    expected: int
    figures: Figures | None
    #: CPU seconds the publishing processes spent on the burst.
    cpu: float | None
    #: Seconds spent seeding the schedules and starting beat, before the due instant.
    setup: float | None = None
    #: Why the burst is not what it should be (did not finish, a process died, ...).
    note: str | None = None
    #: The largest peak RSS of the publishing processes, in MiB.
    rss: float | None = None

    def ratio(self, raw: Result) -> float | None:
        mine = None if self.figures is None else self.figures.rate
        ceiling = None if raw.figures is None else raw.figures.rate
        return None if mine is None or not ceiling else mine / ceiling

    def problems(self, limit: float) -> list[str]:
        """What the table cannot say: an unfinished burst, duplicates, a note."""
        found = [self.note] if self.note else []
        figures = self.figures
        if figures is None:
            found.append(f"nothing arrived within {limit:g}s of the due instant")
        else:
            if not figures.complete:
                found.append(
                    f"{figures.received:,} of {figures.expected:,} sent within {limit:g}s"
                    " of the due instant"
                )
            if figures.unique < figures.received:
                found.append(f"{figures.received - figures.unique:,} duplicate task ids")
        return found


COLUMNS = (
    ("scheduler", 26),
    ("rate/s", 8),
    ("x raw", 6),
    ("from due/s", 11),
    ("first s", 8),
    ("p50 s", 8),
    ("p99 s", 8),
    ("max s", 8),
    ("first-last s", 13),
    ("CPU s", 7),
    ("RSS MiB", 8),
)


def table_row(cells: Sequence[str]) -> str:
    """Cells padded to their columns' widths: the first to the left, the others to the right."""
    return "".join(
        f"{cell:>{width}}" if i else f"{cell:<{width}}"
        for i, (cell, (_, width)) in enumerate(zip(cells, COLUMNS, strict=True))
    )


def print_table(size: int, results: Sequence[Result], limit: float) -> None:
    """The results of one size side by side, the raw loop first, then what went wrong."""
    raw = results[0]
    print(
        f"\nburst of {size:,}, seen at the broker; lateness = arrival - due instant;"
        " CPU = the publisher's (beat's finishing process included), from the due instant to its"
        " last message"
    )
    print(table_row([name for name, _ in COLUMNS]))
    for result in results:
        figures, ratio = result.figures, result.ratio(raw)
        cells = [
            result.label,
            *(
                ["-"] * 8
                if figures is None
                else [
                    rate(figures.rate),
                    "-" if ratio is None else f"{ratio:.2f}",
                    rate(figures.rate_from_due),
                    f"{figures.first:.3f}",
                    lateness(figures.p50, limit),
                    lateness(figures.p99, limit),
                    lateness(figures.max, limit),
                    f"{figures.span:.3f}",
                ]
            ),
            "-" if result.cpu is None else f"{result.cpu:.2f}",
            "-" if result.rss is None else f"{result.rss:.0f}",
        ]
        print(table_row(cells))
    setups = [f"{r.label} {r.setup:.1f}s" for r in results if r.setup is not None]
    if setups:
        print("  seeding and starting beat: " + ", ".join(setups))
    for result in results:
        for problem in result.problems(limit):
            print(f"  {result.label}: {problem}")
    sys.stdout.flush()


# -- services and processes -------------------------------------------------------------


def due_in(seconds: float) -> float:
    """The first whole second at least ``seconds`` from now, in epoch seconds."""
    return float(int(time.time() + seconds) + 1)


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def run_tag() -> str:
    return uuid.uuid4().hex[:10]


def start_beats(beats: Sequence[Process]) -> None:
    """Start the beats and wait until each has logged :data:`~bench.beat_app.READY`."""
    start_all(beats, lambda _: READY, START_TIMEOUT, every=0.1)


def measure(
    label: str,
    beats: Sequence[Process],
    options: Options,
    queue: str,
    size: int,
    due: float,
    setup: float,
) -> Result:
    """Probe ``queue`` while the running ``beats`` send the burst due at ``due``.

    ``setup`` is how long seeding and starting the beats took, for the report.
    """
    if time.time() > due - 2 * CPU_READ_LEAD:
        late = f"set-up ended {time.time() - due:+.1f}s after the due instant; raise --lead"
        return Result(label, size, None, None, setup, late)
    with Probe(options.broker_url, queue, size, due, options.limit, options.interval) as probe:
        time.sleep(max(0.0, due - CPU_READ_LEAD - time.time()))
        before = sum(tree_cpu_seconds(beat.pid) for beat in beats)
        while not probe.finished(timeout=0.5):
            if not any(beat.alive() for beat in beats):
                probe.stop()
        arrivals = probe.result()
        after = sum(tree_cpu_seconds(beat.pid) for beat in beats if beat.alive())
        peaks = [tree_status_kib(beat.pid, "VmHWM") / 1024 for beat in beats if beat.alive()]
    died = [beat.name for beat in beats if not beat.alive()]
    note = f"exited during the burst: {', '.join(died)}" if died else None
    cpu = None if died else after - before
    return Result(label, size, arrivals.figures(due), cpu, setup, note, max(peaks, default=None))


# -- the two bursts -----------------------------------------------------------------------


def raw_ceiling(size: int, options: Options) -> Result:
    """The plain ``send_task`` loop's burst."""
    queue = f"bridge-burst-raw-{run_tag()}"
    due = due_in(RAW_LEAD)
    try:
        with Probe(options.broker_url, queue, size, due, options.limit, options.interval) as probe:
            loop = send_raw(size, queue, due, options)
            arrivals = probe.result()
    finally:
        purge_queue(options.broker_url, queue)
    return Result("raw send_task loop", size, arrivals.figures(due), loop["cpu"])


def send_raw(size: int, queue: str, due: float, options: Options) -> dict[str, float]:
    """Run the raw loop in a process of its own; its wall and CPU seconds as it timed them."""
    env = process_env(None, options.broker_url, queue)
    said = run_checked(
        [sys.executable, "-m", "bench.beat_app", "--count", str(size), "--due", repr(due)],
        env,
        options.workdir,
    )
    return {key: float(value) for key, value in json.loads(said).items()}


def probe_overhead(size: int, options: Options, rounds: int = 3) -> None:
    """The raw loop's own rate with the probe emptying its queue, and without.

    Rounds alternate so that a change in the machine's load falls on both.
    """
    alone: list[float] = []
    probed: list[float] = []
    probe_cpu: list[float] = []
    for _ in range(rounds):
        queue = f"bridge-burst-raw-{run_tag()}"
        try:
            alone.append(size / send_raw(size, queue, due_in(RAW_LEAD), options)["seconds"])
        finally:
            purge_queue(options.broker_url, queue)
        queue = f"bridge-burst-raw-{run_tag()}"
        due = due_in(RAW_LEAD)
        try:
            with Probe(
                options.broker_url, queue, size, due, options.limit, options.interval
            ) as probe:
                probed.append(size / send_raw(size, queue, due, options)["seconds"])
                probe_cpu.append(probe.result().cpu)
        finally:
            purge_queue(options.broker_url, queue)
    print(
        f"raw loop of {size:,}, its own rate, median of {rounds}:"
        f" {statistics.median(alone):,.0f}/s alone,"
        f" {statistics.median(probed):,.0f}/s with the probe polling every"
        f" {options.interval * 1e3:g} ms (probe: {statistics.median(probe_cpu):.2f} CPU s)"
    )


def bridge_burst(
    size: int, beats: int, options: Options, profile: bool = False, history: int = 0
) -> Result:
    """``size`` bridge schedules due at one instant, fired by ``beats`` beat processes.

    With ``profile``, each beat runs under cProfile, and the functions it
    spent most time in are printed once it has stopped. With ``history``,
    that many final runs lie in ``task_execution`` before the burst
    (:func:`seed_history`), and the beats prune none of them.
    """
    label = f"bridge, {beats} beat{'s' if beats > 1 else ''}"
    if history:
        label += f", {history:,} runs"
    if options.db != "postgresql":
        label += f", {options.db}"
    tag = run_tag()
    queue = f"bridge-burst-{tag}"
    with server_database(admin_url(options.db, options), "bridge_burst_") as url:
        kept = {"history_keep_runs": "0", "history_keep_days": "0"} if history else {}
        env = process_env(url, options.broker_url, queue, **kept)
        run_checked([*CELERY, "bridge", "migrate"], env, options.workdir)
        if history:
            seed_history(url, history, env, options.workdir)
        profiles = [options.workdir / f"{tag}-beat-{i}.prof" for i in range(1, beats + 1)]
        processes = [
            Process(
                path.stem,
                [
                    sys.executable,
                    *(["-m", "cProfile", "-o", str(path)] if profile else []),
                    *CELERY[1:],
                    "beat",
                    "-S",
                    "bridge",
                    "-l",
                    options.loglevel,
                ],
                options.workdir,
                env,
            )
            for path in profiles
        ]
        try:
            setup_started = time.monotonic()
            due = due_in(options.lead_for(size))
            start_beats(processes)
            seed_file = options.workdir / f"{tag}.jsonl"
            write_schedules(seed_file, size, due)
            run_checked([*CELERY, "bridge", "import", str(seed_file)], env, options.workdir)
            setup = time.monotonic() - setup_started
            return measure(label, processes, options, queue, size, due, setup)
        finally:
            stop_all(processes)
            purge_queue(options.broker_url, queue)
            if profile:
                for path in profiles:
                    print_profile(path)


#: The schedules the runs of ``--history`` belong to; none is due during the burst.
HISTORY_SCHEDULES = 1000


def seed_history(url: str, runs: int, env: dict[str, str], workdir: Path) -> None:
    """``runs`` final runs of :data:`HISTORY_SCHEDULES` schedules, one an hour back from now,
    written into ``task_execution`` by PostgreSQL itself (``generate_series``): the history
    a busy database holds after months. Their schedules, imported first, fall due a day
    later, outside the burst."""
    started = time.monotonic()
    seed_file = workdir / f"history-{uuid.uuid4().hex[:6]}.jsonl"
    anchor = iso(time.time() + 86400)
    write_jsonl(
        seed_file,
        (
            {"name": f"history-{i:04d}", "task": TASK, "timer": "every 1h", "anchor": anchor}
            for i in range(HISTORY_SCHEDULES)
        ),
    )
    run_checked([*CELERY, "bridge", "import", str(seed_file)], env, workdir)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt,"
                    " trigger, status, queued_at, started_at, finished_at, updated_at, runtime)"
                    " SELECT gen_random_uuid()::text, p.id, p.task, at, 1, 'scheduled', 'SUCCESS',"
                    " at, at, at, at, 0.01"
                    " FROM periodic_task p,"
                    " LATERAL generate_series(1, :each) AS hours(h),"
                    " LATERAL (SELECT now() - make_interval(hours => h)) AS plan(at)"
                    " WHERE p.name LIKE 'history-%'"
                ),
                {"each": -(-runs // HISTORY_SCHEDULES)},
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM ANALYZE task_execution"))
    finally:
        engine.dispose()
    print(f"  seeded {runs:,} runs of history in {time.monotonic() - started:.0f} s", flush=True)


def print_profile(path: Path, top: int = 25) -> None:
    """Where a beat spent its time, from its cProfile dump: the functions with the most
    time of their own, then the bridge's functions with the most time in them."""
    if not path.exists():
        print(f"\nno profile in {path}: the beat did not exit cleanly")
        return
    print(f"\n{path}: cProfile of the whole beat process")
    stats = pstats.Stats(str(path), stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(r"/bridge/", top)


def write_schedules(path: Path, size: int, due: float) -> None:
    """``size`` schedules, one JSON object a line, whose first occurrence is ``due``."""
    anchor = iso(due)
    write_jsonl(
        path,
        (
            {
                "name": f"burst-{i:06d}",
                "task": TASK,
                "timer": "every 1h",
                "timezone": "UTC",
                "anchor": anchor,
            }
            for i in range(size)
        ),
    )


# -- the run ----------------------------------------------------------------------------


def run_sizes(options: Options, bursts: Callable[[int, Options], list[Result]]) -> None:
    """For each size: the raw ceiling, then ``bursts``, printed side by side."""
    check_broker(options.broker_url)
    for size in options.sizes:
        raw = raw_ceiling(size, options)
        print_table(size, [raw, *bursts(size, options)], options.limit)
    print(f"\nlogs: {options.workdir}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.burst",
        description="N bridge schedules due at one instant, against a raw send_task loop.",
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--db",
        choices=SERVERS,
        default="postgresql",
        help="the store of the bridge's schedules (postgresql)",
    )
    parser.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="where the bursts are published and measured: --redis-url, or --amqp-url (redis)",
    )
    parser.add_argument(
        "--amqp-url",
        default=os.environ.get("BRIDGE_BURST_AMQP_URL", DEFAULT_AMQP_URL),
        help="RabbitMQ broker of --broker rabbitmq; each burst declares a queue of its own"
        " and deletes it (BRIDGE_BURST_AMQP_URL)",
    )
    parser.add_argument("--beats", type=int, default=1, help="bridge beat processes (1)")
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="final runs already in task_execution before each bridge burst (0); the beats"
        " prune none of them",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run each beat under cProfile and print where it spent its time",
    )
    parser.add_argument(
        "--probe-overhead",
        action="store_true",
        help="instead of the bursts: the raw loop's own rate with and without the probe",
    )
    args = parser.parse_args(argv)
    if args.beats < 1:
        parser.error("--beats must be at least 1")
    if args.history and args.db != "postgresql":
        parser.error("--history seeds its runs with PostgreSQL's generate_series: --db postgresql")
    options = common_options(parser, args)
    if args.broker == "rabbitmq":
        options = replace(options, broker_url=args.amqp_url)

    def run() -> int:
        if args.probe_overhead:
            check_broker(options.broker_url)
            for size in options.sizes:
                probe_overhead(size, options)
        else:
            run_sizes(
                options,
                lambda size, opts: [
                    bridge_burst(size, args.beats, opts, args.profile, args.history)
                ],
            )
        return 0

    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
