"""Celery processes forked from one that has already imported their libraries.

A ``celery worker`` or ``celery beat`` process spends most of its first
second of CPU importing Celery, kombu, SQLAlchemy, the database drivers and
the bridge; the suite starts several hundred of them on a machine whose time
is the CPU's. A launcher process imports those once (per pytest process),
then forks each Celery process the tests ask for. The child is a process of
its own, as a started one is: a session of its own, the test's working
folder, environment and zone, its output to the test's log, and Celery's
own command line run from its ``main``, which imports the app and the
scheduler (``-A``, ``-S``) as any ``celery`` command does, under
``celery.__main__`` as its main module. Nothing the launcher imports opens a
connection or a thread, and its signal dispositions are the interpreter's
own (SIGPIPE ignored, SIGINT raising ``KeyboardInterrupt``).

What differs from a fresh ``celery`` command:

- the modules were in memory already, and the few settings their imports
  read from the environment (:data:`READ_AT_IMPORT`) are the launcher's: a
  command that sets one otherwise starts fresh;
- the children share the launcher's hash seed.

The tests of what users run as they run it (the install lines, the quick
start, the upgrade, each in an environment of its own) start fresh
processes, and so does every command here when ``BRIDGE_TEST_FORK=0``.

Run as ``python -m tests.launcher``, it reads one JSON request per line:
``{"start": {"argv", "env", "cwd", "log"}}`` answers ``{"pid"}`` once the
child leads a session of its own; ``{"poll": PID}`` answers ``{"status"}``,
the exit code as :attr:`subprocess.Popen.returncode` gives it (negative for
a signal), or ``null`` while the process runs. A child is reaped only when
its own handle asks, which it does until it has seen it end and not after,
so its number cannot be given to another child before then.
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
    "bridge.celery.task",
    "bridge.celery.scheduler",
    "bridge.manage.web.app",
    "uvicorn",
)

#: Environment variables read once, as the interpreter starts or as a preloaded module is
#: imported: a command that sets one to another value than the launcher's starts fresh.
READ_AT_IMPORT = (
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
    "PYTHONHASHSEED",
    "REMAP_SIGTERM",
    "KOMBU_LOG_CONNECTION",
    "KOMBU_LOG_CHANNEL",
    "KOMBU_LOG_DEBUG",
    "CELERY_WORKER_REVOKES_MAX",
    "CELERY_WORKER_SUCCESSFUL_MAX",
    "CELERY_WORKER_SUCCESSFUL_EXPIRES",
    "CELERY_WORKER_REVOKE_EXPIRES",
    "PICKLE_PROTOCOL",
    "OTEL_PROPAGATORS",
    "PROMETHEUS_MULTIPROC_DIR",
)


def _stream(fd: int, **options: Any) -> io.TextIOWrapper:
    """A standard stream on ``fd``, buffered as the interpreter's own (``PYTHONUNBUFFERED``,
    which the launcher and the command share)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    binary = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(binary, write_through=unbuffered, **options)


def _child(argv: list[str], environ: dict[str, str], cwd: str, log: str, ready: int) -> None:
    """In the forked child: become the command. It ends this process as it ends its own, by
    ``SystemExit`` or an exception, which leave through the launcher's loop to the
    interpreter's exit (the exit handlers run, the streams are flushed)."""
    os.setsid()
    os.write(ready, b".")
    os.close(ready)
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
    import celery.__main__

    # The command's main module, as ``python -m celery`` has it (click names the program
    # from it).
    sys.modules["__main__"] = celery.__main__
    celery.__main__.main()
    sys.exit(0)


def serve() -> None:
    """The launcher's loop: fork on request; reap a child when its handle asks."""
    for name in PRELOADED:
        importlib.import_module(name)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        request = json.loads(line)
        answer: dict[str, Any]
        if "start" in request:
            answers.flush()
            start = request["start"]
            ready, told = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready)
                _child(start["argv"], start["env"], start["cwd"], start["log"], told)
            os.close(told)
            os.read(ready, 1)  # its session is its own: a killpg now reaches it
            os.close(ready)
            answer = {"pid": pid}
        else:
            # Asked until it has ended, never after: its handle keeps the code.
            reaped, status = os.waitpid(request["poll"], os.WNOHANG)
            answer = {"status": os.waitstatus_to_exitcode(status) if reaped else None}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()


class Launched:
    """A forked Celery process, as much of :class:`subprocess.Popen` as the tests use."""

    def __init__(
        self, launcher: Launcher, parent: subprocess.Popen[bytes], pid: int, args: list[str]
    ) -> None:
        self._launcher = launcher
        #: The launcher process that forked it, the only one that can tell its end.
        self._parent = parent
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            answer, _ = self._launcher.ask({"poll": self.pid}, self._parent)
            self.returncode = answer["status"]
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
        become: the same Python, the same start-up environment, and no pool that patches
        the standard library before anything is imported (gevent, eventlet)."""
        return (
            os.environ.get("BRIDGE_TEST_FORK", "1") != "0"
            and argv[:3] == [sys.executable, "-m", "celery"]
            and not any("gevent" in arg or "eventlet" in arg for arg in argv)
            and all(environ.get(key) == self._environ.get(key) for key in READ_AT_IMPORT)
        )

    def ask(
        self, request: dict[str, Any], parent: subprocess.Popen[bytes] | None = None
    ) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
        """The launcher's answer to ``request``, and the launcher process that gave it: that
        process (started now if there is none), or ``parent``, which forked the child asked
        about; a new launcher would not know that child."""
        with self._lock:
            if parent is not None and (parent is not self._process or parent.poll() is not None):
                raise RuntimeError(f"the launcher that forked {request} has exited")
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.launcher"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=self._environ,
                    cwd=Path(__file__).resolve().parent.parent,
                    start_new_session=True,  # out of reach of the terminal's Ctrl-C
                )
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the launcher exited {process.poll()} at {request}")
        answer: dict[str, Any] = json.loads(line)
        return answer, process

    def start(self, argv: list[str], environ: dict[str, str], cwd: Path, log: IO[str]) -> Launched:
        """Fork ``argv`` (``python -m celery ...``) with its output appended to ``log``."""
        log.flush()
        import celery.__main__

        program = celery.__main__.__file__
        start = {"argv": [program, *argv[3:]], "env": environ, "cwd": str(cwd), "log": log.name}
        answer, parent = self.ask({"start": start})
        return Launched(self, parent, answer["pid"], argv)


if __name__ == "__main__":
    serve()
