"""The record writes of one worker process, queued and written in batches by one thread.

Writing each status change in its own transaction, in the thread that runs
the task, would cost every run several round trips to the database and
would stall the worker's consumer on the ``RECEIVED`` write. Instead every
write joins one queue per process, and a daemon thread writes what has
gathered over :data:`GATHER` seconds in one transaction: under load a batch
holds the writes of many runs. The writes of one run are written in the
order they were made. Only the compare-and-set start of a
:class:`bridge.task.BridgeTask` waits for its answer (:meth:`Backlog.ask`):
it goes at once, with the earlier writes of its own run, ahead of the rest.

The same queue rides out a database outage. A batch the database refuses
stays at the head of the queue and is tried again, a few times quickly and
then with a backoff, until it goes through; later writes queue behind it, so
a run's ``SUCCESS`` is never written before its ``STARTED``. Writes live in the
worker process's memory: a worker killed during an outage loses them (its
runs are then marked ``LOST`` by beat), and a clean shutdown waits a few
seconds for the database before giving up, with a log line saying how many
were lost. Beyond :data:`LIMIT` queued writes the oldest are dropped, so an
outage cannot exhaust a worker's memory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from bridge.rules.records import Answer
from bridge.storage.database import UNREACHABLE, DatabaseError, error_reason, is_conflict

logger = logging.getLogger("bridge.recorder")

#: The most writes one worker process holds.
LIMIT = 10_000
#: Attempts at a batch the database rolls back over a conflict (a deadlock).
CONFLICT_RETRIES = 5
#: The most writes one transaction takes.
BATCH = 500
#: How long the writer lets writes gather before it writes them, unless one is waited
#: for: a busy worker fills a batch, and a record is at most this late.
GATHER = 0.05
#: The longest the writer waits between attempts while the database is away.
MAX_WAIT = 5.0


class Reply:
    """The answer to a write whose maker waits for it: True, False, or None for unknown."""

    def __init__(self) -> None:
        self._given = threading.Event()
        self._value: bool | None = None

    def give(self, value: bool | None) -> None:
        if not self._given.is_set():
            self._value = value
            self._given.set()

    def wait(self, timeout: float) -> bool | None:
        self._given.wait(timeout)
        return self._value


class Write(Protocol):
    """What the backlog needs of a write: whose it is, words for log lines, maybe a waiting maker.

    Writes with one ``key`` are written in the order they were made; a write
    whose maker waits may go ahead of the writes of other keys.
    """

    @property
    def key(self) -> str: ...

    @property
    def what(self) -> str: ...

    @property
    def reply(self) -> Answer | None: ...


W = TypeVar("W", bound=Write)


class Backlog(Generic[W]):
    """The queued writes of one process, and the thread that writes them.

    ``apply`` writes a batch in one transaction and gives the replies of the
    writes that wait for one once it has committed; ``retries`` is how often
    a refused batch is tried again quickly before the outage is logged.
    """

    def __init__(self, apply: Callable[[Sequence[W]], None], retries: int) -> None:
        self._apply = apply
        self._retries = retries
        self._start_afresh()
        # A forked pool child starts empty: its parent writes what it holds.
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        self._writes: deque[W] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        #: When the oldest queued write was made, on the monotonic clock.
        self._since = 0.0
        #: The queued writes whose makers wait for their reply.
        self._asked: list[W] = []
        #: Whether the process waits for the queue to empty (it is stopping).
        self._draining = False
        #: The batch being written, out of the queue until it is done.
        self._writing: list[W] = []
        #: Whether an outage was logged, and the writes held through it since written.
        self._holding = False
        self._written = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._writes) + len(self._writing)

    def add(self, write: W) -> None:
        """Queue ``write`` behind the writes before it; the thread writes it soon."""
        with self._lock:
            self._queue(write)

    def ask(self, write: W, timeout: float) -> bool | None:
        """Queue ``write``, have it written at once and wait for its reply.

        None when the database cannot answer now: the write stays queued
        until it can, and its maker does not wait for that.
        """
        assert write.reply is not None
        with self._lock:
            self._queue(write)
            if self._holding:
                write.reply.give(None)
            else:
                self._asked.append(write)
                self._wake.notify_all()
        return write.reply.wait(timeout)

    def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the queued writes to be written (at shutdown)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._draining = True
            self._wake.notify_all()
            while (self._writes or self._writing) and time.monotonic() < deadline:
                self._wake.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            self._draining = False
            left = len(self._writes) + len(self._writing)
            if left:
                logger.error("bridge: %d run record(s) could not be written and are lost", left)

    def _queue(self, write: W) -> None:
        """Append ``write`` (lock held), dropping the oldest beyond :data:`LIMIT`."""
        if len(self._writes) >= LIMIT:
            dropped = self._writes.popleft()
            logger.error("bridge: over %d held records; dropped %s", LIMIT, dropped.what)
        if not self._writes:
            self._since = time.monotonic()
        self._writes.append(write)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="bridge-backlog", daemon=True)
            self._thread.start()
        if len(self._writes) in (1, BATCH):
            self._wake.notify_all()  # the writer waits for a first write, or for a full batch

    def _run(self) -> None:
        failures = 0
        while True:
            with self._lock:
                while not self._writes:
                    self._wake.wait()
                self._wake.wait_for(
                    lambda: self._asked or self._draining or len(self._writes) >= BATCH,
                    self._since + GATHER - time.monotonic(),
                )
                batch = self._writing = self._take()
            try:
                self._write(batch)
            except UNREACHABLE as exc:
                failures += 1
                self._refused(exc, failures)
                continue
            failures = 0
            with self._lock:
                self._writing = []
                if self._holding:
                    self._written += len(batch)
                    if not self._writes:
                        logger.warning(
                            "bridge: database back; wrote %d held record(s)", self._written
                        )
                        self._holding, self._written = False, 0
                if not self._writes:
                    self._wake.notify_all()

    def _take(self) -> list[W]:
        """The next batch (lock held): what has gathered, or what a waiting maker needs.

        Writes gather for up to :data:`GATHER` seconds. A write whose maker
        waits goes at once, with the writes of its key made before it; the
        others keep gathering, their time counted from the oldest of them.
        """
        due = self._since + GATHER <= time.monotonic()
        if due or self._draining or len(self._writes) >= BATCH or not self._asked:
            batch = [self._writes.popleft() for _ in range(min(BATCH, len(self._writes)))]
        else:
            keys = {write.key for write in self._asked}
            batch = [write for write in self._writes if write.key in keys]
            self._writes = deque(write for write in self._writes if write.key not in keys)
        taken = {id(write) for write in batch}
        self._asked = [write for write in self._asked if id(write) not in taken]
        return batch

    def _write(self, batch: list[W]) -> None:
        """Write ``batch``; if the database refuses one of its writes, the others alone."""
        try:
            self._apply_resolving_conflicts(batch)
        except UNREACHABLE:
            raise
        except Exception:
            if len(batch) > 1:
                for write in batch:
                    self._write([write])
                    with self._lock:
                        self._writing.remove(write)
                return
            # Recording must never fail the task it records, and a write
            # the database refuses for its content will not get better.
            logger.exception("bridge: recording %s failed", batch[0].what)
            self._answer(batch, None)

    def _apply_resolving_conflicts(self, batch: list[W]) -> None:
        """Write ``batch``, again at once when the database rolled it back over a conflict.

        A deadlock or serialization failure says nothing of the database's
        health: treated as an outage, it would answer "no answer" to a
        delivery asking whether its run is new, which then runs its body
        unchecked.
        """
        for attempt in range(CONFLICT_RETRIES):
            try:
                self._apply(batch)
                return
            except DatabaseError as exc:
                if not is_conflict(exc) or attempt == CONFLICT_RETRIES - 1:
                    raise
                logger.debug("bridge: recording %s: %s; again", batch[0].what, error_reason(exc))
                time.sleep(0.01 * 2**attempt)

    def _refused(self, exc: BaseException, failures: int) -> None:
        """Put the writes the database did not take back at the head of the queue, and wait."""
        with self._lock:
            batch, self._writing = self._writing, []
            if not self._writes:
                self._since = time.monotonic()
            self._writes.extendleft(reversed(batch))
            if failures > self._retries and not self._holding:
                self._holding = True
                logger.warning("bridge: could not record %s: %s", batch[0].what, error_reason(exc))
                logger.error(
                    "bridge: database unreachable; holding run records until it is back (%s)",
                    batch[0].what,
                )
        self._answer(batch, None)  # their makers go on; the writes wait for the database
        if failures <= self._retries:
            time.sleep(min(2.0, 0.1 * 2**failures))
        else:
            time.sleep(min(MAX_WAIT, 0.5 * 2 ** (failures - self._retries - 1)))

    @staticmethod
    def _answer(batch: Sequence[W], value: bool | None) -> None:
        for write in batch:
            if write.reply is not None:
                write.reply.give(value)
