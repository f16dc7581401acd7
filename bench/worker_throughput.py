"""Worker throughput of a no-op task with and without the bridge's recorder.

Pre-loads ``--runs`` no-op task messages into a Redis queue of the run's own,
starts one real ``celery worker`` on it and measures how fast it drains them.
Three variants run in the same invocation, each on fresh messages:

* ``plain``: the app without the recorder: the ceiling of the machine;
* ``recorder``: ``bridge.recorder.install(app)`` and a plain task;
* ``bridge-task``: the recorder and ``base=bridge.BridgeTask`` (compare-and-set start).

The messages are what beat sends (``bridge.celery.broker.Publisher``: run id as task
id, the bridge's headers), spread over ``--schedules`` schedules. For the
recorded variants their records are real bridge runs, inserted ``SENT`` in
bulk beforehand, with each schedule's ``last_run_id`` naming its latest run,
so that the worker does exactly what it does for runs beat sent, and only the
worker is measured. No beat runs.

    .venv/bin/python -m bench.worker_throughput --runs 5000 --pool prefork --concurrency 2

For each variant it prints the rate (runs a second, measured once the first
tenth of the messages is done, so that the worker's start is left out), its
ratio to ``plain``, the worker's CPU seconds per 1,000 runs (main process and
pool children, read from ``/proc``), the CPU the database server's backends
serving the worker used per 1,000 runs, and what the recorder asked of the
database per run: statement executions and the statements the server ran
(each row of an ``executemany`` counted), commits, pool checkouts and new
connections, counted in the worker by SQLAlchemy's events
(``bench/worker_app.py``), and transactions as PostgreSQL counted them
(``xact_commit + xact_rollback`` of the run's database in
``pg_stat_database``, read before the worker starts and after it has exited).
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from celery import Celery
from sqlalchemy import Engine, bindparam, create_engine, func, insert, select, text, update
from sqlalchemy.engine import make_url

from bench import SetupError
from bench.broker_probe import check_broker, new_queue, purge_queue
from bench.harness import (
    Process,
    add_service_options,
    backends,
    cpu_of,
    exit_status,
    machine_busy,
    process_env,
    process_tree,
    safe_url,
    server_database,
    spent,
    workdir,
)
from bridge import Bridge
from bridge.celery.broker import Publisher
from bridge.rules.kinds import RunStatus, Trigger
from bridge.rules.runs import Envelope, Payload, new_run, run_id_for
from bridge.storage.models import PeriodicTask, TaskExecution

APP = "bench.worker_app"
#: How often the bench looks at the work left in the broker.
POLL_SECONDS = 0.02
#: The share of the messages processed before the clock starts.
WARMUP = 0.1
#: Where the plan times of the runs start; each run gets its own second.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Variant:
    name: str
    task: str
    recorder: bool


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("plain", f"{APP}.noop", recorder=False),
        Variant("recorder", f"{APP}.noop", recorder=True),
        Variant("bridge-task", f"{APP}.noop_once", recorder=True),
    )
}


@dataclass(frozen=True)
class Options:
    runs: int
    pool: str
    concurrency: int
    schedules: int
    rounds: int
    variants: list[Variant]
    pg_url: str
    redis_url: str
    timeout: float


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.worker_throughput",
        description="No-op task throughput of one worker, with and without the recorder.",
    )
    parser.add_argument("--runs", type=int, default=5000, help="messages per variant (5000)")
    parser.add_argument("--pool", default="prefork", help="worker pool: prefork, threads (prefork)")
    parser.add_argument("--concurrency", type=int, default=2, help="worker concurrency (2)")
    parser.add_argument("--schedules", type=int, default=100, help="schedules the runs share (100)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="times each variant runs, interleaved (1)"
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, among {', '.join(VARIANTS)} (all)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds allowed per variant (600)"
    )
    add_service_options(parser, redis_url="redis://127.0.0.1:6379/14", each="the run")
    args = parser.parse_args(argv)
    for name in ("runs", "concurrency", "schedules", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    return Options(
        runs=args.runs,
        pool=args.pool,
        concurrency=args.concurrency,
        schedules=args.schedules,
        rounds=args.rounds,
        variants=[VARIANTS[name] for name in args.variants.split(",")],
        pg_url=args.pg_url,
        redis_url=args.redis_url,
        timeout=args.timeout,
    )


# -- the runs -----------------------------------------------------------------------------


class Runs:
    """The run records and messages of one variant."""

    def __init__(self, engine: Engine, schedules: dict[int, str], count: int, first: int) -> None:
        self.engine = engine
        self.schedules = schedules
        ids = sorted(schedules)
        self.plan_times = [EPOCH + timedelta(seconds=first + i) for i in range(count)]
        self.schedule_of = [ids[i % len(ids)] for i in range(count)]
        self.ids = [
            run_id_for(schedule, plan)
            for schedule, plan in zip(self.schedule_of, self.plan_times, strict=True)
        ]

    def record(self, task: str) -> None:
        """Insert the runs ``SENT``, as beat leaves them, and name each schedule's latest."""
        now = datetime.now(UTC)
        rows = [
            new_run(schedule, task, plan, Trigger.SCHEDULED, now)
            | {"status": RunStatus.SENT.value, "queued_at": now}
            for schedule, plan in zip(self.schedule_of, self.plan_times, strict=True)
        ]
        latest = dict(zip(self.schedule_of, self.ids, strict=True))
        with self.engine.begin() as connection:
            connection.execute(insert(TaskExecution), rows)
            connection.execute(
                update(PeriodicTask)
                .where(PeriodicTask.id == bindparam("schedule"))
                .values(
                    last_run_id=bindparam("run"),
                    last_status=RunStatus.SENT.value,
                    last_run_at=now,
                ),
                [{"schedule": s, "run": r} for s, r in latest.items()],
            )

    def publish(self, app: Celery, task: str, queue: str) -> None:
        """Send the messages beat would send for these runs."""
        payload = Payload(task, [], {}, {"queue": queue})
        publisher = Publisher(app)
        with app.producer_or_acquire() as producer:
            for run_id, schedule, plan in zip(
                self.ids, self.schedule_of, self.plan_times, strict=True
            ):
                envelope = Envelope(
                    run_id, schedule, self.schedules[schedule], plan, Trigger.SCHEDULED
                )
                publisher.publish(payload, envelope, plan, producer)

    def outcome(self) -> tuple[Counter[str], int]:
        """The runs by status, and how many schedules show their latest run's success."""
        window = TaskExecution.plan_time.between(self.plan_times[0], self.plan_times[-1])
        with self.engine.connect() as connection:
            statuses: Counter[str] = Counter()
            for status, count in connection.execute(
                select(TaskExecution.status, func.count())
                .where(window)
                .group_by(TaskExecution.status)
            ):
                statuses[status] = count
            shown = connection.scalar(
                select(func.count())
                .select_from(PeriodicTask)
                .where(
                    PeriodicTask.last_run_id.in_(set(self.ids)),
                    PeriodicTask.last_status == RunStatus.SUCCESS.value,
                )
            )
        return statuses, int(shown or 0)


# -- what the server and the processes spent ------------------------------------------------


def transactions(admin: Engine, database: str) -> int:
    """Transactions PostgreSQL has counted in ``database`` (committed and rolled back)."""
    with admin.connect() as connection:
        connection.execute(text("SELECT pg_stat_clear_snapshot()"))
        count = connection.scalar(
            text("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :d"),
            {"d": database},
        )
    return int(count or 0)


# -- one measurement ------------------------------------------------------------------------


@dataclass(frozen=True)
class Measure:
    variant: str
    #: All the runs drained, and those drained while the clock ran.
    total: int
    runs: int
    seconds: float
    worker_cpu: float
    #: The part of ``worker_cpu`` the worker's main process used (the consumer).
    main_cpu: float
    database_cpu: float
    machine_cpu: float
    executions: int
    statements: int
    commits: int
    checkouts: int
    connections: int
    transactions: int
    statuses: Counter[str]
    schedules_shown: int

    @property
    def rate(self) -> float:
        return self.runs / self.seconds

    def per_run(self, count: int) -> float:
        """``count``, made over the whole drain, per run."""
        return count / self.total


class Bench:
    def __init__(self, options: Options, admin: Engine, url: str, folder: Path) -> None:
        self.options = options
        self.admin = admin
        self.url = url
        self.database = make_url(url).database or ""
        self.engine = create_engine(url, pool_size=1, max_overflow=1)
        self.queue = new_queue("rec")
        self.broker = redis.Redis.from_url(options.redis_url)
        self.publisher = Celery("bench-publisher", broker=options.redis_url)
        self.folder = folder
        self.serial = 0
        self.schedules = self._add_schedules()

    def _add_schedules(self) -> dict[int, str]:
        """The schedules the runs belong to: yearly, so that nothing else comes due."""
        api = Bridge(database_url=self.url)
        api.migrate()
        names = [f"bench-{i:04d}" for i in range(self.options.schedules)]
        return {api.add(name, task=f"{APP}.noop", timer="@yearly").id: name for name in names}

    def left(self) -> int:
        """Messages not yet processed: queued, or delivered and not yet acknowledged."""
        queued = self.broker.llen(self.queue)
        unacked = self.broker.hlen(f"{self.queue}.unacked")
        return int(queued) + int(unacked)

    def measure(self, variant: Variant) -> Measure:
        runs = Runs(self.engine, self.schedules, self.options.runs, self.serial)
        self.serial += self.options.runs
        if variant.recorder:
            runs.record(variant.task)
        runs.publish(self.publisher, variant.task, self.queue)
        counts = Path(tempfile.mkdtemp(prefix="counts-", dir=self.folder))
        env = process_env(self.url, self.options.redis_url, self.queue)
        env |= {"BENCH_RECORDER": "1" if variant.recorder else "0", "BENCH_COUNT_DIR": str(counts)}
        worker = Process(f"worker-{variant.name}", self.command(variant), self.folder, env)
        before_tx = transactions(self.admin, self.database)
        worker.start()
        try:
            start = self.options.runs - int(self.options.runs * WARMUP)
            deadline = time.monotonic() + self.options.timeout
            self.wait_until(start, worker, deadline)
            began = time.monotonic()
            tree = process_tree(worker.pid)
            worker_before = cpu_of(tree)
            db_before = cpu_of(backends(self.admin, self.database))
            machine_before = machine_busy()
            self.wait_until(0, worker, deadline)
            elapsed = time.monotonic() - began
            worker_after = cpu_of(tree)
            database_cpu = spent(db_before, cpu_of(backends(self.admin, self.database)))
            machine_cpu = machine_busy() - machine_before
        finally:
            worker.stop()
        totals: Counter[str] = Counter()
        for path in counts.glob("counts-*.json"):
            totals.update(json.loads(path.read_text()))
        statuses, shown = runs.outcome() if variant.recorder else (Counter[str](), 0)
        return Measure(
            variant=variant.name,
            total=self.options.runs,
            runs=start,
            seconds=elapsed,
            worker_cpu=spent(worker_before, worker_after),
            main_cpu=worker_after[worker.pid] - worker_before[worker.pid],
            database_cpu=database_cpu,
            machine_cpu=machine_cpu,
            executions=totals["executions"],
            statements=totals["statements"],
            commits=totals["commits"],
            checkouts=totals["checkouts"],
            connections=totals["connections"],
            transactions=transactions(self.admin, self.database) - before_tx,
            statuses=statuses,
            schedules_shown=shown,
        )

    def command(self, variant: Variant) -> list[str]:
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            APP,
            "worker",
            "-l",
            "warning",
            "-n",
            f"bench-{variant.name}@%h",
            "--pool",
            self.options.pool,
            "-c",
            str(self.options.concurrency),
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ]

    def wait_until(self, left: int, worker: Process, deadline: float) -> None:
        """Until at most ``left`` messages are left; SetupError if the worker gives up."""
        while self.left() > left:
            if not worker.alive():
                raise SetupError(f"the worker exited; its log:\n{worker.log_tail()}")
            if time.monotonic() > deadline:
                raise SetupError(f"not drained within {self.options.timeout:g}s")
            time.sleep(POLL_SECONDS)

    def close(self) -> None:
        purge_queue(self.options.redis_url, self.queue)
        self.broker.close()
        self.engine.dispose()


# -- output ------------------------------------------------------------------------------------


def describe(measure: Measure, plain: float | None, options: Options) -> str:
    thousand = 1000 / measure.runs
    line = (
        f"{measure.variant:<12} {measure.rate:8.0f} runs/s"
        f"  ratio {measure.rate / plain if plain else float('nan'):4.2f}"
        f"  worker cpu {measure.worker_cpu * thousand:5.2f}s/1000"
        f" (main {measure.main_cpu * thousand:4.2f})"
        f"  db cpu {measure.database_cpu * thousand:5.2f}s/1000"
        f"  machine {measure.machine_cpu / measure.seconds:4.2f} cores"
    )
    if VARIANTS[measure.variant].recorder:
        line += (
            f"\n{'':<12} per run: executions {measure.per_run(measure.executions):.2f},"
            f" statements {measure.per_run(measure.statements):.2f},"
            f" commits {measure.per_run(measure.commits):.2f},"
            f" checkouts {measure.per_run(measure.checkouts):.2f},"
            f" transactions (server) {measure.per_run(measure.transactions):.2f};"
            f" connections opened {measure.connections}"
        )
        done = measure.statuses.get(RunStatus.SUCCESS.value, 0)
        line += f"\n{'':<12} records SUCCESS {done}/{options.runs}"
        if done != options.runs:
            line += f" (by status: {dict(measure.statuses)})"
        line += f", schedules showing it {measure.schedules_shown}/{options.schedules}"
    return line


def run(options: Options) -> int:
    check_broker(options.redis_url)
    admin = create_engine(options.pg_url, isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with workdir("rec") as folder, server_database(options.pg_url, "bridge_rec_") as url:
            bench = Bench(options, admin, url, folder)
            try:
                print(
                    f"worker throughput: {options.runs} no-op runs per variant,"
                    f" celery worker --pool {options.pool} -c {options.concurrency},"
                    f" {options.schedules} schedules, {options.rounds} round(s);"
                    f" rates over the last {1 - WARMUP:.0%} of each drain"
                )
                print(f"database {safe_url(url)}, broker {options.redis_url} queue {bench.queue}")
                results: dict[str, list[Measure]] = {v.name: [] for v in options.variants}
                for round_ in range(1, options.rounds + 1):
                    for variant in options.variants:
                        measure = bench.measure(variant)
                        results[variant.name].append(measure)
                        plain = results.get("plain")
                        print(
                            f"round {round_}: "
                            + describe(measure, plain[-1].rate if plain else None, options)
                        )
                if options.rounds > 1:
                    print("median over the rounds:")
                    medians = {
                        name: statistics.median(m.rate for m in measures)
                        for name, measures in results.items()
                    }
                    for name, rate in medians.items():
                        ratio = rate / medians["plain"] if "plain" in medians else float("nan")
                        print(f"{name:<12} {rate:8.0f} runs/s  ratio {ratio:4.2f}")
            finally:
                bench.close()
    finally:
        admin.dispose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
