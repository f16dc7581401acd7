"""One reading of the database shared by the requests that come close together.

The totals of a million schedules take a scan of the table (0.6 to 0.8 s); a
Prometheus server or two scraping ``/metrics`` and a few people on the
dashboard's overview would each start one. A :class:`SharedReading` reads at
most every ``fresh_for`` seconds and hands every request in between the same
result, so the database does the work once however many ask.

The request that finds the reading past ``fresh_for`` reads anew and waits
for it, so a lone scraper always gets a reading made for its scrape. The
requests that come while it reads are answered at once with the reading
before (when it is within ``stale_for``), rather than queueing behind the
scan: under twenty clients, one request in each ``fresh_for`` waits for the
database, not all those that arrive during the scan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: How long one reading serves the requests that follow it, in seconds.
FRESH_FOR = 2.0
#: How old a reading may be and still answer a request while a new one is being read.
STALE_FOR = 30.0


class SharedReading(Generic[T]):
    """``read()`` at most every ``fresh_for`` seconds; callers in between get its result,
    and callers that come while it is read anew get the one before, within
    ``stale_for`` (see the module)."""

    def __init__(
        self,
        read: Callable[[], T],
        fresh_for: float = FRESH_FOR,
        stale_for: float = STALE_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._fresh_for = fresh_for
        self._stale_for = max(stale_for, fresh_for)
        self._clock = clock
        #: Guards the reading and its time; held for an instant.
        self._lock = threading.Lock()
        #: Held while a reading is made.
        self._reading = threading.Lock()
        self._read_at = 0.0
        self._value: T | None = None

    def get(self) -> T:
        with self._lock:
            value, age = self._value, self._clock() - self._read_at
            if value is not None and age < self._fresh_for:
                return value
            stale = value if value is not None and age < self._stale_for else None
        # The first caller reads; while it does, a caller with a reading it may hand out
        # answers with that, and one without waits for the new reading.
        if stale is None:
            self._reading.acquire()
        elif not self._reading.acquire(blocking=False):
            return stale
        try:
            with self._lock:  # made meanwhile, by the caller that read before this one
                if self._value is not None and self._clock() - self._read_at < self._fresh_for:
                    return self._value
            value = self._read()
            with self._lock:
                self._value, self._read_at = value, self._clock()
            return value
        finally:
            self._reading.release()
