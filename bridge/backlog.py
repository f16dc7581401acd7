"""Record writes the database refused, kept in order and written once it is back.

A worker must not lose the outcome of a run because PostgreSQL restarted
while the task ran. The recorder retries a refused write a few times in the
task's own thread; if the database is still away, the write goes here. A
daemon thread writes the held writes in the order they were made, as soon as
the database answers again. While anything is held, later writes queue behind
it, so a run's ``SUCCESS`` is never written before its ``STARTED``.

Held writes live in the worker process's memory: a worker killed during the
outage loses them (its runs are then marked ``LOST`` by beat), and a clean
shutdown waits a few seconds for the database before giving up, with a log
line saying how many were lost. Beyond :data:`LIMIT` held writes the oldest
are dropped, so an outage cannot exhaust a worker's memory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import InterfaceError, OperationalError

logger = logging.getLogger("bridge.recorder")

#: The errors that mean "the database is not answering": worth holding a write for.
#: (Deadlocks are operational errors too, and pass.) Anything else, a value the
#: database refuses for instance, would fail again and block the writes behind it.
UNREACHABLE = (OperationalError, InterfaceError)
#: The most writes one worker process holds.
LIMIT = 10_000
#: The longest the writer waits between attempts while the database is away.
MAX_WAIT = 5.0


@dataclass(frozen=True)
class Held:
    """One write: what it records (for log lines) and how to make it."""

    what: str
    write: Callable[[], None]


class Backlog:
    """The held writes of one process, and the thread that writes them."""

    def __init__(self) -> None:
        self._start_afresh()
        # A forked pool child starts empty: its parent writes what it holds.
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        self._writes: deque[Held] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._written = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._writes)

    def hold(self, held: Held) -> None:
        """Keep ``held`` behind the writes already held, and make sure they get written."""
        with self._lock:
            if not self._writes:
                logger.error(
                    "bridge: database unreachable; holding run records until it is back (%s)",
                    held.what,
                )
            if len(self._writes) >= LIMIT:
                dropped = self._writes.popleft()
                logger.error("bridge: over %d held records; dropped %s", LIMIT, dropped.what)
            self._writes.append(held)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="bridge-backlog", daemon=True
                )
                self._thread.start()
            self._wake.notify_all()

    def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the held writes to be written (at shutdown)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._writes and time.monotonic() < deadline:
                self._wake.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            if self._writes:
                logger.error(
                    "bridge: %d run record(s) could not be written and are lost",
                    len(self._writes),
                )

    def _run(self) -> None:
        wait = 0.0
        while True:
            with self._lock:
                while not self._writes:
                    self._wake.wait()
                head = self._writes[0]
            time.sleep(wait)
            try:
                head.write()
            except UNREACHABLE:
                wait = min(MAX_WAIT, max(0.5, wait * 2))
                continue
            except Exception:
                # A write that fails for another reason would block the rest forever.
                logger.exception("bridge: writing the held record of %s failed", head.what)
            else:
                self._written += 1
            wait = 0.0
            with self._lock:
                if self._writes and self._writes[0] is head:
                    self._writes.popleft()
                if not self._writes:
                    logger.warning("bridge: database back; wrote %d held record(s)", self._written)
                    self._written = 0
                    self._wake.notify_all()
