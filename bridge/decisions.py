"""Decisions of the fire sequence, as pure functions of a schedule's state and ``now``.

The scheduler reads the row and its open runs, asks this module what to do,
and writes the answer. Nothing here touches the database or reads the clock,
so every rule is tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .models import Trigger
from .policy import Overlap
from .timers import Timer


@dataclass(frozen=True)
class OpenRun:
    """A run of the schedule that has not reached a final status."""

    id: str
    status: str
    plan_time: datetime | None
    updated_at: datetime
    trigger: str


@dataclass(frozen=True)
class Fire:
    """Start a run for the occurrence at ``plan_time``, then move on to ``next_run``."""

    plan_time: datetime
    trigger: Trigger
    next_run: datetime | None


@dataclass(frozen=True)
class Skip:
    """Do not start the occurrence at ``plan_time``; move on to ``next_run``."""

    plan_time: datetime
    reason: str
    next_run: datetime | None


Decision = Fire | Skip


def split_stale(
    runs: Iterable[OpenRun], now: datetime, stale_after: timedelta
) -> tuple[list[OpenRun], list[OpenRun]]:
    """Split open runs into those still expected to finish and those presumed lost.

    A run whose status has not changed for ``stale_after`` has outlived any
    worker that could finish it; left alone it would block its schedule forever.
    """
    live: list[OpenRun] = []
    stale: list[OpenRun] = []
    for run in runs:
        (stale if now - run.updated_at > stale_after else live).append(run)
    return live, stale


def due_occurrence(timer: Timer, nextrun: datetime, now: datetime) -> tuple[datetime, Trigger]:
    """The occurrence to act on for a row due at ``nextrun``, and why it runs.

    Catch-up ``latest``: when beat comes to a row late, only the most recent
    occurrence that has passed runs, marked ``catchup`` if it is not the one
    the row was waiting for; the ones in between are not run.
    """
    latest = timer.latest_at_or_before(now)
    if latest is None or latest <= nextrun:
        return nextrun, Trigger.SCHEDULED
    return latest, Trigger.CATCHUP


def decide(
    timer: Timer,
    nextrun: datetime,
    now: datetime,
    live_runs: list[OpenRun],
    overlap: Overlap,
) -> Decision:
    """What to do with a row that is due: fire its occurrence or skip it."""
    plan_time, trigger = due_occurrence(timer, nextrun, now)
    next_run = timer.next_after(max(plan_time, now))
    if live_runs and overlap is Overlap.SKIP:
        blocking = live_runs[0]
        return Skip(
            plan_time=plan_time,
            reason=f"previous run {blocking.id} is still {blocking.status}",
            next_run=next_run,
        )
    return Fire(plan_time=plan_time, trigger=trigger, next_run=next_run)


def wait_seconds(next_due: datetime | None, now: datetime, ceiling: float) -> float:
    """How long beat may sleep: until the earliest ``nextrun``, at most ``ceiling``."""
    if next_due is None:
        return ceiling
    return max(0.0, min(ceiling, (next_due - now).total_seconds()))
