"""What the beat benchmarks share: a database, a beat process, a probe at the broker, figures.

``bench/lone.py``, ``bench/scale.py`` and ``bench/pickup.py`` measure beat
from outside: they start a real ``celery beat -S bridge`` process on a
database of their own, and time its messages where they land, on the Redis
queue, popping each one as it arrives. Nothing executes the tasks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from bridge.database import database_for

REPO = Path(__file__).resolve().parent.parent
APP = "bench.beat_app"
CELERY = [sys.executable, "-m", "celery", "-A", APP]
#: Every database a benchmark creates is named with this prefix, and dropped.
DATABASE_PREFIX = "bridge_bb_"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
#: What beat logs once its scheduler has started (``DatabaseScheduler.setup_schedule``).
READY_LINE = "bridge: beat instance"
#: Beat's DEBUG line for one tick.
TICK_LINE = re.compile(r"bridge: tick claimed (\d+) fired (\d+) in ([\d.]+) ms")


class SetupError(Exception):
    """The run could not be set up (a service unreachable, a process that would not start)."""


# -- options ------------------------------------------------------------------------


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """``--pg-url`` and ``--redis-url``, with environment fallbacks."""
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BRIDGE_BENCH_PG_URL", DEFAULT_PG_URL),
        help="admin URL of the PostgreSQL server; each run creates and drops"
        f" a database {DATABASE_PREFIX}<random> (BRIDGE_BENCH_PG_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BRIDGE_BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis broker; the run uses a queue of its own and deletes only its keys"
        " (BRIDGE_BENCH_REDIS_URL)",
    )


# -- databases ------------------------------------------------------------------------


def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return (str(orig if orig is not None else exc).strip().splitlines() or [repr(exc)])[0]


@contextmanager
def workdir(label: str) -> Iterator[Path]:
    """A scratch folder for logs and SQLite files, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"bridge-{label}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def database(kind: str, admin_url: str, folder: Path) -> Iterator[str]:
    """A fresh, migrated database of ``kind`` (``postgresql`` or ``sqlite``); its URL.

    A PostgreSQL database is created on the server of ``admin_url`` and
    dropped afterwards; a SQLite one is a file in ``folder``.
    """
    if kind == "sqlite":
        url = f"sqlite:///{folder / f'bridge-{uuid.uuid4().hex[:6]}.db'}"
        migrate(url)
        yield url
        return
    name = f"{DATABASE_PREFIX}{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
            started = connection.scalar(text("SELECT pg_postmaster_start_time()"))
    except SQLAlchemyError as exc:
        admin.dispose()
        raise SetupError(f"PostgreSQL at {safe_url(admin_url)}: {first_line(exc)}") from exc
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        database_for(url).dispose()
        _drop(admin, name)
        with contextlib.suppress(SQLAlchemyError), admin.connect() as connection:
            if connection.scalar(text("SELECT pg_postmaster_start_time()")) != started:
                print(
                    f"warning: PostgreSQL was restarted while {name} was in use;"
                    " the figures measured on it include the outage",
                    file=sys.stderr,
                )
        admin.dispose()


def _drop(admin: Engine, name: str, patience: float = 60.0) -> None:
    """Drop database ``name``, waiting out a restart of the server (other tests cause them)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except SQLAlchemyError as exc:
            if time.monotonic() > deadline:
                print(f"could not drop {name}: {first_line(exc)}", file=sys.stderr)
                return
            time.sleep(1.0)


def migrate(url: str) -> None:
    try:
        database_for(url).migrate()
    except SQLAlchemyError as exc:
        raise SetupError(f"migrating {safe_url(url)}: {first_line(exc)}") from exc


def settle(url: str) -> None:
    """Let a PostgreSQL database digest a bulk import before beat is measured on it.

    ``VACUUM ANALYZE`` does now what autovacuum would do within a minute or
    two of the import (and would do during the measurement otherwise), and
    ``CHECKPOINT`` writes the imported pages out, so the windows that follow
    time beat, not the database catching up. SQLite has no such background work.
    """
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text("VACUUM ANALYZE periodic_task"))
            connection.execute(text("CHECKPOINT"))
    except SQLAlchemyError as exc:
        raise SetupError(f"settling {safe_url(url)}: {first_line(exc)}") from exc
    finally:
        engine.dispose()


def process_env(url: str, redis_url: str, queue: str, **settings: str) -> dict[str, str]:
    """The environment of a beat or CLI process of the run; ``settings`` are ``BRIDGE_*``."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "BRIDGE_DATABASE_URL": url,
        "CELERY_BROKER_URL": redis_url,
        "BENCH_QUEUE": queue,
        **{f"BRIDGE_{key.upper()}": value for key, value in settings.items()},
    }


# -- seeding ----------------------------------------------------------------------------


def write_jsonl(path: Path, schedules: Iterable[dict[str, Any]]) -> None:
    """Write one schedule per line, as ``bridge import`` reads them."""
    with path.open("w") as out:
        for schedule in schedules:
            out.write(json.dumps(schedule, default=_iso, separators=(",", ":")) + "\n")


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def import_schedules(path: Path, env: dict[str, str], cwd: Path) -> str:
    """``celery -A bench.beat_app bridge import FILE`` into the database ``env`` names.

    Returns what the command printed: its count of created and updated schedules.
    """
    done = subprocess.run(
        [*CELERY, "bridge", "import", str(path)], env=env, cwd=cwd, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SetupError(f"bridge import failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout.strip()


# -- beat -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of beat's output and when it arrived (``time.monotonic()``)."""

    at: float
    text: str


class Beat:
    """One ``celery beat -S bridge`` process, its output read line by line as it comes.

    Each line is stamped with its arrival time, so that startup is timed
    without polling a log file, and kept (beat logs little at ``info``; the
    benchmarks run briefly at ``debug``). Everything also goes to ``log``.
    """

    def __init__(self, env: dict[str, str], folder: Path, loglevel: str = "info") -> None:
        self.env = env
        self.folder = folder
        self.command = [*CELERY, "beat", "-S", "bridge", "-l", loglevel]
        self.log = folder / "beat.log"
        self.lines: list[Line] = []
        self._arrived = threading.Condition()
        self._popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        #: When the process was started (``time.monotonic()``).
        self.started = 0.0
        #: The largest VmRSS seen by :meth:`observe`, in KiB.
        self.rss_max_kib = 0

    def start(self) -> None:
        self.started = time.monotonic()
        self._popen = subprocess.Popen(
            self.command,
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self._popen.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self._popen.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        with self.log.open("a") as log:
            for raw in stream:
                line = Line(time.monotonic(), raw.decode(errors="replace").rstrip("\n"))
                log.write(line.text + "\n")
                with self._arrived:
                    self.lines.append(line)
                    self._arrived.notify_all()

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def wait_for(self, needle: str, timeout: float) -> Line:
        """The first line containing ``needle``, waiting for it up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                found = next((line for line in self.lines if needle in line.text), None)
                if found is not None:
                    return found
                if self._popen is None or self._popen.poll() is not None:
                    raise SetupError(f"beat exited; its last lines:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SetupError(f"beat did not log {needle!r} in {timeout:g}s:\n{self.tail()}")
                self._arrived.wait(min(left, 0.5))

    def ready(self, timeout: float = 120.0) -> float:
        """Wait until beat's scheduler has started; seconds since the process was started."""
        return self.wait_for(READY_LINE, timeout).at - self.started

    def tail(self, count: int = 20) -> str:
        with self._arrived:
            return "\n".join(line.text for line in self.lines[-count:])

    def ticks(self, since: float = 0.0) -> list[Tick]:
        """Beat's tick lines (``-l debug``) that arrived after ``since`` (monotonic)."""
        with self._arrived:
            lines = [line for line in self.lines if line.at >= since]
        return [tick for line in lines if (tick := Tick.parse(line.text)) is not None]

    def cpu_seconds(self) -> float:
        """User and system CPU time of the beat process so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status_kib(self, key: str) -> int:
        """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``)."""
        for row in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if row.startswith(f"{key}:"):
                return int(row.split()[1])
        raise SetupError(f"no {key} in /proc/{self.pid}/status")

    def observe(self, seconds: float, every: float = 0.25) -> None:
        """Wait ``seconds`` while sampling the RSS into :attr:`rss_max_kib`."""
        deadline = time.monotonic() + seconds
        while True:
            self.rss_max_kib = max(self.rss_max_kib, self.status_kib("VmRSS"))
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(every, left))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (beat clears its marks), then SIGKILL the process group if it hangs."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"beat did not stop within {timeout:g}s; killed", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait()
        if self._reader is not None:
            self._reader.join(5.0)

    def __enter__(self) -> Beat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Tick:
    """Beat's own account of one tick: rows claimed, runs fired, milliseconds taken."""

    claimed: int
    fired: int
    ms: float

    @classmethod
    def parse(cls, text: str) -> Tick | None:
        found = TICK_LINE.search(text)
        if found is None:
            return None
        return cls(int(found[1]), int(found[2]), float(found[3]))


# -- the broker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One of beat's messages, popped off the queue."""

    #: When it was popped: wall clock (``time.time()``) and ``time.monotonic()``.
    wall: float
    at: float
    schedule: str
    plan_time: datetime
    trigger: str

    @property
    def lateness(self) -> float:
        """Seconds from the run's plan time to its arrival at the broker."""
        return self.wall - self.plan_time.timestamp()


class Probe:
    """Pops beat's messages off the run's Redis queue as they arrive.

    A thread blocks in ``BRPOP`` on the queue, so a message is taken the
    moment beat pushes it; its arrival time is read right then. The bridge's
    headers say which schedule and occurrence it is.
    """

    def __init__(self, redis_url: str, queue: str) -> None:
        self.queue = queue
        self.client = redis.Redis.from_url(redis_url, socket_connect_timeout=3)
        self.arrivals: list[Arrival] = []
        self._arrived = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._pop, daemon=True)

    def _pop(self) -> None:
        while not self._stopping.is_set():
            popped = self.client.brpop([self.queue], timeout=1)
            if popped is None:
                continue
            wall, at = time.time(), time.monotonic()
            headers = json.loads(popped[1])["headers"]
            arrival = Arrival(
                wall=wall,
                at=at,
                schedule=str(headers["bridge_schedule"]),
                plan_time=datetime.fromisoformat(headers["bridge_plan_time"]),
                trigger=str(headers["bridge_trigger"]),
            )
            with self._arrived:
                self.arrivals.append(arrival)
                self._arrived.notify_all()

    def wait_for(self, wanted: Callable[[Arrival], bool], timeout: float) -> Arrival | None:
        """The first arrival ``wanted`` accepts, waiting up to ``timeout``; None if none came."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                found = next((a for a in self.arrivals if wanted(a)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self._arrived.wait(left)

    def since(self, moment: float) -> list[Arrival]:
        """The arrivals popped after ``moment`` (monotonic)."""
        with self._arrived:
            return [a for a in self.arrivals if a.at >= moment]

    def __enter__(self) -> Probe:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise SetupError(f"Redis: {exc}") from exc
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop popping and delete the run's keys (its queue and kombu's bindings)."""
        self._stopping.set()
        self._thread.join(5.0)
        with contextlib.suppress(redis.RedisError):
            patterns = (f"{self.queue}*", f"_kombu.binding*.{self.queue}")
            keys = [key for pattern in patterns for key in self.client.scan_iter(match=pattern)]
            if keys:
                self.client.delete(*keys)
        self.client.close()


def new_queue(label: str) -> str:
    """A queue name of the run's own."""
    return f"bridge-{label}-{uuid.uuid4().hex[:8]}"


# -- figures ------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def spread(values: Sequence[float], scale: float = 1000.0, unit: str = "ms") -> str:
    """``p50 / p99 / max`` of ``values`` times ``scale``, and their count."""
    if not values:
        return "n/a (none)"
    return (
        f"p50 {percentile(values, 0.5) * scale:.1f} {unit}"
        f"  p99 {percentile(values, 0.99) * scale:.1f} {unit}"
        f"  max {max(values) * scale:.1f} {unit}  (n={len(values)})"
    )


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, as a Markdown table."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def machine_load() -> str:
    """The load average, so that a figure measured on a busy machine says so."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"
