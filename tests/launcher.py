"""Celery processes forked from one that has already imported their libraries.

A ``celery worker`` or ``celery beat`` process spends most of its first
second of CPU importing Celery, kombu, SQLAlchemy, the database drivers and
the bridge; the suite starts several hundred of them on a machine whose time
is the CPU's. A launcher process imports those once (per pytest process),
then forks each Celery process the tests ask for. The child is a process of
its own, as a started one is: a session of its own, the test's working
folder, environment and zone, its output to the test's log, and Celery's
own command line run from its ``main``, which imports the app and the
scheduler (``-A``, ``-S``) as any ``celery`` command does. Nothing is
imported before the fork that reads the environment as it is imported, and
nothing the launcher imports opens a connection or a thread.

What differs from a fresh ``celery`` command is only that the modules were
in memory already: the tests of what users run as they run it (the install
lines, the quick start, the upgrade, each of those in an environment of its
own) start fresh processes, and so does every command here when
``BRIDGE_TEST_FORK=0``.

Run as ``python -m tests.launcher``, it reads one JSON request per line:
``{"start": {"argv", "env", "cwd", "log"}}`` answers ``{"pid"}``;
``{"poll": PID}`` answers ``{"status"}``, the exit code as
:attr:`subprocess.Popen.returncode` gives it (negative for a signal), or
``null`` while the process runs.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

#: What a worker, a beat and ``bridge serve`` import before they run a task, a tick or a
#: request, besides the app's own
#: module and the tests' (``-A workers.app``, ``-S tests.crashing:...``), which each child
#: imports itself. The drivers of every store and broker the tests use are among them.
PRELOADED = (
    "celery",
    "celery.bin.celery",
    "celery.apps.worker",
    "celery.apps.beat",
    "celery.beat",
    "celery.worker.consumer.consumer",
    "celery.concurrency.prefork",
    "celery.concurrency.asynpool",
    "celery.app.routes",
    "celery.loaders.app",
    "kombu.transport.redis",
    "kombu.transport.pyamqp",
    "kombu.transport.filesystem",
    "kombu.pidbox",
    "redis",
    "amqp",
    "sqlalchemy.orm",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "psycopg",
    "pymysql",
    "bridge.recorder",
    "bridge.folder_broker",
    "bridge.worker.task",
    "bridge.beat.scheduler",
    "bridge.manage.web.app",
    "uvicorn",
)

#: Environment variables read once, as the interpreter starts: a command that sets one to
#: another value than the launcher's is started fresh.
_INTERPRETER = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONWARNINGS",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONDEVMODE",
)


def _stream(fd: int, **options: Any) -> io.TextIOWrapper:
    """A standard stream on ``fd``, buffered as the interpreter's own (``PYTHONUNBUFFERED``,
    which the launcher and the command share)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    binary = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(binary, write_through=unbuffered, **options)


def _child(argv: list[str], environ: dict[str, str], cwd: str, log: str) -> None:
    """In the forked child: become the command. It ends this process as it ends its own, by
    ``SystemExit`` or an exception, which leave through the launcher's loop to the
    interpreter's exit (the exit handlers run, the streams are flushed)."""
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_APPEND)
    for fd, source in ((0, null), (1, out), (2, out)):
        os.dup2(source, fd)
    os.close(null)
    os.close(out)
    streams = {
        "stdin": open(0, closefd=False),  # noqa: SIM115
        "stdout": _stream(1),
        "stderr": _stream(2, line_buffering=True, errors="backslashreplace"),
    }
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.chdir(cwd)
    sys.path[0] = cwd  # as ``python -m`` puts the working folder first
    importlib.invalidate_caches()
    os.environ.clear()
    os.environ.update(environ)
    time.tzset()
    sys.argv = argv
    from celery.__main__ import main

    main()
    sys.exit(0)


def serve() -> None:
    """The launcher's loop: fork on request, answer the exit codes of the children it reaped."""
    for name in PRELOADED:
        importlib.import_module(name)
    ended: dict[int, int] = {}
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        request = json.loads(line)
        while True:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid:
                    ended[pid] = os.waitstatus_to_exitcode(status)
                    continue
            break
        if "start" in request:
            answers.flush()
            start = request["start"]
            pid = os.fork()
            if pid == 0:
                _child(start["argv"], start["env"], start["cwd"], start["log"])  # never returns
            ended.pop(pid, None)  # a number an earlier child had
            answer: dict[str, Any] = {"pid": pid}
        else:
            answer = {"status": ended.get(request["poll"])}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()


class Launched:
    """A forked Celery process, as much of :class:`subprocess.Popen` as the tests use."""

    def __init__(self, launcher: Launcher, pid: int, args: list[str]) -> None:
        self._launcher = launcher
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.ask({"poll": self.pid})["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The launcher process of this pytest process, started at its first request."""

    def __init__(self, environ: dict[str, str]) -> None:
        self._environ = environ
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def can_start(self, argv: list[str], environ: dict[str, str]) -> bool:
        """Whether ``argv`` is a ``python -m celery`` command this launcher's interpreter can
        become: the same Python, the same start-up environment."""
        return (
            os.environ.get("BRIDGE_TEST_FORK", "1") != "0"
            and argv[:3] == [sys.executable, "-m", "celery"]
            and all(environ.get(key) == self._environ.get(key) for key in _INTERPRETER)
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.launcher"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=self._environ,
                    cwd=Path(__file__).resolve().parent.parent,
                )
            assert self._process.stdin is not None and self._process.stdout is not None
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the launcher exited {self._process.poll()} at {request}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def start(self, argv: list[str], environ: dict[str, str], cwd: Path, log: IO[str]) -> Launched:
        """Fork ``argv`` (``python -m celery ...``) with its output appended to ``log``."""
        log.flush()
        import celery.__main__

        program = celery.__main__.__file__
        start = {"argv": [program, *argv[3:]], "env": environ, "cwd": str(cwd), "log": log.name}
        return Launched(self, self.ask({"start": start})["pid"], argv)


if __name__ == "__main__":
    serve()
