"""Chaos run: several beats killed at random must neither double nor lose an occurrence.

Runs ``--beats`` (3) ``celery beat -S bridge`` and ``--workers`` (2) ``celery
worker`` processes on a fresh PostgreSQL database (MariaDB or MySQL with
``--db mariadb``) and a Redis broker, with
``--schedules`` (100) schedules ``every 1s`` (catch-up ``all``, overlap
``allow``, messages that never expire) over a window of ``--duration``
seconds. While the window is open, every 1 to 5 seconds a random beat is
killed with SIGKILL and restarted at once. Then the bench lets the beats
finish every schedule and the workers every run, stops everything with
SIGTERM, and compares the occurrences the window holds with ``task_execution``
and with ``chaos_hit``, the table the task's body writes one row into each
time it executes.

    .venv/bin/python -m bench.chaos --duration 60

Exit status: 0 when every occurrence ran exactly once, 1 on any duplicate,
loss or run outside the window (each listed), 2 when the run could not be set
up (a service unreachable, a process that would not start). See
``bench/README.md`` for what each printed figure means.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Select, create_engine, func, select, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from bench import SetupError
from bench.broker_probe import check_broker, purge_queue
from bench.harness import (
    READY_LINE,
    SERVERS,
    Process,
    add_service_options,
    admin_url,
    exit_status,
    first_line,
    machine_busy,
    now_iso,
    patiently,
    percentile,
    process_env,
    restarted,
    safe_url,
    server_database,
    server_started,
    start_all,
)
from bridge.config import Settings
from bridge.rules.kinds import NON_FINAL_STATUSES
from bridge.storage.models import PeriodicTask, TaskExecution

APP = "bench.chaos_app"
TASK = "bench.chaos_app.hit"
CELERY = [sys.executable, "-m", "celery", "-A", APP]
SCHEDULES = PeriodicTask.__table__
RUNS = TaskExecution.__table__
#: The counts the bench's progress and drain read.
RECORDED = select(func.count()).select_from(RUNS).scalar_subquery()
OPEN = (
    select(func.count())
    .select_from(RUNS)
    .where(RUNS.c.status.in_(sorted(NON_FINAL_STATUSES)))
    .scalar_subquery()
)
ENABLED = select(func.count()).select_from(SCHEDULES).where(SCHEDULES.c.enabled).scalar_subquery()
#: How often the bench looks whether the rows a killed beat held were taken over.
POLL_SECONDS = 0.05
#: How often a line of progress is printed.
PROGRESS_SECONDS = 60.0
#: How many problem occurrences are listed one by one.
SHOW = 20
#: Failover after a SIGKILL on a server, whatever the lease: the dead instance's lock goes.
FAILOVER_TARGET = 2.0
#: The longest the beats and workers may take to start.
START_TIMEOUT = 90.0


# -- options ------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    duration: int
    schedules: int
    beats: int
    workers: int
    lease: float
    pool: str
    concurrency: int
    db: str
    pg_url: str
    mysql_url: str
    redis_url: str
    drain_timeout: float
    lead: float
    seed: int | None
    keep: bool
    kill: bool
    aim: bool


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description="Kill beats at random while schedules fire; count duplicates and losses.",
    )
    parser.add_argument("--duration", type=int, default=60, help="seconds of chaos (60)")
    parser.add_argument("--schedules", type=int, default=100, help="schedules every 1s (100)")
    parser.add_argument("--beats", type=int, default=3, help="beat instances (3)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--lease",
        type=float,
        default=Settings().lease_seconds,
        help=f"BRIDGE_LEASE_SECONDS of the beats (the default, {Settings().lease_seconds:g})",
    )
    parser.add_argument(
        "--pool", default="threads", help="worker pool: threads, prefork, solo (threads)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="worker concurrency (8)")
    parser.add_argument(
        "--db", choices=SERVERS, default="postgresql", help="the store (postgresql)"
    )
    add_service_options(parser, "BRIDGE_CHAOS", "redis://127.0.0.1:6379/13", "the run")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="seconds allowed after the window for every schedule and run to finish"
        " (60 + 2 x duration)",
    )
    parser.add_argument(
        "--lead", type=float, default=3.0, help="seconds between adding schedules and start (3)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill sequence")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--no-kill",
        dest="kill",
        action="store_false",
        help="kill nothing: a baseline of what the machine keeps up with",
    )
    parser.add_argument(
        "--aim",
        action="store_true",
        help="kill in the first 100 ms after a whole second, while the beats fire the"
        " occurrence due then, so that most kills leave rows held (failover samples)",
    )
    args = parser.parse_args(argv)
    for name in ("duration", "schedules", "beats", "workers", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.drain_timeout is None:
        # Room for a backlog left by a machine that could not keep up.
        args.drain_timeout = 60.0 + 2 * args.duration
    if args.lease <= 0 or args.drain_timeout <= 0 or args.lead <= 0:
        parser.error("--lease, --drain-timeout and --lead must be greater than 0")
    return Options(
        duration=args.duration,
        schedules=args.schedules,
        beats=args.beats,
        workers=args.workers,
        lease=args.lease,
        pool=args.pool,
        concurrency=args.concurrency,
        db=args.db,
        pg_url=args.pg_url,
        mysql_url=args.mysql_url,
        redis_url=args.redis_url,
        drain_timeout=args.drain_timeout,
        lead=args.lead,
        seed=args.seed,
        keep=args.keep,
        kill=args.kill,
        aim=args.aim,
    )


# -- processes ------------------------------------------------------------------------


class Fleet:
    """The beats and workers of one run."""

    def __init__(self, options: Options, workdir: Path, env: dict[str, str]) -> None:
        self.beats = [
            Process(f"beat-{i}", [*CELERY, "beat", "-S", "bridge", "-l", "info"], workdir, env)
            for i in range(1, options.beats + 1)
        ]
        self.workers = [
            Process(
                f"worker-{i}",
                [
                    *CELERY,
                    "worker",
                    "-l",
                    "info",
                    "-n",
                    f"chaos-{i}@%h",
                    "--pool",
                    options.pool,
                    "-c",
                    str(options.concurrency),
                    "--without-mingle",
                    "--without-gossip",
                    "--without-heartbeat",
                ],
                workdir,
                env,
            )
            for i in range(1, options.workers + 1)
        ]

    @property
    def processes(self) -> list[Process]:
        return [*self.workers, *self.beats]

    def start(self) -> None:
        start_all(self.processes, ready_line, START_TIMEOUT)

    def stop(self) -> None:
        """Beats first (they clear their marks), then the workers (they finish their tasks)."""
        for process in self.beats:
            process.terminate()
        for process in [*self.beats, *self.workers]:
            process.stop()


def ready_line(process: Process) -> str:
    return READY_LINE if process.name.startswith("beat") else " ready."


# -- the schedules ----------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The occurrences every schedule must run: ``start + k s`` for ``k < duration``."""

    start: datetime
    duration: int
    schedule_ids: dict[int, str]

    @property
    def end(self) -> datetime:
        """The last occurrence; the schedules' ``end`` bound, which is inclusive."""
        return self.start + timedelta(seconds=self.duration - 1)

    def occurrences(self) -> set[tuple[int, datetime]]:
        return {
            (schedule_id, self.start + timedelta(seconds=k))
            for schedule_id in self.schedule_ids
            for k in range(self.duration)
        }


def add_schedules(url: str, options: Options) -> Window:
    """The schedules, all on the same grid of whole seconds from ``start`` to ``end``."""
    from bench.chaos_app import app
    from bridge import Bridge

    api = Bridge(app, database_url=url)
    start = datetime.fromtimestamp(math.ceil(time.time() + options.lead), UTC)
    end = start + timedelta(seconds=options.duration - 1)
    ids: dict[int, str] = {}
    try:
        for i in range(options.schedules):
            schedule = api.add(
                f"chaos-{i:03d}",
                task=TASK,
                timer="every 1s",
                anchor=start,
                catchup="all",
                overlap="allow",
                expires="never",
                start=start,
                end=end,
            )
            ids[schedule.id] = schedule.name
    except SQLAlchemyError as exc:
        raise SetupError(f"adding the schedules: {first_line(exc)}") from exc
    finally:
        api.database.dispose()
    if datetime.now(UTC) >= start:
        print(f"note: adding the schedules took past the start ({start.isoformat()})")
    return Window(start, options.duration, ids)


# -- chaos and failover -----------------------------------------------------------------


@dataclass
class Kill:
    """One SIGKILL of a beat, and the rows it held at that moment."""

    beat: str
    pid: int
    at: float  # time.monotonic()
    wall: datetime
    instances: set[str]
    rows: set[int]
    #: Seconds from the kill until the youngest of its marks expired (negative: already had).
    expires_in: float | None = None
    #: Seconds from the kill until no row is held by the dead instance any more.
    failover: float | None = None


@dataclass
class Chaos:
    """Kills a random beat every uniform(1, 5) s and measures how soon its rows are taken."""

    fleet: Fleet
    engine: Engine
    rng: random.Random
    journal: Path
    lease: float
    enabled: bool = True
    #: Kill just after a whole second, when the beats are firing (``--aim``).
    aim: bool = False
    kills: list[Kill] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    #: When the bench last found the database unreachable, and how long each outage lasted.
    outage: float | None = None
    outages: list[float] = field(default_factory=list)
    next_progress: float = field(default_factory=lambda: time.monotonic() + PROGRESS_SECONDS)

    def run_until(self, deadline: datetime) -> None:
        next_kill = self.next_kill()
        while datetime.now(UTC) < deadline:
            if self.enabled and time.time() >= next_kill:
                self.kill_one()
                next_kill = self.next_kill()
            self.watch()
            time.sleep(min(POLL_SECONDS, max(0.0, next_kill - time.time())))

    def next_kill(self) -> float:
        """When to kill next (``time.time()``): in 1 to 5 s, aimed at a fire if asked."""
        at = time.time() + self.rng.uniform(1.0, 5.0)
        if self.aim:
            at = math.ceil(at) + self.rng.uniform(0.0, 0.1)
        return at

    def kill_one(self) -> None:
        beat = self.rng.choice(self.fleet.beats)
        pid = beat.pid
        beat.kill()
        at, wall = time.monotonic(), datetime.now(UTC)
        held = self.query(
            select(SCHEDULES.c.id, SCHEDULES.c.worker, SCHEDULES.c.marked).where(
                SCHEDULES.c.worker.like(f"%:{pid}:%"), SCHEDULES.c.marked.is_not(None)
            )
        )
        beat.start()
        rows = held or []
        kill = Kill(
            beat.name,
            pid,
            at,
            wall,
            instances={w for _, w, _ in rows},
            rows={i for i, _, _ in rows},
            expires_in=(
                self.lease - (wall - max(marked for _, _, marked in rows)).total_seconds()
                if rows
                else None
            ),
        )
        self.kills.append(kill)
        found = "unknown (database unreachable)" if held is None else str(len(rows))
        expiry = "" if kill.expires_in is None else f", lease expires in {kill.expires_in:.2f}s"
        self.log(f"{wall.isoformat()} SIGKILL {beat.name} pid {pid}: {found} row(s) held{expiry}")

    def watch(self) -> None:
        """Resolve the kills whose rows are no longer held by the dead instance."""
        self.check_processes()
        if time.monotonic() >= self.next_progress:
            self.progress()
        open_kills = [k for k in self.kills if k.rows and k.failover is None]
        if not open_kills:
            return
        instances = sorted(set().union(*(k.instances for k in open_kills)))
        found = self.query(
            select(SCHEDULES.c.id, SCHEDULES.c.worker).where(SCHEDULES.c.worker.in_(instances))
        )
        if found is None:
            return
        held = {(int(row_id), str(worker)) for row_id, worker in found}
        now = time.monotonic()
        for kill in open_kills:
            if not any(row_id in kill.rows and w in kill.instances for row_id, w in held):
                kill.failover = now - kill.at
                self.log(
                    f"{datetime.now(UTC).isoformat()} rows of {kill.beat} pid {kill.pid}"
                    f" taken over after {kill.failover:.2f}s"
                )

    def check_processes(self) -> None:
        """A process that died without being killed is a finding; a beat is restarted."""
        for process in self.fleet.processes:
            status = process.poll()
            if status is not None:
                note = f"{process.name} pid {process.pid} exited {status}"
                self.unexpected.append(note)
                self.log(f"{datetime.now(UTC).isoformat()} unexpected exit: {note}")
                process.start()

    def progress(self) -> None:
        """One line a minute, so that a long run shows it is alive."""
        self.next_progress = time.monotonic() + PROGRESS_SECONDS
        counts = self.query(select(RECORDED, OPEN, ENABLED))
        if counts is not None:
            recorded, open_runs, enabled = counts[0]
            print(
                f"{now_iso()} kills {len(self.kills)}, runs recorded {recorded}"
                f" ({open_runs} open), schedules enabled {enabled}",
                flush=True,
            )

    def query(self, statement: Select[Any]) -> list[Any] | None:
        """The rows of ``statement``, or None while the database cannot be reached (noted)."""
        try:
            with self.engine.connect() as connection:
                found = list(connection.execute(statement))
        except DBAPIError as exc:
            if self.outage is None:
                self.outage = time.monotonic()
                self.log(f"{now_iso()} database unreachable: {first_line(exc)}")
            return None
        if self.outage is not None:
            self.outages.append(time.monotonic() - self.outage)
            self.log(f"{now_iso()} database back after {self.outages[-1]:.1f}s")
            self.outage = None
        return found

    def log(self, line: str) -> None:
        with self.journal.open("a") as journal:
            journal.write(line + "\n")


def drain(chaos: Chaos, timeout: float) -> bool:
    """Wait until every schedule finished and every run is final; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chaos.watch()
        counts = chaos.query(select(ENABLED, OPEN))
        if counts is not None and tuple(counts[0]) == (0, 0):
            return True
        time.sleep(0.2)
    return False


# -- the verdict ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    id: str
    schedule_id: int | None
    plan_time: datetime | None
    attempt: int
    trigger: str
    status: str
    queued_at: datetime | None
    started_at: datetime | None
    error: str | None


@dataclass
class Verdict:
    expected: int
    recorded: int
    executions: int
    duplicates: list[str]
    lost: list[str]
    unexpected: list[str]
    statuses: Counter[str]
    triggers: Counter[str]
    #: Per run: when beat sent it, and when a worker started it, after its plan time.
    sent_late: list[float]
    started_late: list[float]
    unfinished: list[str]
    skipped: int
    missed: int


def judge(engine: Engine, window: Window) -> Verdict:
    with engine.connect() as connection:
        runs = RUNS.c
        records = [
            Record(*row)
            for row in connection.execute(
                select(
                    runs.id,
                    runs.periodic_task_id,
                    runs.plan_time,
                    runs.attempt,
                    runs.trigger,
                    runs.status,
                    runs.queued_at,
                    runs.started_at,
                    runs.error,
                )
            )
        ]
        hits = {
            str(run_id): int(count)
            for run_id, count in connection.execute(
                text("SELECT run_id, count(*) FROM chaos_hit GROUP BY run_id")
            )
        }
        schedules = list(
            connection.execute(
                select(
                    SCHEDULES.c.name,
                    SCHEDULES.c.enabled,
                    SCHEDULES.c.note,
                    SCHEDULES.c.skipped_count,
                    SCHEDULES.c.missed_count,
                )
            )
        )
    names = window.schedule_ids
    by_occurrence: dict[tuple[int, datetime], list[Record]] = defaultdict(list)
    unexpected: list[str] = []
    for record in records:
        if record.schedule_id is None or record.plan_time is None:
            unexpected.append(f"run {record.id}: no schedule or plan time ({record.trigger})")
            continue
        by_occurrence[(record.schedule_id, record.plan_time)].append(record)
    expected = window.occurrences()
    for schedule_id, plan_time in sorted(set(by_occurrence) - expected):
        unexpected.append(
            f"{names.get(schedule_id, schedule_id)} plan {plan_time.isoformat()}: "
            "a record outside the window"
        )
    known = {record.id for record in records}
    unexpected += [f"chaos_hit for unknown run {run_id}" for run_id in sorted(set(hits) - known)]

    duplicates: list[str] = []
    lost: list[str] = []
    sent_late: list[float] = []
    started_late: list[float] = []
    for schedule_id, plan_time in sorted(expected):
        where = f"{names[schedule_id]} plan {plan_time.isoformat()}"
        found = by_occurrence.get((schedule_id, plan_time), [])
        described = ", ".join(
            f"{r.id} attempt {r.attempt} {r.trigger} {r.status} body x{hits.get(r.id, 0)}"
            for r in found
        )
        if len(found) > 1:
            duplicates.append(f"{where}: {len(found)} records: {described}")
        elif found and hits.get(found[0].id, 0) > 1:
            duplicates.append(f"{where}: body executed {hits[found[0].id]} times: {described}")
        if not found:
            lost.append(f"{where}: no record")
        elif not any(r.status == "SUCCESS" and hits.get(r.id, 0) > 0 for r in found):
            error = next((r.error for r in found if r.error), None)
            lost.append(f"{where}: {described}" + (f" ({error})" if error else ""))
        for record in found:
            if record.queued_at is not None:
                sent_late.append((record.queued_at - plan_time).total_seconds())
            if record.started_at is not None:
                started_late.append((record.started_at - plan_time).total_seconds())
    return Verdict(
        expected=len(expected),
        recorded=len(records),
        executions=sum(hits.values()),
        duplicates=duplicates,
        lost=lost,
        unexpected=unexpected,
        statuses=Counter(r.status for r in records),
        triggers=Counter(r.trigger for r in records),
        sent_late=sent_late,
        started_late=started_late,
        unfinished=[
            f"{name}: {'enabled' if enabled else note}"
            for name, enabled, note, _, _ in schedules
            if enabled or not (note or "").startswith("finished:")
        ],
        skipped=sum(row[3] for row in schedules),
        missed=sum(row[4] for row in schedules),
    )


def seconds(value: float) -> str:
    return f"{value:.2f}s"


# -- the run ---------------------------------------------------------------------------------


def run(options: Options) -> int:
    tag = uuid.uuid4().hex[:10]
    queue = f"bridge-chaos-{tag}"
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    check_broker(options.redis_url)
    workdir = Path(tempfile.mkdtemp(prefix=f"bridge-chaos-{tag}-"))
    with server_database(admin_url(options.db, options), "bridge_chaos_", options.keep) as url:
        from bench.chaos_app import HIT_TABLE_DDL
        from bridge.storage.database import database_for

        database = database_for(url)
        engine = create_engine(url, pool_size=2, max_overflow=2)
        try:
            database.migrate()
            with engine.begin() as connection:
                connection.execute(text(HIT_TABLE_DDL))
            started = server_started(url)
        except SQLAlchemyError as exc:
            raise SetupError(f"preparing {safe_url(url)}: {first_line(exc)}") from exc
        finally:
            database.dispose()
        # Every run is kept (history_keep_runs 0): the verdict counts them all.
        env = process_env(
            url, options.redis_url, queue, lease_seconds=f"{options.lease:g}", history_keep_runs="0"
        )
        print(
            f"chaos run: {options.schedules} schedules every 1s for {options.duration}s,"
            f" {options.beats} beats, {options.workers} workers"
            f" (--pool {options.pool} -c {options.concurrency}), lease {options.lease:g}s,"
            f" seed {seed}",
            flush=True,
        )
        print(f"database {safe_url(url)}, broker {options.redis_url} queue {queue}", flush=True)
        fleet = Fleet(options, workdir, env)
        chaos = Chaos(
            fleet,
            engine,
            random.Random(seed),
            workdir / "chaos.log",
            options.lease,
            options.kill,
            options.aim,
        )
        busy_before = machine_busy()
        wall_before = time.monotonic()
        drained = False
        try:
            fleet.start()
            window = add_schedules(url, options)
            print(
                f"window {window.start.isoformat()} .. {window.end.isoformat()}"
                f" ({options.duration} occurrences per schedule); logs in {workdir}",
                flush=True,
            )
            chaos.run_until(window.end + timedelta(seconds=1))
            drained = drain(chaos, options.drain_timeout)
        finally:
            fleet.stop()
            purge_queue(options.redis_url, queue)
        wall = time.monotonic() - wall_before
        busy = machine_busy() - busy_before
        verdict = patiently(lambda: judge(engine, window))
        started_now = patiently(lambda: server_started(url))
        engine.dispose()
    return report(
        Outcome(
            options=options,
            verdict=verdict,
            chaos=chaos,
            fleet=fleet,
            drained=drained,
            busy=busy,
            wall=wall,
            workdir=workdir,
            server_restarted=(
                datetime.fromtimestamp(started_now, UTC).isoformat()
                if restarted(started, started_now)
                else None
            ),
        )
    )


@dataclass(frozen=True)
class Outcome:
    options: Options
    verdict: Verdict
    chaos: Chaos
    fleet: Fleet
    drained: bool
    #: CPU seconds the whole machine was busy, and the wall time, from start to stop.
    busy: float
    wall: float
    workdir: Path
    #: When the database server was restarted (by something else) during the run, if it was.
    server_restarted: str | None


#: Log lines worth counting: what the bridge says when the chaos reaches it.
LOG_EVENTS = {
    "beat lost a mark": ("beat", "bridge: lost the mark on"),
    "beat fire errors": ("beat", "bridge: unexpected error firing"),
    "beat tick failures": ("beat", "bridge: tick failed"),
    "beat database outages": ("beat", "bridge: database unreachable"),
    "beat broker outages": ("beat", "bridge: broker unreachable"),
    "beat database conflicts": ("beat", "bridge: database conflict"),
    "duplicate deliveries dropped": ("worker", "bridge: duplicate delivery of run"),
    "worker record failures": ("worker", "bridge: could not record"),
    "worker start checks failed": ("worker", "bridge: could not check run"),
}


def log_events(fleet: Fleet) -> dict[str, int]:
    logs = {
        kind: "\n".join(
            p.log_path.read_text(errors="replace") for p in processes if p.log_path.exists()
        )
        for kind, processes in (("beat", fleet.beats), ("worker", fleet.workers))
    }
    counts = {label: logs[kind].count(needle) for label, (kind, needle) in LOG_EVENTS.items()}
    return {label: count for label, count in counts.items() if count}


def failed(verdict: Verdict) -> bool:
    return bool(verdict.duplicates or verdict.lost or verdict.unexpected)


def report(outcome: Outcome) -> int:
    """Print the figures, then the findings; the exit status."""
    verdict = outcome.verdict
    print_figures(outcome)
    print_findings(outcome)
    if failed(verdict):
        for process in outcome.fleet.processes:
            print(f"----- {process.name} (last lines) -----\n{process.log_tail(15)}")
    print(f"logs: {outcome.workdir}")
    return 1 if failed(verdict) else 0


def print_figures(outcome: Outcome) -> None:
    options, verdict, chaos, fleet = outcome.options, outcome.verdict, outcome.chaos, outcome.fleet
    orphaning = [k for k in chaos.kills if k.rows]
    failovers = [k.failover for k in orphaning if k.failover is not None]
    print(f"kills: {len(chaos.kills)} (SIGKILL of a random beat, restarted at once)")
    print(f"occurrences expected: {verdict.expected}")
    print(f"runs recorded: {verdict.recorded}")
    print(f"body executions: {verdict.executions}")
    print(f"duplicates: {len(verdict.duplicates)}")
    print(f"lost: {len(verdict.lost)}")
    print(f"unexpected runs: {len(verdict.unexpected)}")
    unresolved = len(orphaning) - len(failovers)
    never = f", {unresolved} never taken over" if unresolved else ""
    if failovers:
        print(
            f"failover p50: {seconds(percentile(failovers, 0.5))}"
            f" p99: {seconds(percentile(failovers, 0.99))}"
            f" max: {seconds(max(failovers))}"
            f" ({len(orphaning)} kills left rows held{never};"
            f" lease {options.lease:g}s; target {seconds(FAILOVER_TARGET)})"
        )
    else:
        print(f"failover: n/a ({len(orphaning)} kills left rows held{never})")
    for what, late in (("sent", verdict.sent_late), ("started", verdict.started_late)):
        if late:
            print(
                f"run lateness ({what} - plan time) p50: {seconds(percentile(late, 0.5))}"
                f" p99: {seconds(percentile(late, 0.99))} max: {seconds(max(late))}"
            )
    print("triggers: " + ", ".join(f"{k} {v}" for k, v in sorted(verdict.triggers.items())))
    others = {k: v for k, v in verdict.statuses.items() if k != "SUCCESS"}
    if others:
        print("non-SUCCESS runs: " + ", ".join(f"{k} {v}" for k, v in sorted(others.items())))
    print(f"skipped: {verdict.skipped}, missed: {verdict.missed}")
    events = log_events(fleet)
    print("log events: " + (", ".join(f"{k} {v}" for k, v in events.items()) or "none"))
    beats = sum(p.cpu for p in fleet.beats)
    workers = sum(p.cpu for p in fleet.workers)
    print(
        f"cpu: beats {beats:.1f}s, workers {workers:.1f}s in {outcome.wall:.1f}s;"
        f" machine busy {outcome.busy / outcome.wall:.2f} of {os.cpu_count() or 1} cores"
        " (every process on it)"
    )


def print_findings(outcome: Outcome) -> None:
    """What went wrong around the figures, and the problem occurrences one by one."""
    chaos, verdict = outcome.chaos, outcome.verdict
    if chaos.unexpected:
        print("unexpected process exits: " + "; ".join(chaos.unexpected))
    if chaos.outages:
        print(
            f"database unreachable from the bench {len(chaos.outages)} time(s),"
            f" longest {seconds(max(chaos.outages))}"
        )
    if outcome.server_restarted:
        print(f"the database server was restarted during the run (at {outcome.server_restarted})")
    if not outcome.drained:
        print(f"not drained: schedules or runs still open after {outcome.options.drain_timeout:g}s")
    for title, items in (
        ("duplicate", verdict.duplicates),
        ("lost", verdict.lost),
        ("unexpected", verdict.unexpected),
        ("unfinished schedule", verdict.unfinished),
    ):
        for item in items[:SHOW]:
            print(f"  {title}: {item}")
        if len(items) > SHOW:
            print(f"  ... and {len(items) - SHOW} more {title} lines")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
