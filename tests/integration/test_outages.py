"""PostgreSQL, MariaDB and Redis restarted under a running beat and worker.

Beat must stay up, log each outage once, back off and resume within seconds
of recovery; the occurrences that fell due meanwhile follow the catch-up
policy (``all`` here: every one of them runs, once); a worker that could not
write a record during the outage writes it when the database is back.
"""

from __future__ import annotations

import getpass
import itertools
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.support import (
    CeleryProcess,
    Env,
    free_port,
    port_open,
    restart_postgres,
    rows,
    unavailable,
    wait_for,
)

pytestmark = pytest.mark.e2e

EVERY_SECOND = [
    "--timer", "every 1s", "--catchup", "all", "--overlap", "allow", "--expires", "never",
]  # fmt: skip


def runs_of(env: Env, name: str) -> list[Any]:
    return rows(
        env.database_url,
        "SELECT e.plan_time, e.status FROM task_execution e"
        " JOIN periodic_task p ON p.id = e.periodic_task_id WHERE p.name = :name"
        " ORDER BY e.plan_time",
        name=name,
    )


def succeeded_after(env: Env, name: str, moment: datetime) -> bool:
    return any(r.status == "SUCCESS" and utc(r.plan_time) > moment for r in runs_of(env, name))


def utc(moment: datetime) -> datetime:
    """A time as read from the store: PostgreSQL's aware, MariaDB's naive UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def start_ticking(env: Env) -> tuple[CeleryProcess, CeleryProcess]:
    """A schedule firing every second, a worker and a beat; returns both processes."""
    env.cli("add", "tick", "--task", "workers.app.quick", *EVERY_SECOND)
    worker, beat = env.start("worker"), env.start("beat")
    wait_for(lambda: len(runs_of(env, "tick")) >= 3, 60, what="the first runs")
    return worker, beat


def assert_recovered(env: Env, beat: CeleryProcess, outage: str, back: datetime) -> None:
    """Beat survived, logged the outage once, resumed, and every second ran once."""
    wait_for(lambda: succeeded_after(env, "tick", back + timedelta(seconds=3)), 90,
             what="runs after the outage")  # fmt: skip
    assert beat.popen.poll() is None, "beat must survive the outage"
    assert beat.log.count(f"bridge: {outage} unreachable") == 1, "the outage is logged once"
    # Logged when the tick that fired them returns, which may be a moment after their runs
    # are recorded: waited for, not read at once.
    wait_for(lambda: "bridge: recovered; ticking again" in beat.log, 30,
             what="the recovery logged")  # fmt: skip
    # Catch-up all: one successful run per second, no gap, no double.
    wait_for(
        lambda: all(r.status == "SUCCESS" for r in runs_of(env, "tick")),
        60,
        what="every run to succeed",
    )
    plans = [r.plan_time for r in runs_of(env, "tick")]
    gaps = [(a, b) for a, b in itertools.pairwise(plans) if b - a != timedelta(seconds=1)]
    assert not gaps, f"occurrences missing or doubled between {gaps}"


def assert_database_outage_survived(env: Env, outage: Callable[[], None]) -> None:
    """A schedule ticking and a run in flight when ``outage()`` takes the database away for
    a while: beat survives and catches up, and the worker holds the outcome it reached
    meanwhile, then writes it."""
    env.cli("add", "slowpoke", "--task", "workers.app.slow", "--timer", "@yearly",
            "--kwargs", '{"seconds": 5}')  # fmt: skip
    worker, beat = start_ticking(env)

    # A run in flight when the database goes: it ends during the outage.
    env.cli("run", "slowpoke")
    wait_for(lambda: runs_of(env, "slowpoke")[0].status == "STARTED", 30, what="slowpoke start")
    outage()
    assert_recovered(env, beat, "database", datetime.now(UTC))
    # The outcome reached during the outage was held by the worker, then written.
    wait_for(lambda: runs_of(env, "slowpoke")[0].status == "SUCCESS", 30, what="slowpoke")
    assert "holding run records until it is back" in worker.log
    assert "database back; wrote" in worker.log


@pytest.mark.serial  # every other test's database goes down with it
def test_postgres_restart_under_beat_and_worker(pg_env: Env) -> None:
    assert_database_outage_survived(pg_env, lambda: restart_postgres(down_seconds=8))


def test_mariadb_restart_under_beat_and_worker(
    tmp_path: Path, private_mariadb: MariaDBServer, redis_url: str
) -> None:
    """The same on MariaDB: its server of the test's own, so the outage is this test's
    alone. Beat's named lock goes with the server's sessions; it takes it again, and
    its rows stay its own (no other beat runs to take them)."""

    def outage() -> None:
        private_mariadb.stop()
        time.sleep(8)
        private_mariadb.start()

    env = Env(tmp_path, private_mariadb.url, redis_url)
    env.cli("migrate")
    try:
        assert_database_outage_survived(env, outage)
    finally:
        env.kill_all()


@pytest.fixture
def private_mariadb(tmp_path: Path) -> Iterator[MariaDBServer]:
    server = MariaDBServer(tmp_path / "mariadb", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


class PrivateServer:
    """A server process of the test's own, stopped gently, then killed if it hangs."""

    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class MariaDBServer(PrivateServer):
    """A MariaDB server of the test's own, from the machine's ``mariadbd`` and a data folder
    made by ``mariadb-install-db``, so that stopping it disturbs no other test."""

    def __init__(self, workdir: Path, port: int) -> None:
        if not (shutil.which("mariadb-install-db") and Path("/usr/sbin/mariadbd").exists()):
            unavailable("MariaDB server", "mariadb-install-db and /usr/sbin/mariadbd")
        self.workdir, self.port = workdir, port
        self.url = f"mysql+pymysql://root@127.0.0.1:{port}/bridge"
        user = f"--user={getpass.getuser()}"
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={workdir / 'data'}",
             "--auth-root-authentication-method=normal", "--skip-test-db", user],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self.command = [
            "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={workdir / 'data'}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--socket={workdir / 'socket'}",
            f"--pid-file={workdir / 'pid'}", f"--log-error={workdir / 'error.log'}",
            "--innodb-buffer-pool-size=64M", user,
        ]  # fmt: skip
        self.created = False

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(lambda: port_open("127.0.0.1", self.port), 60, what="the private MariaDB")
        if not self.created:
            admin = create_engine(self.url.rsplit("/", 1)[0] + "/", poolclass=NullPool)
            with admin.begin() as connection:
                connection.execute(text("CREATE DATABASE bridge"))
            admin.dispose()
            self.created = True


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


class RedisServer(PrivateServer):
    """A Redis of the test's own, so that restarting it disturbs nothing else."""

    def __init__(self, workdir: Path, port: int) -> None:
        workdir.mkdir()
        self.workdir, self.port = workdir, port
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), 20, what="the private Redis to start")


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def test_redis_restart_under_beat_and_worker(
    tmp_path: Path, pg_url: str, private_redis: RedisServer
) -> None:
    env = Env(tmp_path, pg_url, private_redis.url)
    env.cli("migrate")
    try:
        worker, beat = start_ticking(env)
        # A restarted Redis without persistence forgets queued messages: let
        # the worker drain the queue first, as it does in steady state.
        wait_for(lambda: sum(r.status == "SUCCESS" for r in runs_of(env, "tick")) >= 3, 60,
                 what="the worker to run the first runs")  # fmt: skip
        private_redis.stop()
        time.sleep(6)
        private_redis.start()
        back = datetime.now(UTC)
        time.sleep(3)
        if worker.popen.poll() is not None:
            # Celery's worker may exit on a lost broker connection (a kombu
            # defect): restart it, as its supervisor would in production.
            assert "Unrecoverable error" in worker.log
            env.start("worker")
        assert_recovered(env, beat, "broker", back)
    finally:
        env.kill_all()
