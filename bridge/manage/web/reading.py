"""One reading of the database shared by the requests that come close together.

The totals of a million schedules take a scan of the table; a Prometheus
server or two scraping ``/metrics`` and a few people on the dashboard's
overview would each start one. A :class:`SharedReading` reads at most every
``fresh_for`` seconds and hands every request in between the same result,
so the database does the work once however many ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: How long one reading serves the requests that follow it, in seconds.
FRESH_FOR = 2.0


class SharedReading(Generic[T]):
    """``read()`` at most every ``fresh_for`` seconds; callers in between get its result.

    A caller that finds the reading stale reads again while the others wait
    for it, rather than each reading at once."""

    def __init__(self, read: Callable[[], T], fresh_for: float = FRESH_FOR) -> None:
        self._read = read
        self._fresh_for = fresh_for
        self._lock = threading.Lock()
        self._read_at = -fresh_for
        self._value: T | None = None

    def get(self) -> T:
        with self._lock:
            if self._value is None or time.monotonic() - self._read_at >= self._fresh_for:
                self._value = self._read()
                self._read_at = time.monotonic()
            return self._value
