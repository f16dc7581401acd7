"""The unit tests' clock, movable: ``BRIDGE_TEST_CLOCK`` runs the whole session at
another instant, so a test that compares a fixed instant of its own with the real
clock fails on any day, not only on the day the two meet.

``make test`` runs the unit tests once more with the clock a year ahead and once
two seconds before a change of daylight-saving time. Values:

- ``+DAYS``: that many days after the real now (``+366``);
- ``dst:ZONE``: two seconds before ZONE's next change of UTC offset after the real now;
- an ISO 8601 instant with its offset (``2027-03-28T00:59:58+00:00``).

The clock keeps ticking from there (``time.time``, ``datetime.now`` and the like are
moved; ``time.monotonic`` and ``time.perf_counter`` are not, so timeouts still hold).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.clock import next_offset_change


def moved_clock(value: str, now: datetime) -> datetime:
    """The instant ``BRIDGE_TEST_CLOCK``'s ``value`` names, read at the real ``now``."""
    if value.startswith("+"):
        return now + timedelta(days=float(value[1:]))
    if value.startswith("dst:"):
        return next_offset_change(ZoneInfo(value[4:]), now) - timedelta(seconds=2)
    instant = datetime.fromisoformat(value)
    if instant.tzinfo is None:
        raise ValueError(f"BRIDGE_TEST_CLOCK: {value!r} has no UTC offset")
    return instant


_travel: Any = None


def pytest_configure(config: pytest.Config) -> None:
    """Move the clock before the test modules are imported, so that what they read at
    import is moved too."""
    global _travel
    value = os.environ.get("BRIDGE_TEST_CLOCK")
    if not value:
        return
    import time_machine

    _travel = time_machine.travel(moved_clock(value, datetime.now(UTC)), tick=True)
    _travel.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _travel is not None:
        _travel.stop()


def pytest_report_header(config: pytest.Config) -> str | None:
    value = os.environ.get("BRIDGE_TEST_CLOCK")
    return f"clock moved: BRIDGE_TEST_CLOCK={value}, now {datetime.now(UTC)}" if value else None
