"""The rule that says which schedules' runs need a look, for every count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.retention import (
    COUNT_SLACK,
    FinalRuns,
    Limits,
    StatusCount,
    needs_look,
    slice_of,
    to_look_at,
)

counts = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 2000)).map(
        lambda pair: StatusCount(max(pair), min(pair))
    ),
    max_size=4,
)


@given(counts, st.integers(0, 1000), st.integers(0, 400))
def test_a_look_is_owed_exactly_when_some_run_would_go(
    by_status: list[StatusCount], keep_runs: int, keep_days: int
) -> None:
    total = sum(c.runs for c in by_status)
    too_many = keep_runs > 0 and total > keep_runs + min(COUNT_SLACK, keep_runs // 2)
    # An old run goes only when its status has a newer run: the latest of each is kept.
    aged = keep_days > 0 and any(c.old > 0 and c.runs > 1 for c in by_status)
    assert needs_look(by_status, Limits(keep_runs, keep_days)) is (too_many or aged)


@given(counts)
def test_no_limit_owes_no_look(by_status: list[StatusCount]) -> None:
    assert not needs_look(by_status, Limits(0, 0))


def test_a_schedule_keeps_at_most_its_runs_and_their_slack_below_a_batch() -> None:
    limits = Limits(100, 0)
    assert not needs_look([StatusCount(150, 0)], limits)
    assert needs_look([StatusCount(151, 0)], limits)
    assert not needs_look([StatusCount(4, 0)], Limits(3, 0))  # half of 3: one more
    assert needs_look([StatusCount(5, 0)], Limits(3, 0))
    assert not needs_look([StatusCount(1, 1), StatusCount(1, 1)], Limits(0, 30))


def test_own_limits_win_over_the_apps() -> None:
    app = Limits(100, 30)
    assert app.of(None, None) == app
    assert app.of(0, 7) == Limits(0, 7)
    assert not Limits(0, 0).any and app.of(5, None).any


@given(st.integers(0, 10_000_000), st.integers(0, 10_000))
def test_slices_cover_every_schedule_in_the_passes(schedules: int, passes: int) -> None:
    size = slice_of(schedules, passes)
    assert size >= 1
    assert size * max(1, passes) >= schedules


def test_only_schedules_with_limits_and_runs_beyond_them_get_a_look() -> None:
    over = FinalRuns(1, Limits(3, 0), (StatusCount(5, 0),))
    within = FinalRuns(2, Limits(3, 0), (StatusCount(4, 0),))
    unlimited = FinalRuns(3, Limits(0, 0), (StatusCount(5000, 5000),))
    assert to_look_at([over, within, unlimited]) == [over]
