"""A beat scheduler that kills itself at one point of the fire sequence (tests only).

``celery beat -S tests.crashing:CrashingScheduler`` with ``BRIDGE_TEST_CRASH_AT``
set to one of :data:`POINTS` behaves like the bridge's scheduler until its
first fire reaches that point, then sends itself SIGKILL: no handler, no
``finally``, no clean-up, as when the machine loses power. The production
scheduler carries no such hook; this subclass wraps its steps from outside.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from typing import Any

from bridge.celery.scheduler import DatabaseScheduler
from bridge.service.fire import Firing
from bridge.storage.beat import BeatStore

#: Where the crash happens, in fire-sequence order.
POINTS = (
    "mark",  # the due row is marked, nothing recorded
    "record",  # the run is recorded PENDING, not published
    "publish",  # the run is published, still recorded PENDING
    "sent",  # the run is recorded SENT, the row not advanced
    "advance",  # the row is advanced and unmarked
)


def _die() -> None:
    """SIGKILL beat, from beat or from its finishing process (which dies with it)."""
    os.kill(_beat, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _then_die(step: Callable[..., Any], when: Callable[[Any], bool] = bool) -> Callable[..., Any]:
    """``step`` followed by death, once it returns a result ``when`` accepts."""

    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        if when(result):
            _die()
        return result

    return wrapper


def _die_before(step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _die()
        return step(*args, **kwargs)

    return wrapper


#: Beat's process id, once the scheduler is built.
_beat = os.getpid()


class CrashingScheduler(DatabaseScheduler):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The classes of the store and of the advance, before the scheduler starts its
        # finishing process: that process is forked from beat, and marks sent and
        # advances with the same ones.
        global _beat
        _beat = os.getpid()
        point = os.environ["BRIDGE_TEST_CRASH_AT"]
        store = BeatStore
        if point == "mark":
            store.claim_due = _then_die(store.claim_due, when=lambda claimed: claimed.rows)
        elif point == "record":
            store.record_runs = _then_die(store.record_runs)
        elif point == "publish":
            store.mark_sent = _die_before(store.mark_sent)
        elif point == "sent":
            store.mark_sent = _then_die(store.mark_sent, when=lambda _: True)
        elif point == "advance":
            Firing.advance = _then_die(Firing.advance, when=lambda _: True)
        else:
            raise ValueError(f"BRIDGE_TEST_CRASH_AT={point!r}: expected one of {POINTS}")
        super().__init__(*args, **kwargs)
