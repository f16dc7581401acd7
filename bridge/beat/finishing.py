"""Phases 5 and 6 of the fire sequence, mark sent and advance, and where they run.

A batch of a burst or a backlog is finished while the next one is claimed,
decided, recorded and published (see :mod:`bridge.beat.fire`). On a thread
the two would share the one core Python lets a process use, and finishing
is about a third of what a burst costs beat's CPU (docs/performance.md):
the next batch would wait for it. So on Linux a process of beat's own
finishes. It is forked when beat starts, before beat opens its connections
or starts its threads, and shares nothing with beat but the database (its
own connections to it): every write it makes checks
the mark, as beat's own writes do. It dies with beat
(``PR_SET_PDEATHSIG``), so a beat killed while a batch finishes leaves
what a killed thread would: a transaction committed or not, and rows that
are resumed from their records. Signals are beat's to handle: the process
ignores SIGINT and SIGTERM, finishes the batch in hand, and goes when beat
closes it. Elsewhere than on Linux, in a beat run from a thread other than
the main one, with ``bridge_finishing_process`` false (the process costs
about 40 MB), or once the process has died, a thread finishes.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from bridge.clock import utcnow
from bridge.service.fire import Advance, Advanced, Firing
from bridge.storage.beat import BeatStore, Sent
from bridge.storage.database import DatabaseError

logger = logging.getLogger("bridge.scheduler")

#: ``prctl`` option: the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


class Fired(NamedTuple):
    """A run published: what marking it sent needs, and what beat's log says of it."""

    schedule_id: int
    schedule: str
    plan_time: datetime
    attempt: int
    run_id: str
    trigger: str
    expires_at: datetime | None


@dataclass(frozen=True)
class Finish:
    """One batch to finish: its runs published, its rows to advance, and their mark."""

    instance: str
    marked: datetime
    #: Every row of the batch, the advanced and the others: their marks are renewed.
    rows: list[int]
    fired: list[Fired]
    advances: list[Advance]
    #: The batch's rows' names, for the log.
    names: dict[int, str]
    #: When the batch was decided: the advance counts from it.
    now: datetime
    lease_seconds: float


@dataclass(frozen=True)
class Finished:
    """What finishing a batch found."""

    #: Rows another instance took over before their marks could be renewed.
    taken: list[int]
    advanced: Advanced


def renewal_due(marked: datetime, lease_seconds: float, now: datetime) -> bool:
    """Whether half a lease has passed since a batch's marks were set."""
    return now - marked >= timedelta(seconds=lease_seconds / 2)


def renew_marks(
    store: BeatStore,
    instance: str,
    rows: list[int],
    marked: datetime,
    lease_seconds: float,
    now: datetime,
) -> tuple[list[int], datetime]:
    """Renew a batch's marks once half a lease has passed since they were set (by
    ``now``, the caller's clock); the rows another instance took over meanwhile, and the
    batch's mark from now on.

    A long batch (a slow broker, many rows) must not let its last rows'
    leases expire, or another instance would fire them too. A row taken
    over fails the guard of the next write to it.
    """
    if not renewal_due(marked, lease_seconds, now):
        return [], marked
    held = store.renew(instance, rows, now)
    return [row for row in rows if row not in held], now


def finish(firing: Firing, job: Finish, clock: Callable[[], datetime] = utcnow) -> Finished:
    """Phases 5 and 6: mark the batch's runs ``SENT``, then advance and unmark its rows;
    each done is logged here, which takes the log lines' CPU off beat's thread too.

    ``clock`` is read when each step happens, not when the batch was decided: the
    finisher runs behind beat, and whether a mark needs renewing depends on how long
    the batch has taken by then.
    """
    store = firing.store
    store.mark_sent([Sent(f.schedule_id, f.run_id, f.expires_at) for f in job.fired], clock())
    for fired in job.fired:
        attempt = f" attempt {fired.attempt}" if fired.attempt > 1 else ""
        logger.info(
            "bridge: fired %r plan %s%s task id %s (%s)",
            fired.schedule,
            fired.plan_time.isoformat(),
            attempt,
            fired.run_id,
            fired.trigger,
        )
    taken, marked = renew_marks(
        store, job.instance, job.rows, job.marked, job.lease_seconds, clock()
    )
    for row_id in taken:
        logger.warning("bridge: lost the mark on %r to another instance", job.names[row_id])
    advanced = firing.advance(job.advances, job.instance, marked, job.now)
    for row_id in advanced.lost:
        logger.warning("bridge: lost the mark on %r before advancing it", job.names[row_id])
    for row_id, note in advanced.finished.items():
        logger.info("bridge: schedule %r %s", job.names[row_id], note)
    return Finished(taken, advanced)


class FinishingFailed(Exception):
    """What stopped the finishing process's batch, as text: an exception that cannot be
    pickled back to beat would break the process's pool."""


class Finisher:
    """Finishes batches one at a time off beat's thread: in a process of its own on Linux,
    from beat's main thread (unless ``in_process`` is false), else on a thread (see the
    module docstring)."""

    def __init__(self, firing: Firing, in_process: bool = True) -> None:
        self.firing = firing
        self.in_process = (
            in_process
            and sys.platform == "linux"
            # PR_SET_PDEATHSIG follows the thread that forks: beat embedded in a thread
            # of another program would take its finishing process down with that thread.
            and threading.current_thread() is threading.main_thread()
        )
        self._executor = self._start()

    def submit(self, job: Finish) -> Future[Finished]:
        """Finish ``job``. If the finishing process died (its batch has failed, to be
        resumed from its records), a thread finishes from then on: a process forked
        now would copy beat's threads' state and connections, which the one forked at
        start does not."""
        try:
            return self._run(job)
        except BrokenProcessPool as exc:
            logger.error(
                "bridge: the finishing process is gone (%s); a thread finishes batches from now on",
                exc,
            )
            self.in_process = False
            self._executor = self._start()
            return self._run(job)

    def close(self) -> None:
        """Let the finishing process or thread go once the batch in hand is done."""
        self._executor.shutdown(wait=False)

    def _run(self, job: Finish) -> Future[Finished]:
        if self.in_process:
            return self._executor.submit(_finish_here, job)
        return self._executor.submit(finish, self.firing, job)

    def _start(self) -> Executor:
        if not self.in_process:
            return ThreadPoolExecutor(1, thread_name_prefix="bridge-finish")
        executor = ProcessPoolExecutor(
            1,
            # Forked, not spawned: a spawned process would import the program that runs
            # beat again, and the store (the database's URL) comes without pickling.
            mp_context=multiprocessing.get_context("fork"),
            initializer=_adopt,
            initargs=(self.firing, os.getpid()),
        )
        # Fork now, while beat starts, rather than in the middle of a burst. What beat
        # holds by then (its modules, mostly) is left out of its collections from now on:
        # a collection writes to every object it visits, and each page written to is a
        # page copied, kept by the finishing process as it was (some 60 MB otherwise).
        gc.freeze()
        executor.submit(os.getpid)
        return executor


#: The finishing process's fire sequence: beat's own, forked (its engine reconnects in the
#: child).
_firing: Firing | None = None


def _adopt(firing: Firing, beat: int) -> None:
    """The finishing process's start: die with beat, leave signals to beat, take its
    fire sequence's store."""
    global _firing
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != beat:  # beat died before the signal was armed
        os._exit(1)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    # What beat's log shows of the lines this process writes (Celery's ``%(processName)s``).
    multiprocessing.current_process().name = "bridge-finish"
    _firing = firing


def _finish_here(job: Finish) -> Finished:
    """:func:`finish` in the finishing process; what stops it reaches beat as a database
    error (which beat treats as an outage) or as :class:`FinishingFailed`."""
    assert _firing is not None, "run in the finishing process only"
    try:
        return finish(_firing, job)
    except DatabaseError:
        raise
    except Exception as exc:
        raise FinishingFailed(f"{type(exc).__name__}: {exc}") from None
