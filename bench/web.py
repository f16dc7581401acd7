"""The HTTP API under load: pages of schedules and of runs, and scrapes of ``/metrics``, on a
database of 1,000,000 schedules and 10,000,000 run records, from 20 clients at once.

1. Creates and migrates a PostgreSQL database of its own, and seeds it inside
   PostgreSQL (``INSERT ... SELECT FROM generate_series``): the schedules
   with their labels and counters, and their runs over the last 30 days.
   The keys and indexes of ``task_execution`` are dropped while its rows go
   in and built again afterwards, exactly as the migrations declared them;
   then ``VACUUM ANALYZE`` and ``CHECKPOINT``.
2. Starts ``celery -A bench.beat_app bridge serve`` with an admin and a read
   token, and waits for ``/healthz``.
3. For each kind of request, after a short warm-up, one client alone (the
   baseline), then ``--clients`` (20) at once, each sending its next request
   as soon as the last one was answered, for a fixed time:

   * ``schedules``: ``GET /api/v1/schedules?limit=100``, walks of up to
     ``--pages`` pages from a random name prefix, following ``next``;
   * ``runs``: ``GET /api/v1/runs?limit=100`` from a random ``until`` in the
     last 30 days, following ``next``;
   * ``schedule-runs``: ``GET /api/v1/schedules/{name}/runs?limit=100`` of a
     random schedule (half of them one of the schedules with hundreds of
     runs), following ``next``;
   * ``metrics``: ``GET /metrics`` with the default cap.

It prints p50, p99 and max latency and requests a second of each, the CPU
the server and the database spent per request, and the targets: with 20
clients a page's p99 at most 100 ms and a scrape's at most 200 ms; a page
at most 5 ms of the server's CPU.

    .venv/bin/python -m bench.web
    .venv/bin/python -m bench.web --schedules 10000 --runs 100000 --duration 10

Exit status: 0 when every request was answered 200, 1 otherwise, 2 when the
run could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

from bench import SetupError
from bench.harness import (
    APP,
    DEFAULT_PG_URL,
    DEFAULT_REDIS_URL,
    Process,
    cpu_of,
    database,
    exit_status,
    machine_busy,
    machine_load,
    percentile,
    process_env,
    process_tree,
    safe_url,
    spent,
    table,
    workdir,
)
from bridge.rules.timers import format_duration

ADMIN_TOKEN = "bench-admin-" + uuid.uuid4().hex
READ_TOKEN = "bench-read-" + uuid.uuid4().hex
#: The targets under 20 clients: the p99 of a page and of a scrape, in seconds.
TARGET_PAGE_P99 = 0.100
TARGET_SCRAPE = 0.200
#: The server's CPU a page may cost, in seconds.
TARGET_PAGE_CPU = 0.005
PAGE = 100

# -- the seed ----------------------------------------------------------------------------

HISTORY = timedelta(days=30)
#: Every 100th schedule is a busy one: together they have half of the runs.
BUSY_EVERY = 100
TASKS = (
    "app.billing.invoice",
    "app.billing.reminders",
    "app.reports.daily",
    "app.sync.crm",
    "app.sync.inventory",
    "app.mail.digest",
    "app.cleanup.sessions",
    "app.exports.warehouse",
)
TEAMS = ("billing", "reports", "sync", "mail", "ops", "data")
TIERS = ("gold", "silver", "bronze")
FAILURE_PER_MILLE = 30
ERROR = "ConnectionError: upstream answered 503 after 30s"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/tasks.py", line 42, in run\n'
    "    response = client.fetch(batch)\n"
    '  File "/srv/app/client.py", line 118, in fetch\n'
    "    raise ConnectionError(reply.reason)\n" + ERROR
)


@dataclass(frozen=True)
class Shape:
    """How the seed spreads ``runs`` records over ``schedules`` schedules.

    Schedule ``s`` (0-based; its id is ``s + 1``) is called ``job-<s>``,
    zero-padded. Every 100th one (``s % 100 == 0``) is busy: the busy ones
    share half of the runs (500 each at the full size, a timer of about an
    hour and a half), the others the other half (5 or 6 each, every 5 days).
    Each schedule's runs are one timer interval apart, back from ``newest``,
    shifted by a whole number of minutes of its own.
    """

    schedules: int
    runs: int
    #: The plan time of the newest run (a whole minute, a minute ago at seeding).
    newest: datetime

    @property
    def busy(self) -> int:
        return -(-self.schedules // BUSY_EVERY)

    @property
    def others(self) -> int:
        return self.schedules - self.busy

    @property
    def busy_runs(self) -> int:
        return self.runs // 2

    @property
    def other_runs(self) -> int:
        return self.runs - self.busy_runs

    @staticmethod
    def _step(runs: int, schedules: int) -> int:
        """Seconds between the runs of one schedule: its share spread over the history."""
        each = -(-runs // schedules)
        return max(60, int(HISTORY.total_seconds()) // each // 60 * 60)

    @property
    def busy_step(self) -> int:
        return self._step(self.busy_runs, self.busy)

    @property
    def other_step(self) -> int:
        return self._step(self.other_runs, self.others)

    @property
    def width(self) -> int:
        return len(str(self.schedules - 1))

    def name(self, s: int) -> str:
        return f"job-{s:0{self.width}d}"

    def prefix(self, s: int) -> str:
        """A prefix of schedule ``s``'s name that about 1,000 names share."""
        return self.name(s)[: max(4, 4 + self.width - 3)]

    def busy_schedule(self, index: int) -> int:
        return index * BUSY_EVERY

    def other_schedule(self, index: int) -> int:
        """The ``index``-th schedule that is not busy."""
        return (index // (BUSY_EVERY - 1)) * BUSY_EVERY + index % (BUSY_EVERY - 1) + 1

    def parameters(self) -> dict[str, Any]:
        return {
            "n": self.schedules,
            "busy": self.busy,
            "others": self.others,
            "busy_runs": self.busy_runs,
            "other_runs": self.other_runs,
            "busy_step": self.busy_step,
            "other_step": self.other_step,
            "newest": self.newest,
            "width": self.width,
            "tasks": list(TASKS),
            "teams": list(TEAMS),
            "tiers": list(TIERS),
            "busy_timer": f"every {format_duration(timedelta(seconds=self.busy_step))}",
            "other_timer": f"every {format_duration(timedelta(seconds=self.other_step))}",
            "failures": FAILURE_PER_MILLE,
            "error": ERROR,
            "traceback": TRACEBACK,
        }


#: Each run: schedule ``s``, its ``k``-th run back from the newest, ``busy`` or not.
#: Busy schedules are ``0, 100, 200, ...``; the others are numbered ``j`` apart from them.
RUN_SOURCES = """
    SELECT (g % :busy) * 100 AS s, g / :busy AS k, true AS busy,
           (((g % :busy)::bigint * 7919) % (:busy_step / 60)) * 60 AS phase, :busy_step AS step
    FROM generate_series(0, :busy_runs - 1) AS g
    UNION ALL
    SELECT (j / 99) * 100 + j % 99 + 1 AS s, k, false AS busy,
           ((((j / 99) * 100 + j % 99 + 1)::bigint * 7919) % (:other_step / 60)) * 60 AS phase,
           :other_step AS step
    FROM (SELECT g % :others AS j, g / :others AS k
          FROM generate_series(0, :other_runs - 1) AS g) AS other
"""

#: Mostly SUCCESS, 3 % FAILURE, and the newest run of one busy schedule in ten still
#: STARTED; each started a few milliseconds late and ran 0.05 s to 2 s (busy) or 30 s.
INSERT_RUNS = f"""
INSERT INTO task_execution (
    id, periodic_task_id, task, plan_time, attempt, trigger, status,
    queued_at, started_at, finished_at, updated_at, runtime, worker, result, error, traceback
)
SELECT
    md5('run:' || s || ':' || k)::uuid::text,
    s + 1,
    (CAST(:tasks AS text[]))[s % {len(TASKS)} + 1],
    plan,
    1,
    'scheduled',
    status,
    plan + interval '3 milliseconds',
    started,
    CASE WHEN status <> 'STARTED' THEN started + runtime * interval '1 second' END,
    CASE WHEN status <> 'STARTED' THEN started + runtime * interval '1 second' ELSE started END,
    CASE WHEN status <> 'STARTED' THEN runtime END,
    'celery@worker-' || (s % 8),
    CASE WHEN status = 'SUCCESS' THEN '{{''rows'': ' || (x * 37 % 5000) || '}}' END,
    CASE WHEN status = 'FAILURE' THEN CAST(:error AS text) END,
    CASE WHEN status = 'FAILURE' THEN CAST(:traceback AS text) END
FROM (
    SELECT s, k, plan, x,
        CASE
            WHEN busy AND k = 0 AND (s / 100) % 10 = 0 THEN 'STARTED'
            WHEN x < :failures THEN 'FAILURE'
            ELSE 'SUCCESS'
        END AS status,
        plan + make_interval(secs => 0.01 + ((s + k) % 300) / 1000.0) AS started,
        0.05 + (x * 7 % 1000) / 1000.0 * CASE WHEN busy THEN 2 ELSE 30 END AS runtime
    FROM (
        SELECT s, k, busy,
            CAST(:newest AS timestamptz) - make_interval(secs => k * step + phase) AS plan,
            (s::bigint * 2654435761 + k::bigint * 40503) % 1000 AS x
        FROM ({RUN_SOURCES}) AS source
    ) AS timed
) AS run
"""

#: The schedules, their counters summed from their runs; the latest run of each is the
#: greatest of "plan time, id, status" written as sortable text. One in 50 is paused,
#: one in 1,000 broken; every next run is within the next day.
INSERT_SCHEDULES = f"""
INSERT INTO periodic_task (
    id, name, task, args, kwargs, options, timer, timezone, anchor, enabled, nextrun,
    next_occurrence, overlap, catchup, jitter, max_attempts, expires, failure_streak, source,
    note, broken, created_at, updated_at, last_run_at, last_run_id, last_status,
    total_run_count, skipped_count, missed_count, expired_count, success_count,
    failure_count, revoked_count, lost_count, runtime_total, last_success_at, last_failure_at
)
SELECT
    s + 1,
    'job-' || lpad(s::text, :width, '0'),
    (CAST(:tasks AS text[]))[s % {len(TASKS)} + 1],
    '[]',
    '{{}}',
    '{{}}',
    CASE WHEN s % 100 = 0 THEN :busy_timer ELSE :other_timer END,
    'UTC',
    CAST(:newest AS timestamptz) - interval '60 days',
    s % 50 <> 7 AND s % 1000 <> 13,
    nextrun,
    nextrun,
    'skip',
    'latest',
    0,
    1,
    'next',
    CASE WHEN s % 1000 = 13 THEN 5 WHEN split_part(c.latest, ' ', 3) = 'FAILURE' THEN 1 ELSE 0 END,
    'api',
    CASE WHEN s % 50 = 7 THEN 'paused: waiting for the vendor' END,
    s % 1000 = 13,
    CAST(:newest AS timestamptz) - interval '60 days',
    CAST(:newest AS timestamptz) - interval '31 days',
    c.last_run_at,
    split_part(c.latest, ' ', 2),
    split_part(c.latest, ' ', 3),
    coalesce(c.total, 0),
    CASE WHEN s % 7 = 0 THEN s % 4 ELSE 0 END,
    0,
    0,
    coalesce(c.success, 0),
    coalesce(c.failure, 0),
    0,
    0,
    coalesce(c.runtime, 0),
    c.last_success,
    c.last_failure
FROM (
    SELECT s, CAST(:newest AS timestamptz) + interval '1 minute'
        + (s * 0.6180339887498949 - floor(s * 0.6180339887498949)) * interval '1 day' AS nextrun
    FROM generate_series(0, :n - 1) AS s
) AS schedule
LEFT JOIN (
    SELECT periodic_task_id AS id,
        count(*) AS total,
        count(*) FILTER (WHERE status = 'SUCCESS') AS success,
        count(*) FILTER (WHERE status = 'FAILURE') AS failure,
        sum(runtime) AS runtime,
        max(queued_at) AS last_run_at,
        max(finished_at) FILTER (WHERE status = 'SUCCESS') AS last_success,
        max(finished_at) FILTER (WHERE status = 'FAILURE') AS last_failure,
        max(to_char(plan_time, 'YYYYMMDDHH24MISS') || ' ' || id || ' ' || status) AS latest
    FROM task_execution
    GROUP BY periodic_task_id
) AS c ON c.id = s + 1
"""

#: Every schedule has a team and a tier; the busy ones are also ``frequent``.
INSERT_LABELS = f"""
INSERT INTO schedule_label (periodic_task_id, label)
SELECT s + 1, 'team:' || (CAST(:teams AS text[]))[s % {len(TEAMS)} + 1]
FROM generate_series(0, :n - 1) AS s
UNION ALL
SELECT s + 1, 'tier:' || (CAST(:tiers AS text[]))[s % {len(TIERS)} + 1]
FROM generate_series(0, :n - 1) AS s
UNION ALL
SELECT s + 1, 'frequent' FROM generate_series(0, :n - 1, 100) AS s
"""


@dataclass(frozen=True)
class Seeding:
    """How long each step of the seed took, in seconds, and what it made."""

    steps: dict[str, float]
    labels: int
    size_bytes: int

    @property
    def total(self) -> float:
        return sum(self.steps.values())


def seed(url: str, shape: Shape) -> Seeding:
    """Fill the migrated database at ``url`` as ``shape`` says; see the module's docstring."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    steps: dict[str, float] = {}

    @contextlib.contextmanager
    def step(name: str) -> Iterator[None]:
        began = time.monotonic()
        yield
        steps[name] = time.monotonic() - began
        print(f"  {name}: {steps[name]:.1f}s", flush=True)

    values = shape.parameters()
    try:
        with engine.connect() as connection:
            for setting in (
                "SET TIME ZONE 'UTC'",
                "SET work_mem = '512MB'",
                "SET maintenance_work_mem = '1GB'",
                "SET synchronous_commit = off",
            ):
                connection.execute(text(setting))
            with unindexed(connection, "task_execution", step):
                with step("runs"):
                    connection.execute(text(INSERT_RUNS), values)
                with step("schedules with their counters"):
                    connection.execute(text(INSERT_SCHEDULES), values)
                    connection.execute(
                        text("SELECT setval('periodic_task_id_seq', :n)"), {"n": shape.schedules}
                    )
                with step("labels"):
                    labels = connection.execute(text(INSERT_LABELS), values).rowcount
            with step("VACUUM ANALYZE, CHECKPOINT"):
                connection.execute(text("VACUUM ANALYZE"))
                connection.execute(text("CHECKPOINT"))
            size = connection.scalar(text("SELECT pg_database_size(current_database())"))
    finally:
        engine.dispose()
    return Seeding(steps, labels, int(size or 0))


@contextlib.contextmanager
def unindexed(
    connection: Connection, table_name: str, step: Callable[[str], Any]
) -> Iterator[None]:
    """``table_name`` without its keys and indexes while the block fills it; then each is
    built again from the definition PostgreSQL kept of it (the migrations' own)."""
    table_oid = connection.scalar(text("SELECT CAST(:t AS regclass)::oid"), {"t": table_name})
    constraints = connection.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid), contype, conindid FROM pg_constraint"
            " WHERE conrelid = :t AND contype IN ('p', 'u', 'f') ORDER BY contype <> 'f'"
        ),
        {"t": table_oid},
    ).all()
    backing = {row[3] for row in constraints if row[2] in ("p", "u")}
    indexes = [
        (name, definition)
        for oid, name, definition in connection.execute(
            text(
                "SELECT indexrelid, indexrelid::regclass::text, pg_get_indexdef(indexrelid)"
                " FROM pg_index WHERE indrelid = :t"
            ),
            {"t": table_oid},
        ).all()
        if oid not in backing
    ]
    # Foreign keys ('f') first: they may lean on a unique index of the table.
    for name, _definition, _kind, _index in constraints:
        connection.execute(text(f'ALTER TABLE {table_name} DROP CONSTRAINT "{name}"'))
    for name, _definition in indexes:
        connection.execute(text(f'DROP INDEX "{name}"'))
    yield
    with step(f"keys and indexes of {table_name}"):
        # Keys first, then the foreign keys that may lean on them, then the other indexes.
        for name, definition, _kind, _index in sorted(
            constraints, key=lambda row: "puf".index(row[2])
        ):
            connection.execute(
                text(f'ALTER TABLE {table_name} ADD CONSTRAINT "{name}" {definition}')
            )
        for _name, definition in indexes:
            connection.execute(text(definition))


# -- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(url: str, folder: Path, workers: int) -> tuple[Process, str, float]:
    """``celery bridge serve`` on the database, with tokens; it, its URL, and its start time."""
    port = free_port()
    env = process_env(
        url,
        DEFAULT_REDIS_URL,
        f"bridge-web-{uuid.uuid4().hex[:8]}",
        api_admin_token=ADMIN_TOKEN,
        api_read_token=READ_TOKEN,
    )
    command = [sys.executable, "-m", "celery", "-A", APP, "bridge", "serve", "--port", str(port)]
    server = Process("server", [*command, "--workers", str(workers)], folder, env)
    began = time.monotonic()
    server.start()
    base = f"http://127.0.0.1:{port}"
    deadline = began + 60
    while True:
        if not server.alive():
            raise SetupError(f"the server exited at start:\n{server.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return server, base, time.monotonic() - began
        if time.monotonic() > deadline:
            server.stop()
            raise SetupError(f"no answer on /healthz within 60s:\n{server.log_tail()}")
        time.sleep(0.2)


# -- the load ----------------------------------------------------------------------------------

Get = Callable[[str, dict[str, str]], Awaitable[httpx.Response | None]]


@dataclass
class Tally:
    """The requests of one measurement: latencies of all, and what failed."""

    deadline: float
    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    record: bool = True

    def bind(self, http: httpx.AsyncClient) -> Get:
        async def get(path: str, params: dict[str, str]) -> httpx.Response | None:
            """The answer, or None once the time is up (the walk then ends)."""
            if time.monotonic() >= self.deadline:
                return None
            started = time.perf_counter()
            response = await http.get(path, params=params)
            took = time.perf_counter() - started
            if response.status_code != 200:
                self.failures[f"{response.status_code} {response.text[:120]}"] += 1
                return None
            if self.record:
                self.latencies.append(took)
            return response

        return get


@dataclass(frozen=True)
class Kind:
    """One kind of request: its name, what the figures call it, and one walk of a client."""

    name: str
    title: str
    target: float
    walk: Callable[[Get, random.Random, Shape, int], Awaitable[None]]
    #: The server's CPU an answer may cost (None: no target).
    cpu_target: float | None = None


async def follow(get: Get, path: str, params: dict[str, str], pages: int) -> None:
    """Up to ``pages`` pages of a listing, each after the ``next`` of the one before."""
    for _ in range(pages):
        response = await get(path, params)
        if response is None:
            return
        cursor = response.json()["next"]
        if cursor is None:
            return
        params = {**params, "cursor": cursor}


async def schedule_pages(get: Get, rng: random.Random, shape: Shape, pages: int) -> None:
    prefix = shape.prefix(rng.randrange(shape.schedules))
    await follow(get, "/api/v1/schedules", {"limit": str(PAGE), "prefix": prefix}, pages)


async def run_pages(get: Get, rng: random.Random, shape: Shape, pages: int) -> None:
    until = shape.newest - HISTORY * rng.random()
    await follow(get, "/api/v1/runs", {"limit": str(PAGE), "until": until.isoformat()}, pages)


async def schedule_run_pages(get: Get, rng: random.Random, shape: Shape, pages: int) -> None:
    if rng.random() < 0.5:
        s = shape.busy_schedule(rng.randrange(shape.busy))
    else:
        s = shape.other_schedule(rng.randrange(shape.others))
    path = f"/api/v1/schedules/{shape.name(s)}/runs"
    await follow(get, path, {"limit": str(PAGE)}, pages)


async def scrape(get: Get, rng: random.Random, shape: Shape, pages: int) -> None:
    await get("/metrics", {})


KINDS = {
    kind.name: kind
    for kind in (
        Kind(
            "schedules",
            "page of 100 schedules (walks from a random prefix)",
            TARGET_PAGE_P99,
            schedule_pages,
            TARGET_PAGE_CPU,
        ),
        Kind(
            "runs",
            "page of 100 runs, every schedule (walks from a random time)",
            TARGET_PAGE_P99,
            run_pages,
            TARGET_PAGE_CPU,
        ),
        Kind(
            "schedule-runs",
            "page of 100 runs of one schedule (random schedule)",
            TARGET_PAGE_P99,
            schedule_run_pages,
            TARGET_PAGE_CPU,
        ),
        Kind("metrics", "scrape of /metrics (default cap)", TARGET_SCRAPE, scrape),
    )
}


@dataclass(frozen=True)
class Figures:
    """One measurement: a kind of request from ``clients`` clients for ``seconds``."""

    kind: str
    clients: int
    seconds: float
    latencies: list[float]
    failures: Counter[str]
    server_cpu: float
    database_cpu: float
    #: Database connections the server opened meanwhile.
    connections: int
    client_cpu: float
    machine_cores: float

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def per_request(self, cpu: float) -> float:
        return cpu / max(1, len(self.latencies))

    def p(self, fraction: float) -> float:
        return percentile(self.latencies, fraction) if self.latencies else float("nan")

    def line(self) -> str:
        if not self.latencies:
            return f"{self.clients:>2} client(s): no answer"
        ms = 1000
        return (
            f"{self.clients:>2} client(s): p50 {self.p(0.5) * ms:.1f} ms"
            f"  p99 {self.p(0.99) * ms:.1f} ms  max {max(self.latencies) * ms:.1f} ms"
            f"  (n={len(self.latencies)})  {self.rate:.0f} req/s;"
            f" cpu per request: server {self.per_request(self.server_cpu) * ms:.1f} ms,"
            f" database {self.per_request(self.database_cpu) * ms:.1f} ms,"
            f" bench {self.per_request(self.client_cpu) * ms:.1f} ms;"
            f" {self.connections} database connections opened;"
            f" machine {self.machine_cores:.2f} cores busy"
        )


class BackendWatch:
    """The CPU the database's backends spend, read every ``every`` seconds until stopped.

    The server opens connections beyond its pool under load and closes them
    again, and a parallel scan starts worker processes for one statement:
    reading them often keeps all but the last moments of each, so the figure
    is a lower bound. ``opened`` counts the client connections that appeared.
    """

    def __init__(self, admin: Engine, database: str, every: float = 0.1) -> None:
        self.admin = admin
        self.database = database
        self.every = every
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.opened = 0
        self._read(initial=True)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _read(self, initial: bool = False) -> None:
        with self.admin.connect() as connection:
            found = connection.execute(
                text("SELECT pid, backend_type FROM pg_stat_activity WHERE datname = :d"),
                {"d": self.database},
            ).all()
        seconds = cpu_of([pid for pid, _kind in found])
        for pid, kind in found:
            if pid not in seconds:
                continue
            if pid not in self.last:
                if initial:
                    self.first[pid] = seconds[pid]
                elif kind == "client backend":
                    self.opened += 1
            self.last[pid] = seconds[pid]

    def _watch(self) -> None:
        while not self._done.wait(self.every):
            self._read()

    def stop(self) -> float:
        """CPU seconds spent since the watch began."""
        self._done.set()
        self._thread.join()
        self._read()
        return spent(self.first, self.last)


@dataclass(frozen=True)
class Target:
    """What the bench watches while it measures: the server's processes, the database's."""

    base: str
    server: Process
    admin: Engine
    database: str


async def load(
    target: Target,
    kind: Kind,
    shape: Shape,
    clients: int,
    seconds: float,
    pages: int,
    rng: random.Random,
    record: bool = True,
) -> Figures:
    """``clients`` clients walking ``kind`` for ``seconds``, each request after the last."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {READ_TOKEN}"}
    async with httpx.AsyncClient(
        base_url=target.base, headers=headers, limits=limits, timeout=120
    ) as http:
        server_pids = process_tree(target.server.pid)
        server_before = cpu_of(server_pids)
        watch = BackendWatch(target.admin, target.database)
        client_before = time.process_time()
        busy_before = machine_busy()
        began = time.monotonic()
        tally = Tally(began + seconds, record=record)
        get = tally.bind(http)
        seeds = [rng.randrange(2**32) for _ in range(clients)]

        async def client(own: random.Random) -> None:
            while time.monotonic() < tally.deadline:
                await kind.walk(get, own, shape, pages)
                if tally.failures and not tally.latencies:
                    return  # nothing works: no point hammering

        await asyncio.gather(*(client(random.Random(s)) for s in seeds))
        elapsed = time.monotonic() - began
        return Figures(
            kind=kind.name,
            clients=clients,
            seconds=elapsed,
            latencies=tally.latencies,
            failures=tally.failures,
            server_cpu=spent(server_before, cpu_of(process_tree(target.server.pid))),
            database_cpu=watch.stop(),
            connections=watch.opened,
            client_cpu=time.process_time() - client_before,
            machine_cores=(machine_busy() - busy_before) / elapsed,
        )


def metrics_summary(base: str) -> str:
    """How big a scrape is, and how many schedules it shows with series of their own."""
    response = httpx.get(
        f"{base}/metrics", headers={"Authorization": f"Bearer {READ_TOKEN}"}, timeout=120
    )
    shown = next(
        (
            line.split()[-1]
            for line in response.text.splitlines()
            if line.startswith("bridge_metrics_schedules_shown ")
        ),
        "?",
    )
    series = sum(1 for line in response.text.splitlines() if line and not line.startswith("#"))
    return (
        f"a scrape: {len(response.content) / 1024:.0f} KiB, {series:,} samples,"
        f" {float(shown):.0f} schedules with series of their own"
        if shown != "?"
        else f"a scrape answered {response.status_code}"
    )


# -- the run -------------------------------------------------------------------------------


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.web",
        description="Pages of the HTTP API and scrapes of /metrics under concurrent clients.",
    )
    parser.add_argument("--schedules", type=int, default=1_000_000, help="schedules (1000000)")
    parser.add_argument("--runs", type=int, default=10_000_000, help="run records (10000000)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients (20)")
    parser.add_argument(
        "--duration", type=float, default=30.0, help="seconds of each kind under load (30)"
    )
    parser.add_argument(
        "--baseline", type=float, default=10.0, help="seconds of each kind with 1 client (10)"
    )
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds of each kind before measuring (5)"
    )
    parser.add_argument("--pages", type=int, default=10, help="pages per walk at most (10)")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"what to measure, comma-separated ({','.join(KINDS)})",
    )
    parser.add_argument(
        "--server-workers", type=int, default=1, help="bridge serve --workers (1, its default)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the walks (random)")
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="admin URL of the PostgreSQL server; the run creates and drops a database of its own",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the seeded database (for --reuse)"
    )
    parser.add_argument(
        "--reuse",
        metavar="URL",
        help="measure on a database an earlier --keep run seeded, without seeding it again",
    )
    options = parser.parse_args(argv)
    options.kinds = [kind.strip() for kind in options.kinds.split(",") if kind.strip()]
    unknown = [kind for kind in options.kinds if kind not in KINDS]
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    if options.schedules < 1000 or options.runs < options.schedules:
        parser.error("--schedules must be at least 1000, and --runs at least --schedules")
    if min(options.clients, options.pages) < 1 or min(options.duration, options.baseline) <= 0:
        parser.error("--clients, --pages, --duration and --baseline must be positive")
    if options.seed is None:
        options.seed = random.randrange(2**32)
    return options


def measured_shape(url: str) -> Shape:
    """The shape of a database seeded by an earlier run."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            schedules = connection.scalar(text("SELECT count(*) FROM periodic_task"))
            runs = connection.scalar(text("SELECT count(*) FROM task_execution"))
            newest = connection.scalar(text("SELECT max(plan_time) FROM task_execution"))
    finally:
        engine.dispose()
    if not schedules or not runs or newest is None:
        raise SetupError(f"{safe_url(url)} holds no seeded schedules and runs")
    return Shape(int(schedules), int(runs), newest.astimezone(UTC))


@contextlib.contextmanager
def seeded_database(options: argparse.Namespace, folder: Path) -> Iterator[tuple[str, Shape]]:
    if options.reuse:
        print(f"database {safe_url(options.reuse)} (reused, not seeded)", flush=True)
        yield options.reuse, measured_shape(options.reuse)
        return
    newest = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    shape = Shape(options.schedules, options.runs, newest)
    with database("postgresql", options.pg_url, folder, keep=options.keep) as url:
        print(f"database {safe_url(url)}", flush=True)
        print(
            f"seeding {shape.schedules:,} schedules ({shape.busy:,} busy, timer"
            f" {shape.parameters()['busy_timer']}; the others {shape.parameters()['other_timer']})"
            f" and {shape.runs:,} runs:",
            flush=True,
        )
        seeded = seed(url, shape)
        print(
            f"seeded in {seeded.total:.1f}s: {shape.schedules:,} schedules, {seeded.labels:,}"
            f" labels, {shape.runs:,} runs; database {seeded.size_bytes / 2**30:.2f} GiB",
            flush=True,
        )
        yield url, shape


def report(options: argparse.Namespace, results: dict[str, list[Figures]]) -> int:
    print()
    rows = []
    verdicts = []
    failed = 0
    for name, figures in results.items():
        kind = KINDS[name]
        for figure in figures:
            failed += sum(figure.failures.values())
            rows.append(
                (
                    name,
                    str(figure.clients),
                    f"{figure.p(0.5) * 1000:.1f}",
                    f"{figure.p(0.99) * 1000:.1f}",
                    f"{max(figure.latencies, default=float('nan')) * 1000:.1f}",
                    f"{figure.rate:.0f}",
                    f"{figure.per_request(figure.server_cpu) * 1000:.1f}",
                    f"{figure.per_request(figure.database_cpu) * 1000:.1f}",
                )
            )
        loaded = figures[-1]
        met = loaded.latencies and loaded.p(0.99) <= kind.target
        verdicts.append(
            f"  {name}: p99 {loaded.p(0.99) * 1000:.1f} ms with {loaded.clients} clients"
            f" (target <= {kind.target * 1000:.0f} ms): {'met' if met else 'missed'}"
        )
        if kind.cpu_target is not None:
            cpu = figures[0].per_request(figures[0].server_cpu)
            verdicts.append(
                f"  {name}: {cpu * 1000:.1f} ms of server CPU an answer with one client"
                f" (target <= {kind.cpu_target * 1000:.0f} ms):"
                f" {'met' if cpu <= kind.cpu_target else 'missed'}"
            )
    print(
        table(
            (
                "kind",
                "clients",
                "p50 ms",
                "p99 ms",
                "max ms",
                "req/s",
                "server cpu ms/req",
                "db cpu ms/req",
            ),
            rows,
        )
    )
    print("targets:")
    print("\n".join(verdicts))
    print(machine_load())
    if failed:
        print(f"failed requests: {failed}")
        for figures in results.values():
            for figure in figures:
                for reason, count in figure.failures.most_common(5):
                    print(f"  {figure.kind} x{count}: {reason}")
    return 1 if failed else 0


def measure(
    target: Target,
    kind: Kind,
    shape: Shape,
    options: argparse.Namespace,
    rng: random.Random,
    clients: int,
    seconds: float,
    record: bool = True,
) -> Figures:
    return asyncio.run(load(target, kind, shape, clients, seconds, options.pages, rng, record))


def run(options: argparse.Namespace) -> int:
    rng = random.Random(options.seed)
    print(
        f"web: {options.clients} clients for {options.duration:g}s and 1 client for"
        f" {options.baseline:g}s per kind ({', '.join(options.kinds)}), walks of up to"
        f" {options.pages} pages, seed {options.seed}",
        flush=True,
    )
    with workdir("web") as folder, seeded_database(options, folder) as (url, shape):
        server, base, ready = start_server(url, folder, options.server_workers)
        admin = create_engine(options.pg_url)
        try:
            print(
                f"server: celery -A {APP} bridge serve --workers {options.server_workers}"
                f" (fastapi {version('fastapi')}, uvicorn {version('uvicorn')}),"
                f" /healthz answered after {ready:.1f}s",
                flush=True,
            )
            print(metrics_summary(base), flush=True)
            target = Target(base, server, admin, make_url(url).database or "")
            results: dict[str, list[Figures]] = {}
            for name in options.kinds:
                kind = KINDS[name]
                print(f"{kind.name}: {kind.title}", flush=True)

                if options.warmup > 0:
                    measure(
                        target, kind, shape, options, rng, options.clients, options.warmup, False
                    )
                figures = [
                    measure(target, kind, shape, options, rng, 1, options.baseline),
                    measure(target, kind, shape, options, rng, options.clients, options.duration),
                ]
                for figure in figures:
                    print(f"  {figure.line()}", flush=True)
                results[name] = figures
            return report(options, results)
        finally:
            server.stop()
            admin.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
