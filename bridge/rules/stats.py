"""Figures of a schedule's runs: percentiles and a success rate, from plain numbers.

Computed in Python rather than in SQL so that SQLite and PostgreSQL give
the same figures, from a bounded sample of the latest runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bridge.rules.kinds import RunStatus

#: The statuses a success rate counts: a run that was revoked neither succeeded nor failed.
RATED = (RunStatus.SUCCESS, RunStatus.FAILURE, RunStatus.LOST)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ``values`` by the nearest-rank method (None: no values).

    Nearest rank always answers with a value that occurred, so a p95 of
    durations is a duration some run really took.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """The median, the 95th percentile and the largest of ``values``, and how many."""
    return {
        "count": float(len(values)),
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values) if values else None,
    }


def success_rate(counts: Mapping[str, int]) -> float | None:
    """SUCCESS among the runs that ended SUCCESS, FAILURE or LOST; None when none did."""
    rated = sum(counts.get(status, 0) for status in _RATED_VALUES)
    if not rated:
        return None
    return counts.get(_SUCCESS, 0) / rated


# The statuses' texts, read once: an enum member's ``value`` is a property, and the
# dashboard's list rates 100 schedules a page.
_RATED_VALUES = tuple(status.value for status in RATED)
_SUCCESS = RunStatus.SUCCESS.value
