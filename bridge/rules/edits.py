"""What a change to a schedule does to where it stands: which edits move its cursor,
what a resume clears, which columns beat moves itself.

Every way of changing a schedule (``edit``, ``resume``, bulk import,
``beat_schedule`` sync, and beat advancing a row that was edited while it
fired it) applies these rules, so they agree on when a schedule starts
afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.rules.values import column_of

#: The columns a schedule's occurrences are computed from: a new value in any
#: of them gives the schedule a new first occurrence, counted from now. (The
#: anchor changes with the timer, or when an import gives one.)
TIMING_COLUMNS = ("timer", "timezone", "anchor", "start_at", "end_at")

#: Columns beat moves as it runs the schedule (a countdown): a definition that
#: is written again (sync at every beat start, an import of the same file)
#: does not reset them unless something else changed.
MOVING_COLUMNS = ("remaining",)

#: What a schedule forgets when it is resumed or its definition replaced: it
#: is not broken, has no failure streak, is not failing, and nothing is held or owed.
FRESH_STATE: Mapping[str, Any] = {
    "broken": False,
    "failure_streak": 0,
    "failing_since": None,
    "success_streak": 0,
    "held": None,
    "retry_plan": None,
    "retry_attempt": None,
    "retry_at": None,
}


def retimes(current: Any, wanted: Mapping[str, Any]) -> bool:
    """Whether writing ``wanted`` over ``current`` moves the schedule's cursor.

    Only the timing columns ``wanted`` names are compared: a definition that
    says nothing of the anchor keeps the schedule's.
    """
    return any(key in wanted and wanted[key] != column_of(current, key) for key in TIMING_COLUMNS)
