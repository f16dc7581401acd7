"""Tests of bridge.rules.edits: which writes move a schedule's cursor, what a resume clears.

Every way of changing a schedule (edit, resume, import, ``beat_schedule``
sync, beat advancing an edited row) asks :func:`retimes` whether the
schedule starts afresh and writes :data:`FRESH_STATE` when it does, so these
are the answers a user sees as a new ``next_occurrence`` or a cleared
``BROKEN``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.decisions import Send, decide
from bridge.rules.edits import FRESH_STATE, MOVING_COLUMNS, TIMING_COLUMNS, retimes
from bridge.rules.fire import state_of
from bridge.rules.kinds import Trigger
from bridge.rules.policy import Policies
from bridge.storage.models import PeriodicTask
from tests.unit.rows import T0, Row

HOUR = timedelta(hours=1)

#: A schedule as stored: its timing columns and some that are not.
CURRENT: dict[str, Any] = {
    "timer": "0 9 * * *",
    "timezone": "Europe/Paris",
    "anchor": T0,
    "start_at": None,
    "end_at": T0 + 100 * HOUR,
    "task": "proj.tasks.report",
    "args": "[]",
    "kwargs": "{}",
    "options": "{}",
    "overlap": "skip",
    "remaining": 5,
    "note": None,
}

#: A different value for each column, of the same kind.
OTHER: dict[str, Any] = {
    "timer": "every 1h",
    "timezone": "UTC",
    "anchor": T0 + HOUR,
    "start_at": T0 + 2 * HOUR,
    "end_at": None,
    "task": "proj.tasks.other",
    "args": "[1]",
    "kwargs": '{"x": 1}',
    "options": '{"queue": "slow"}',
    "overlap": "replace",
    "remaining": 2,
    "note": "paused for the audit",
}

column_names = st.sampled_from(sorted(CURRENT))


@given(st.sets(column_names), st.sets(column_names))
def test_a_write_moves_the_cursor_exactly_when_a_timing_column_changes(
    rewritten: set[str], changed: set[str]
) -> None:
    """Columns written with their own value never count; any new timing value does."""
    wanted = {key: OTHER[key] if key in changed else CURRENT[key] for key in rewritten}
    expected = bool(set(TIMING_COLUMNS) & rewritten & changed)
    assert retimes(CURRENT, wanted) is expected
    # The row may be a mapping (a result row) or an object (a table row).
    assert retimes(SimpleNamespace(**CURRENT), wanted) is expected


def test_a_definition_that_leaves_out_the_anchor_keeps_the_schedule_on_its_grid() -> None:
    """Sync and import give the timer but often no anchor: the current anchor stays."""
    assert not retimes(CURRENT, {"timer": CURRENT["timer"], "timezone": CURRENT["timezone"]})
    assert retimes(CURRENT, {"timer": CURRENT["timer"], "anchor": T0 + HOUR})


def test_edits_of_the_call_the_policies_or_the_note_never_move_the_cursor() -> None:
    for key in ("task", "args", "kwargs", "options", "overlap", "remaining", "note"):
        assert not retimes(CURRENT, {key: OTHER[key]}), key


def test_bounds_are_timing_columns_and_the_countdown_moves_on_its_own() -> None:
    """A new start or end recomputes the first occurrence; ``remaining`` is beat's to count."""
    assert retimes(CURRENT, {"start_at": T0 + 2 * HOUR})
    assert retimes(CURRENT, {"end_at": None})
    assert set(MOVING_COLUMNS).isdisjoint(TIMING_COLUMNS)
    assert set(MOVING_COLUMNS).isdisjoint(FRESH_STATE)


def test_every_column_the_rules_name_is_a_column_of_periodic_task() -> None:
    columns = set(PeriodicTask.__table__.c.keys())
    assert set(TIMING_COLUMNS) <= columns
    assert set(MOVING_COLUMNS) <= columns
    assert set(FRESH_STATE) <= columns


def test_a_fresh_state_keeps_the_definition_and_the_cursor() -> None:
    """A resume clears what the schedule owes, not what it is or where it stands."""
    kept = {
        *TIMING_COLUMNS,
        *MOVING_COLUMNS,
        *Policies().columns(),
        "next_occurrence",
        "nextrun",
        "task",
        "args",
        "kwargs",
        "options",
    }
    assert kept.isdisjoint(FRESH_STATE)


def test_a_resumed_schedule_is_not_broken_and_owes_nothing() -> None:
    """A broken schedule holding an occurrence and owing a retry, written FRESH_STATE,
    is decided like a new one: only its next occurrence is sent."""
    owing = Row(
        broken=True,
        failure_streak=3,
        held=T0 - 10 * timedelta(seconds=1),
        retry_plan=T0 - timedelta(seconds=20),
        retry_attempt=2,
        retry_at=T0 - timedelta(seconds=5),
    )
    before = decide(state_of(owing), T0, [])
    assert Send(T0 - timedelta(seconds=20), Trigger.RETRY, 2) in before.sends

    fresh = replace(owing, **FRESH_STATE)
    assert fresh.broken is False
    state = state_of(fresh)
    assert (state.held, state.retry_plan, state.retry_attempt, state.retry_at) == (None,) * 4
    assert state.failure_streak == 0
    assert decide(state, T0, []).sends == [Send(T0, Trigger.SCHEDULED)]
