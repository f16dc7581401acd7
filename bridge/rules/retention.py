"""Retention's arithmetic: which limits a schedule has, and whether its runs need a look.

Pruning looks at a schedule's runs one by one only when a grouped count of
them says some would go, so that the look is paid by the few schedules
with something to delete, not by every schedule at every pass. The count
is of its final runs by status: how many, and how many are older than its
``keep_days``. The latest run of each final status is never pruned, so an
old run can go only if its status has a newer one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: How far beyond its ``keep_runs`` a schedule's final runs may grow before it gets a look
#: (half its ``keep_runs`` when that is less): a look deletes what is beyond, so there is one
#: per this many runs ended, not one per run, and the excess stays well below a batch.
COUNT_SLACK = 50


@dataclass(frozen=True)
class Limits:
    """Final runs kept by count and by age in days (0: no limit)."""

    keep_runs: int
    keep_days: int

    def of(self, keep_runs: int | None, keep_days: int | None) -> Limits:
        """A schedule's limits: its own values, where it has them, over these (the app's)."""
        return Limits(
            self.keep_runs if keep_runs is None else keep_runs,
            self.keep_days if keep_days is None else keep_days,
        )

    @property
    def any(self) -> bool:
        return bool(self.keep_runs or self.keep_days)


@dataclass(frozen=True)
class StatusCount:
    """A schedule's final runs of one status: how many, and how many are older than its
    ``keep_days`` (0 when it has no age limit)."""

    runs: int
    old: int


def needs_look(counts: Iterable[StatusCount], limits: Limits) -> bool:
    """Whether a schedule's final runs, counted by status, hold some that pruning deletes:
    more than its ``keep_runs`` and their slack, or an old one whose status has another,
    newer run (the latest of a status is kept)."""
    counts = list(counts)
    total = sum(count.runs for count in counts)
    slack = min(COUNT_SLACK, limits.keep_runs // 2)
    if limits.keep_runs and total > limits.keep_runs + slack:
        return True
    return bool(limits.keep_days) and any(c.old and c.runs >= 2 for c in counts)


@dataclass(frozen=True)
class FinalRuns:
    """A schedule's final runs counted by status, with its limits (its own over the app's)."""

    id: int
    limits: Limits
    counts: tuple[StatusCount, ...] = ()


def to_look_at(schedules: Iterable[FinalRuns]) -> list[FinalRuns]:
    """Those of the schedules, counted, whose final runs hold some that pruning deletes."""
    return [s for s in schedules if s.limits.any and needs_look(s.counts, s.limits)]


def slice_of(schedules: int, passes: int) -> int:
    """Schedules to count at each pass so that ``passes`` passes count them all."""
    return max(1, math.ceil(schedules / max(1, passes)))
