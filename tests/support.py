"""Helpers shared by the integration tests: services, databases and Celery processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.launcher import Launched, Launcher

REPO = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "workers.app"]


def with_repo(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the checkout first on ``PYTHONPATH``: the tests' Celery processes
    import ``workers.app`` and ``tests.*`` from it."""
    path = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    return {**environ, "PYTHONPATH": path}


#: Forks the Celery processes of this pytest process (see :mod:`tests.launcher`), in the
#: environment :meth:`Env.environ` starts from.
LAUNCHER = Launcher(with_repo(dict(os.environ)))
PG_ADMIN_URL = os.environ.get(
    "BRIDGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
#: The MariaDB (or MySQL) server, where each test that asks for one gets a database of its own.
MYSQL_ADMIN_URL = os.environ.get("BRIDGE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/")
#: Redis databases of the tests run side by side (pytest-xdist's workers gw0, gw1, ...):
#: each flushes its own. 13 is the chaos test's, 12 to 15 the benches'.
_REDIS_DATABASES = (9, 10, 11, 8, 6, 5)


def _redis_database() -> int:
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    if worker >= len(_REDIS_DATABASES):
        raise RuntimeError(
            f"at most {len(_REDIS_DATABASES)} test processes: one Redis database each"
        )
    return _REDIS_DATABASES[worker]


REDIS_URL = os.environ.get("BRIDGE_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{_redis_database()}")
#: The RabbitMQ server; each test gets a virtual host of its own on it.
AMQP_URL = os.environ.get("BRIDGE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

#: The port of each server when its URL names none.
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}

T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(service: str, reason: str) -> None:
    """Skip on a developer machine without ``service``; fail in CI, where it must exist."""
    message = f"{service} is not reachable: {reason}"
    if in_ci():
        pytest.fail(message + " (CI=true: services are required)")
    pytest.skip(message)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def postgres_database(prefix: str = "bridge_test_") -> Iterator[str]:
    """A fresh, empty PostgreSQL database ``<prefix><random>`` for one test, dropped afterwards."""
    with _fresh_database(
        "PostgreSQL",
        PG_ADMIN_URL,
        prefix,
        create='CREATE DATABASE "{}"',
        drop='DROP DATABASE IF EXISTS "{}" WITH (FORCE)',
    ) as url:
        yield url


@contextmanager
def mysql_database(prefix: str = "bridge_test_") -> Iterator[str]:
    """A fresh, empty MariaDB (or MySQL) database ``<prefix><random>`` for one test, dropped
    afterwards. Its default character set is latin1, as on many an older server: the
    bridge's tables are utf8mb4 whatever the database's default, and nothing of it may
    lean on that default (a ``JSON_TABLE`` column did)."""
    with _fresh_database(
        "MariaDB",
        MYSQL_ADMIN_URL,
        prefix,
        create="CREATE DATABASE `{}` CHARACTER SET latin1",
        drop="DROP DATABASE IF EXISTS `{}`",
    ) as url:
        yield url


@contextmanager
def _fresh_database(
    service: str, admin_url: str, prefix: str, *, create: str, drop: str
) -> Iterator[str]:
    """A database of its own on the server of ``admin_url``, made with ``create`` and dropped
    with ``drop`` (each a statement with ``{}`` for the name)."""
    server = make_url(admin_url)
    host, port = server.host or "127.0.0.1", server.port or DEFAULT_PORTS[server.get_backend_name()]
    if not port_open(host, port):
        unavailable(service, f"nothing listens on {host}:{port}")
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    # No pool: a test may restart the server between creating and dropping.
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(create.format(name)))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(drop.format(name)))
        admin.dispose()


def http_client(url: str, token: str | None = None) -> Any:
    """An HTTP client of the server at ``url`` (with the bearer ``token``), which opens a
    connection per request: one kept idle races the server closing it (uvicorn does after
    five seconds), and a request sent as it closes gets no answer, on a loaded machine now
    and then."""
    import httpx

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(
        base_url=url,
        headers=headers,
        timeout=30,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def answers(url: str) -> bool:
    """Whether an HTTP server answers ``url`` with 200."""
    import httpx

    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def restart_postgres(down_seconds: float) -> None:
    """Stop the local PostgreSQL cluster, keep it down, start it again (Debian's pg_ctlcluster).

    Used by the outage tests, which need the real server to go away and come
    back; it must run as a user allowed to control the cluster.
    """
    clusters = (
        sorted(Path("/etc/postgresql").glob("*/main")) if shutil.which("pg_ctlcluster") else []
    )
    if not clusters:
        unavailable("PostgreSQL control", "pg_ctlcluster and a cluster under /etc/postgresql")
    version = clusters[-1].parent.name
    control = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]
    subprocess.run([*control, "stop", "-m", "fast"], check=True, capture_output=True)
    try:
        time.sleep(down_seconds)
    finally:
        subprocess.run([*control, "start"], check=True, capture_output=True)
        wait_for(lambda: port_open("127.0.0.1", 5432), 60, what="PostgreSQL to come back")


def redis_broker() -> str:
    """The test Redis broker, emptied."""
    if not port_open("127.0.0.1", 6379):
        unavailable("Redis", "nothing listens on 127.0.0.1:6379")
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    return REDIS_URL


@contextmanager
def rabbitmq_broker() -> Iterator[str]:
    """An AMQP URL on a fresh RabbitMQ virtual host for one test, deleted afterwards.

    A virtual host keeps one test's queues, exchanges and messages away from
    any other run on the same server. ``rabbitmqctl`` creates it; where the
    command is missing or not allowed (a server in a container), the default
    virtual host is used, which is fine for one test run at a time.
    """
    host, port = "127.0.0.1", 5672
    if not port_open(host, port):
        unavailable("RabbitMQ", f"nothing listens on {host}:{port}")
    vhost = f"bridge_test_{uuid.uuid4().hex[:10]}"
    control = shutil.which("rabbitmqctl")
    created = False
    if control is not None:
        created = all(
            subprocess.run([control, *args], capture_output=True, timeout=60).returncode == 0
            for args in (
                ["add_vhost", vhost],
                ["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            )
        )
    try:
        yield AMQP_URL.rstrip("/") + "/" + (vhost if created else "")
    finally:
        if created and control is not None:
            subprocess.run([control, "delete_vhost", vhost], capture_output=True, timeout=60)


def wait_for(
    probe: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last value {value!r}")
        time.sleep(interval)


class Env:
    """The environment of one test's Celery processes and CLI calls."""

    def __init__(self, workdir: Path, database_url: str, broker_url: str | None) -> None:
        self.workdir = workdir
        self.database_url = database_url
        self.broker_url = broker_url
        self.processes: list[CeleryProcess] = []
        #: Where :func:`served` serves.
        self.server_url = ""

    def environ(self, **extra: str) -> dict[str, str]:
        env = with_repo(dict(os.environ))
        env["BRIDGE_DATABASE_URL"] = self.database_url
        env["BRIDGE_BROKER_DIR"] = str(self.workdir / "broker")
        if self.broker_url:
            env["CELERY_BROKER_URL"] = self.broker_url
        env.update(extra)
        return env

    def cli(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120,
        process: bool = False,
        **extra: str,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``celery -A workers.app bridge ARGS`` and return its result.

        Celery's own command line runs it in this process (see :func:`run_cli_here`), unless
        ``process`` is set or ``BRIDGE_TEST_CLI=process``: then a ``celery`` process of its
        own does, as for the tests of what only a process shows (its start, its exit status
        on a bad setting, several commands at once).
        """
        if process or os.environ.get("BRIDGE_TEST_CLI") == "process":
            result = subprocess.run(
                [*CELERY, "bridge", *args],
                cwd=self.workdir,
                env=self.environ(**extra),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        else:
            result = run_cli_here(args, self.workdir, self.environ(**extra))
        if check and result.returncode != 0:
            pytest.fail(f"bridge {' '.join(args)} exited {result.returncode}: {result.stderr}")
        if check and "--json" in args:
            try:
                json.loads(result.stdout)
            except ValueError:
                pytest.fail(
                    f"bridge {' '.join(args)} printed no JSON:\n"
                    f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}"
                )
        return result

    def start(
        self, kind: str, *args: str, scheduler: str = "bridge", **extra: str
    ) -> CeleryProcess:
        """Start ``celery worker`` or ``celery beat`` (with the bridge scheduler by default)."""
        name = f"{kind}-{len(self.processes)}"
        if kind == "beat":
            command = [*CELERY, "beat", "-S", scheduler, "-l", "info", *args]
        else:
            command = [
                *CELERY,
                "worker",
                "-l",
                "info",
                "-c",
                "2",
                "-n",
                f"{name}@%h",
                *args,
            ]
        process = CeleryProcess(name, command, self.workdir, self.environ(**extra))
        self.processes.append(process)
        return process

    def serve(self, port: int, *args: str, **extra: str) -> CeleryProcess:
        """Start ``celery bridge serve`` on ``port`` and wait until it answers."""
        command = [*CELERY, "bridge", "serve", "--port", str(port), *args]
        process = CeleryProcess(
            f"serve-{len(self.processes)}", command, self.workdir, self.environ(**extra)
        )
        self.processes.append(process)
        wait_for(
            lambda: process.popen.poll() is not None or answers(f"http://127.0.0.1:{port}/healthz"),
            30,
            what=f"the server on port {port}",
        )
        if process.popen.poll() is not None:
            pytest.fail(f"the server exited {process.popen.returncode}: {process.log}")
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def kill_all(self) -> None:
        """SIGKILL every process at the end of a test: no test looks at them after it, and
        a clean stop waits out a worker's running tasks and beat's last batch for nothing
        (the tests of clean stops stop their processes themselves)."""
        for process in self.processes:
            process.kill()


def run_cli_here(
    args: Sequence[str], cwd: Path, environ: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``celery -A workers.app bridge ARGS``, run by Celery's command line in this process.

    A ``celery`` process costs a second or two of CPU to start (its imports), and the suite
    runs hundreds of commands: in the process, one costs a few milliseconds. What a new
    process would see, it sees: ``environ`` and ``cwd`` while it runs (the local zone
    included), an app of its own on the broker the environment names (as the app module
    builds when a process imports it), and no connection pooled by an earlier command.
    What a process would print, it returns: a ``SystemExit`` message on stderr, an
    unexpected exception as its traceback on stderr with exit status 1.
    """
    from celery import Celery
    from celery.bin.celery import celery as celery_command
    from click.testing import CliRunner

    import workers.app as reference
    from bridge.errors import BridgeError
    from bridge.storage.database import database_for

    changed = {key: value for key, value in environ.items() if os.environ.get(key) != value}
    saved = {key: os.environ.get(key) for key in changed}
    os.environ.update(changed)
    time.tzset()
    # The app a new process would import: the module's configuration, its tasks (Celery
    # gives every new app the tasks its modules declared) and the environment's broker.
    original = reference.app
    reference.app = Celery(original.main, set_as_current=False)
    reference.app.conf.update(original.conf.changes)
    try:
        with contextlib.chdir(cwd):
            reference.use_broker(reference.app, os.environ)
            result = CliRunner().invoke(
                celery_command, ["-A", "workers.app", "bridge", *args], prog_name="celery"
            )
    finally:
        reference.app.close()
        reference.app = original
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        time.tzset()
        with contextlib.suppress(BridgeError):  # a URL the command refused was never opened
            database_for(environ["BRIDGE_DATABASE_URL"]).dispose()
    stdout, stderr = result.stdout, result.stderr
    if isinstance(result.exception, SystemExit):
        code = result.exception.code
        if not isinstance(code, int) and code is not None:
            # click's runner writes the message of SystemExit("...") where Python writes it.
            stdout = stdout.removesuffix(f"{code}\n")
            stderr += f"{code}\n"
    elif result.exception is not None and result.exc_info is not None:
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(
        ["celery", "-A", "workers.app", "bridge", *args], result.exit_code, stdout, stderr
    )


class CeleryProcess:
    """A real celery worker or beat subprocess with its log in a file."""

    def __init__(self, name: str, command: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self._log = self.log_path.open("w")
        self.popen: subprocess.Popen[bytes] | Launched
        if LAUNCHER.can_start(list(command), env):
            self.popen = LAUNCHER.start(list(command), env, cwd, self._log)
        else:
            self.popen = subprocess.Popen(
                list(command),
                cwd=cwd,
                env=env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait, then SIGKILL the whole process group if it hangs."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # leftover pool children
        self._log.close()
        return self.popen.wait()

    def kill(self) -> None:
        """SIGKILL the whole process group (the pool's children with it) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)
        self._log.close()

    def wait_log(self, needle: str, timeout: float = 30.0) -> None:
        wait_for(lambda: needle in self.log, timeout, what=f"{needle!r} in {self.name} log")


def describe(env: Env) -> str:
    """Every process log, for a failing test's report."""
    return "\n".join(f"===== {p.name} =====\n{p.log[-6000:]}" for p in env.processes)


def rows(database_url: str, query: str, **params: Any) -> list[Any]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text(query), params))
    finally:
        engine.dispose()


def quoted(database_url: str, name: str) -> str:
    """``name`` quoted for raw SQL on the database of ``database_url``: ``trigger`` is a
    reserved word on MySQL, where a quoted name is written with backticks."""
    return str(create_engine(database_url).dialect.identifier_preparer.quote(name))


def execute(database_url: str, statement: str, **params: Any) -> None:
    """Write straight into the database, as an operator with psql would."""
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), params)
    finally:
        engine.dispose()


def stored_time(database_url: str, moment: datetime) -> datetime:
    """``moment`` as the bridge stores it: aware on PostgreSQL, naive UTC elsewhere."""
    utc = moment.astimezone(UTC)
    return utc if database_url.startswith("postgresql") else utc.replace(tzinfo=None)


@contextmanager
def served(
    workdir: Path, broker_url: str | None = None, store: str = "postgres", **settings: str
) -> Iterator[Env]:
    """A ``celery bridge serve`` with ``settings`` on a fresh, migrated PostgreSQL database
    (or MariaDB, ``store="mariadb"``); its address is ``env.server_url``. Stopped and dropped
    afterwards."""
    fresh = mysql_database if store == "mariadb" else postgres_database
    with fresh() as database_url:
        env = Env(workdir, database_url, broker_url)
        env.cli("migrate")
        port = free_port()
        try:
            env.serve(port, **settings)
            env.server_url = f"http://127.0.0.1:{port}"
            yield env
        finally:
            env.kill_all()


#: Runs a test that takes ``db_url`` on MariaDB as well as on SQLite and PostgreSQL.
on_every_store = pytest.mark.parametrize("db_url", ["sqlite", "postgres", "mariadb"], indirect=True)
