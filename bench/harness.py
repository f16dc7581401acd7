"""What the benchmarks share: processes, databases, options and figures.

Every bench measures from outside: it starts real ``celery`` processes on a
database of its own and times what they do where it becomes visible (at the
broker, in the database). This module owns those pieces: a PostgreSQL,
MariaDB (or MySQL) or SQLite database created, migrated and dropped; beat and worker processes
started, watched and stopped; percentiles and tables. Reading the broker is
``bench/broker_probe.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import resource
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
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from bench import REPO, SetupError
from bridge.storage.database import database_for

APP = "bench.beat_app"
CELERY = [sys.executable, "-m", "celery", "-A", APP]
#: The prefix of the databases :func:`database` creates (and drops).
DATABASE_PREFIX = "bridge_bb_"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306/mysql"
#: The stores a bench may run on: the servers, and with them the embedded default.
SERVERS = ("postgresql", "mariadb")
STORES = (*SERVERS, "sqlite")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
#: What beat logs once its scheduler has started (``DatabaseScheduler.setup_schedule``).
READY_LINE = "bridge: beat instance"
#: Beat's DEBUG line for one tick.
TICK_LINE = re.compile(r"bridge: tick claimed (\d+) fired (\d+) in ([\d.]+) ms")

T = TypeVar("T")


# -- options ------------------------------------------------------------------------


def add_service_options(
    parser: argparse.ArgumentParser,
    variables: str = "BRIDGE_BENCH",
    redis_url: str = DEFAULT_REDIS_URL,
    each: str = "each run",
) -> None:
    """``--pg-url``, ``--mysql-url`` and ``--redis-url``, falling back on
    ``<variables>_PG_URL``, ``<variables>_MYSQL_URL`` and ``<variables>_REDIS_URL``;
    ``each`` names what has a database and a queue of its own."""
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(f"{variables}_PG_URL", DEFAULT_PG_URL),
        help=f"admin URL of the PostgreSQL server; {each} creates and drops"
        f" a database of its own ({variables}_PG_URL)",
    )
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get(f"{variables}_MYSQL_URL", DEFAULT_MYSQL_URL),
        help=f"admin URL of the MariaDB or MySQL server, with --db mariadb; {each} creates"
        f" and drops a database of its own ({variables}_MYSQL_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(f"{variables}_REDIS_URL", redis_url),
        help=f"Redis broker; {each} uses a queue of its own and deletes only its keys"
        f" ({variables}_REDIS_URL)",
    )


def admin_url(store: str, options: Any) -> str:
    """The admin URL of ``store``'s server among a bench's options (``pg_url``,
    ``mysql_url``); SQLite needs none, and gets PostgreSQL's, unused."""
    return str(options.mysql_url if store == "mariadb" else options.pg_url)


def exit_status(run: Callable[[], int]) -> int:
    """``run()``'s exit status, or 2, said on stderr, when the run could not be set up.

    A ``SIGTERM`` (``kill``, ``timeout``) ends the run as Ctrl-C does: the processes it
    started are stopped and its database dropped on the way out. Python's default ends
    the bench at once and left its beat running, firing into the next bench's figures.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run()
    except SetupError as exc:
        print(f"setup error: {exc}", file=sys.stderr)
        return 2


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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


def patiently(work: Callable[[], T], timeout: float = 90.0) -> T:
    """``work()``, retried while the database is unreachable (a restart of the server)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return work()
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


#: The server of a URL's backend: SQLAlchemy names MariaDB's own dialect ``mariadb``.
_SERVERS = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}
#: How each server's SQL creates and drops a database named ``{}``.
_CREATE_DROP = {
    "postgresql": ('CREATE DATABASE "{}"', 'DROP DATABASE IF EXISTS "{}" WITH (FORCE)'),
    "mysql": ("CREATE DATABASE `{}`", "DROP DATABASE IF EXISTS `{}`"),
}


@contextmanager
def server_database(admin_url: str, prefix: str, keep: bool = False) -> Iterator[str]:
    """A fresh, empty database ``<prefix><random>`` on the PostgreSQL, MariaDB or MySQL
    server of ``admin_url``; its URL.

    It is dropped afterwards unless ``keep``, waiting out a restart of the
    server (other tests cause them).
    """
    backend = _SERVERS.get(make_url(admin_url).get_backend_name())
    if backend is None:
        raise SetupError(f"{safe_url(admin_url)}: not a PostgreSQL, MariaDB or MySQL URL")
    create, drop = _CREATE_DROP[backend]
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(create.format(name)))
    except SQLAlchemyError as exc:
        admin.dispose()
        raise SetupError(f"{safe_url(admin_url)}: {first_line(exc)}") from exc
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        if keep:
            print(f"database kept: {safe_url(url)}")
        else:

            def dropped() -> None:
                with admin.connect() as connection:
                    connection.execute(text(drop.format(name)))

            try:
                patiently(dropped)
            except DBAPIError as exc:
                print(f"could not drop {name}: {first_line(exc)}", file=sys.stderr)
        admin.dispose()


@contextmanager
def database(kind: str, admin_url: str, folder: Path, keep: bool = False) -> Iterator[str]:
    """A fresh, migrated database of ``kind`` (``postgresql``, ``mariadb`` or ``sqlite``);
    its URL.

    A server's database is created on the server of ``admin_url`` and
    dropped afterwards unless ``keep`` (a warning says if the server was
    restarted while it was in use); a SQLite one is a file in ``folder``.
    """
    if kind == "sqlite":
        url = f"sqlite:///{folder / f'bridge-{uuid.uuid4().hex[:6]}.db'}"
        migrate(url)
        yield url
        return
    started = server_started(admin_url)
    name = "?"
    try:
        with server_database(admin_url, DATABASE_PREFIX, keep) as url:
            name = make_url(url).database or name
            try:
                migrate(url)
                yield url
            finally:
                database_for(url).dispose()
    finally:
        with contextlib.suppress(SetupError):
            if restarted(started, server_started(admin_url)):
                print(
                    f"warning: the database server was restarted while {name} was in use;"
                    " the figures measured on it include the outage",
                    file=sys.stderr,
                )


def server_started(url: str) -> float:
    """When the database server of ``url`` was started, in seconds since the epoch: it
    changes when the server restarts (see :func:`restarted`). PostgreSQL knows the
    instant; MariaDB and MySQL their uptime in whole seconds (``SHOW GLOBAL STATUS``:
    MySQL 8 has no ``information_schema.GLOBAL_STATUS``)."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                query = "SELECT extract(epoch FROM pg_postmaster_start_time())"
                return float(connection.scalar(text(query)))
            _, uptime = connection.execute(text("SHOW GLOBAL STATUS LIKE 'Uptime'")).one()
            return time.time() - float(uptime)
    except SQLAlchemyError as exc:
        raise SetupError(f"{safe_url(url)}: {first_line(exc)}") from exc
    finally:
        engine.dispose()


def restarted(started: float, now_started: float) -> bool:
    """Whether two readings of :func:`server_started` tell of a restart between them: a
    reading from uptime in whole seconds may differ by one without one."""
    return abs(now_started - started) > 1.5


def migrate(url: str) -> None:
    try:
        database_for(url).migrate()
    except SQLAlchemyError as exc:
        raise SetupError(f"migrating {safe_url(url)}: {first_line(exc)}") from exc


def run_sql(url: str, statement: str, **params: Any) -> list[Any]:
    """Run one statement on a connection of its own and commit; the rows it returned."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            result = connection.execute(text(statement), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


def settle(url: str) -> None:
    """Let a server's database digest a bulk import before beat is measured on it.

    On PostgreSQL ``VACUUM ANALYZE`` does now what autovacuum would do within
    a minute or two of the import (and would do during the measurement
    otherwise), and ``CHECKPOINT`` writes the imported pages out, so the
    windows that follow time beat, not the database catching up. On MariaDB
    and MySQL ``ANALYZE TABLE`` refreshes the statistics the import made stale.
    SQLite has no such background work.
    """
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("VACUUM ANALYZE periodic_task"))
                connection.execute(text("CHECKPOINT"))
            elif engine.dialect.name == "mysql":
                connection.execute(text("ANALYZE TABLE periodic_task"))
    except SQLAlchemyError as exc:
        raise SetupError(f"settling {safe_url(url)}: {first_line(exc)}") from exc
    finally:
        engine.dispose()


def process_env(url: str | None, broker_url: str, queue: str, **settings: str) -> dict[str, str]:
    """The environment of a celery process of the run: the bridge's database ``url`` (if it
    has one), the broker and the run's queue (``BENCH_QUEUE``); ``settings`` are ``BRIDGE_*``."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **({"BRIDGE_DATABASE_URL": url} if url is not None else {}),
        "CELERY_BROKER_URL": broker_url,
        "BENCH_QUEUE": queue,
        **{f"BRIDGE_{key.upper()}": value for key, value in settings.items()},
    }


def run_checked(command: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``command`` (``python -m ...``) to its end; what it printed, or SetupError."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SetupError(
            f"{' '.join(command[2:])} failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}"
        )
    return done.stdout.strip()


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
    return run_checked([*CELERY, "bridge", "import", str(path)], env, cwd)


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
        #: The largest PSS of beat and its finishing process seen by :meth:`observe`, in KiB.
        self.pss_max_kib = 0

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
        """User and system CPU time of beat so far, its finishing process included."""
        return tree_cpu_seconds(self.pid)

    def status_kib(self, key: str) -> int:
        """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``) of beat and its
        finishing process together."""
        return tree_status_kib(self.pid, key)

    def observe(self, seconds: float, every: float = 0.25) -> None:
        """Wait ``seconds`` while sampling the RSS into :attr:`rss_max_kib` and the PSS of
        beat with its finishing process into :attr:`pss_max_kib`."""
        deadline = time.monotonic() + seconds
        while True:
            self.rss_max_kib = max(self.rss_max_kib, self.status_kib("VmRSS"))
            self.pss_max_kib = max(self.pss_max_kib, tree_kib(self.pid, "Pss"))
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


# -- processes ----------------------------------------------------------------------------


class Process:
    """One celery beat or worker subprocess, restartable, its log appended to one file."""

    def __init__(self, name: str, command: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.command = command
        self.workdir = workdir
        self.env = env
        self.log_path = workdir / f"{name}.log"
        self.starts = 0
        self.terminating = False
        self.popen: subprocess.Popen[bytes] | None = None
        #: CPU seconds of the incarnations reaped so far, their pool children included.
        self.cpu = 0.0

    def start(self) -> None:
        self.starts += 1
        self.terminating = False
        with self.log_path.open("ab") as log:
            log.write(f"===== {self.name} start {self.starts} at {now_iso()} =====\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.command,
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit status, or None while it runs; reaping it adds its CPU time."""
        if self.popen is None:
            return None
        before = children_cpu()
        status = self.popen.poll()
        self.cpu += children_cpu() - before
        return status

    def wait(self, timeout: float | None = None) -> None:
        assert self.popen is not None
        before = children_cpu()
        try:
            self.popen.wait(timeout)
        finally:
            self.cpu += children_cpu() - before

    def alive(self) -> bool:
        return self.popen is not None and self.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: no handler runs, no mark is cleared."""
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.wait()

    def terminate(self) -> None:
        """SIGTERM, once: a second one would cut a beat's clean exit short."""
        if self.alive() and not self.terminating:
            assert self.popen is not None
            self.terminating = True
            self.popen.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, wait, then SIGKILL the process group if it hangs."""
        if self.popen is None:
            return
        if self.alive():
            self.terminate()
            try:
                self.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"{self.name} did not stop within {timeout:g}s; killed", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # a hung process, leftover pool children
        self.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_has(self, needle: str) -> bool:
        """Whether the current incarnation logged ``needle``."""
        try:
            log = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        return needle in log.rsplit(f"===== {self.name} start {self.starts} ", 1)[-1]


def start_all(
    processes: Sequence[Process],
    ready: Callable[[Process], str],
    timeout: float,
    every: float = 0.2,
) -> None:
    """Start ``processes`` and wait until each has logged its line ``ready(process)``."""
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    waiting = list(processes)
    while waiting:
        for process in waiting:
            if not process.alive():
                raise SetupError(f"{process.name} exited at start; its log:\n{process.log_tail()}")
        waiting = [p for p in waiting if not p.log_has(ready(p))]
        if waiting and time.monotonic() > deadline:
            names = ", ".join(p.name for p in waiting)
            raise SetupError(f"{names} not ready after {timeout:g}s")
        time.sleep(every)


def stop_all(processes: Sequence[Process]) -> None:
    """SIGTERM to all of them at once, then wait for each (see :meth:`Process.stop`)."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop()


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``; ``VmHWM``, the peak RSS)."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith(f"{key}:"):
            return int(row.split()[1])
    raise SetupError(f"no {key} in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used so far (``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name, in parentheses, may contain spaces: count fields after it.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backends(admin: Engine, database: str) -> list[int]:
    """Process ids of the server backends connected to ``database``."""
    with admin.connect() as connection:
        return list(
            connection.scalars(
                text("SELECT pid FROM pg_stat_activity WHERE datname = :d"), {"d": database}
            )
        )


def cpu_of(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds each of ``pids`` has used so far (gone ones left out)."""
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = cpu_seconds(pid)
    return found


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent_of[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree = [root]
    for pid in tree:
        tree.extend(child for child, parent in parent_of.items() if parent == pid)
    return tree


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds ``root`` and its descendants have used so far: a beat's finishing
    process is part of the beat."""
    return sum(cpu_of(process_tree(root)).values())


def tree_status_kib(root: int, key: str) -> int:
    """:func:`status_kib` of ``root``, plus the pages its descendants (a beat's finishing
    process) hold of their own: forked, they share the rest with ``root``."""
    total = status_kib(root, key)
    for pid in process_tree(root)[1:]:
        with contextlib.suppress(OSError):
            total += private_kib(pid)
    return total


def tree_kib(root: int, key: str) -> int:
    """``key`` of ``/proc/<pid>/smaps_rollup`` (``Pss``, ``Rss``) summed over ``root`` and its
    descendants: with ``Pss`` a page two processes share counts half in each, so the sum is
    the memory the tree holds."""
    total = 0
    for pid in process_tree(root):
        try:
            rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(row.split()[1]) for row in rows if row.startswith(f"{key}:"))
    return total


def private_kib(pid: int) -> int:
    """The memory process ``pid`` shares with no other, in KiB (``/proc/<pid>/smaps_rollup``)."""
    rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    return sum(int(row.split()[1]) for row in rows if row.startswith("Private_"))


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two readings; a process that appeared in between counts from zero."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent not idle since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


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
