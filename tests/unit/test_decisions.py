"""Tests of bridge.policy: the pure decisions of the fire sequence.

Every function here takes ``now`` and returns a decision, so the tests pin the
exact instants a user would see in the run history and in ``nextrun``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.models import Trigger
from bridge.policy import Overlap
from bridge.decisions import (
    Fire,
    OpenRun,

    Skip,
    decide,
    due_occurrence,
    split_stale,
    wait_seconds,
)
from bridge.timers import parse_timer

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TEN = timedelta(seconds=10)
EVERY_10S = parse_timer("every 10s", "UTC", T0)
HOURLY = parse_timer("0 * * * *", "UTC")


def open_run(run_id: str, updated_at: datetime, status: str = "STARTED") -> OpenRun:
    return OpenRun(
        id=run_id, status=status, plan_time=T0, updated_at=updated_at, trigger="scheduled"
    )


# ----------------------------------------------------------------------- split_stale


def test_split_stale_keeps_a_run_updated_exactly_stale_after_ago_live() -> None:
    """A run is presumed lost only once it is silent for *more* than stale_after."""
    now = T0 + timedelta(hours=2)
    stale_after = timedelta(hours=1)
    at_boundary = open_run("at-boundary", now - stale_after)
    just_past = open_run("just-past", now - stale_after - timedelta(microseconds=1))
    fresh = open_run("fresh", now)
    live, stale = split_stale([at_boundary, just_past, fresh], now, stale_after)
    assert live == [at_boundary, fresh]
    assert stale == [just_past]


def test_split_stale_of_no_runs_is_two_empty_lists() -> None:
    """With nothing open, nothing blocks and nothing is lost."""
    assert split_stale([], T0, timedelta(seconds=1)) == ([], [])


def test_split_stale_accepts_any_iterable_and_keeps_order() -> None:
    """Runs come from a query cursor; their order is kept in both lists."""
    now = T0 + timedelta(minutes=10)
    runs = [open_run(f"r{i}", T0 + timedelta(minutes=i)) for i in range(10)]
    live, stale = split_stale(iter(runs), now, timedelta(minutes=4, seconds=30))
    assert [r.id for r in stale] == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert [r.id for r in live] == ["r6", "r7", "r8", "r9"]


# -------------------------------------------------------------------- due_occurrence


def test_due_occurrence_on_time_is_the_awaited_occurrence() -> None:
    """Beat arriving exactly at nextrun fires that occurrence as scheduled."""
    nextrun = T0 + TEN
    assert due_occurrence(EVERY_10S, nextrun, nextrun) == (nextrun, Trigger.SCHEDULED)


def test_due_occurrence_a_little_late_is_still_the_awaited_occurrence() -> None:
    """Late by less than one interval: still the awaited occurrence, not a catch-up."""
    nextrun = T0 + TEN
    now = nextrun + timedelta(seconds=9, microseconds=999_999)
    assert due_occurrence(EVERY_10S, nextrun, now) == (nextrun, Trigger.SCHEDULED)


def test_due_occurrence_late_by_several_occurrences_is_the_latest_as_catchup() -> None:
    """After downtime only the latest passed occurrence runs, marked catchup."""
    nextrun = T0 + TEN
    now = T0 + timedelta(seconds=45)
    assert due_occurrence(EVERY_10S, nextrun, now) == (
        T0 + timedelta(seconds=40),
        Trigger.CATCHUP,
    )


def test_due_occurrence_late_exactly_onto_a_later_occurrence() -> None:
    """Arriving exactly on a later grid point runs that point."""
    nextrun = T0 + TEN
    now = T0 + timedelta(seconds=30)
    assert due_occurrence(EVERY_10S, nextrun, now) == (now, Trigger.CATCHUP)


def test_due_occurrence_of_a_cron_timer_after_hours_of_downtime() -> None:
    """An hourly cron job down from 10:00 to 13:30 runs the 13:00 occurrence once."""
    nextrun = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    now = datetime(2026, 3, 1, 13, 30, tzinfo=UTC)
    assert due_occurrence(HOURLY, nextrun, now) == (
        datetime(2026, 3, 1, 13, 0, tzinfo=UTC),
        Trigger.CATCHUP,
    )


def test_due_occurrence_of_a_one_shot_is_its_instant() -> None:
    """A one-shot fires its single instant, however late beat comes to it."""
    when = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    once = parse_timer(f"at {when.isoformat()}", "UTC")
    assert due_occurrence(once, when, when + timedelta(days=3)) == (when, Trigger.SCHEDULED)


# ----------------------------------------------------------------------------- decide


def test_decide_skips_while_a_live_run_blocks_and_names_it() -> None:
    """Overlap skip with a live run: skip, and the reason names the blocking run."""
    nextrun = T0 + TEN
    now = nextrun + timedelta(seconds=1)
    blocking = open_run("7d1f-blocking", now - timedelta(seconds=5), status="STARTED")
    other = open_run("other-run", now, status="SENT")
    decision = decide(EVERY_10S, nextrun, now, [blocking, other], Overlap.SKIP)
    assert isinstance(decision, Skip)
    assert decision.plan_time == nextrun
    assert "7d1f-blocking" in decision.reason
    assert "STARTED" in decision.reason
    assert decision.next_run == T0 + 2 * TEN


def test_decide_allow_fires_despite_a_live_run() -> None:
    """Overlap allow starts the occurrence even while a previous run is live."""
    nextrun = T0 + TEN
    now = nextrun
    decision = decide(EVERY_10S, nextrun, now, [open_run("busy", now)], Overlap.ALLOW)
    assert decision == Fire(plan_time=nextrun, trigger=Trigger.SCHEDULED, next_run=T0 + 2 * TEN)


def test_decide_fires_when_nothing_is_live() -> None:
    """With no live run the default policy fires the occurrence."""
    nextrun = T0 + TEN
    decision = decide(EVERY_10S, nextrun, nextrun, [], Overlap.SKIP)
    assert decision == Fire(plan_time=nextrun, trigger=Trigger.SCHEDULED, next_run=T0 + 2 * TEN)


@pytest.mark.parametrize("overlap", list(Overlap))
@pytest.mark.parametrize("blocked", [False, True])
def test_decide_next_run_is_strictly_after_now_and_after_the_plan(
    overlap: Overlap, blocked: bool
) -> None:
    """Whatever the decision, nextrun moves past now, so the row is not due again at once."""
    nextrun = T0 + TEN
    now = T0 + timedelta(seconds=30)  # exactly on a later grid point
    live = [open_run("busy", now)] if blocked else []
    decision = decide(EVERY_10S, nextrun, now, live, overlap)
    assert decision.plan_time == now
    assert decision.next_run == now + TEN
    assert isinstance(decision, Skip) == (blocked and overlap is Overlap.SKIP)


def test_decide_catchup_fire_carries_the_catchup_trigger() -> None:
    """A fire after downtime is recorded as catchup, and the cursor resyncs to the future."""
    nextrun = T0 + TEN
    now = T0 + timedelta(minutes=5, seconds=3)
    decision = decide(EVERY_10S, nextrun, now, [], Overlap.SKIP)
    assert decision == Fire(
        plan_time=T0 + timedelta(minutes=5),
        trigger=Trigger.CATCHUP,
        next_run=T0 + timedelta(minutes=5, seconds=10),
    )


def test_decide_one_shot_has_no_next_run() -> None:
    """After a one-shot fires there is nothing left to schedule."""
    when = T0 + TEN
    once = parse_timer(f"at {when.isoformat()}", "UTC")
    decision = decide(once, when, when, [], Overlap.SKIP)
    assert decision == Fire(plan_time=when, trigger=Trigger.SCHEDULED, next_run=None)


# ----------------------------------------------------------------------- wait_seconds


def test_wait_seconds_without_any_schedule_is_the_ceiling() -> None:
    """An empty table: beat sleeps the poll interval."""
    assert wait_seconds(None, T0, 5.0) == 5.0


def test_wait_seconds_for_an_overdue_row_is_zero() -> None:
    """A row already due: beat does not sleep at all."""
    assert wait_seconds(T0 - timedelta(hours=1), T0, 5.0) == 0.0
    assert wait_seconds(T0, T0, 5.0) == 0.0


def test_wait_seconds_until_the_next_row_below_the_ceiling() -> None:
    """A row due soon: beat sleeps exactly until it is due."""
    assert wait_seconds(T0 + timedelta(seconds=1.25), T0, 5.0) == 1.25


def test_wait_seconds_is_capped_by_the_ceiling() -> None:
    """A row due far ahead: beat still wakes at the ceiling to see table changes."""
    assert wait_seconds(T0 + timedelta(days=1), T0, 5.0) == 5.0


# ------------------------------------------------------------------ property tests

ANCHORS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(
    anchor=ANCHORS,
    seconds=st.integers(min_value=1, max_value=3 * 86_400),
    steps=st.integers(min_value=-1_000, max_value=1_000),
    late=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)),
    blocked=st.booleans(),
    overlap=st.sampled_from(list(Overlap)),
)
def test_decide_on_interval_timers_stays_on_the_grid(
    anchor: datetime,
    seconds: int,
    steps: int,
    late: timedelta,
    blocked: bool,
    overlap: Overlap,
) -> None:
    """For any interval and lateness: plan in [nextrun, now] on the grid, next_run after now."""
    interval = timedelta(seconds=seconds)
    timer = parse_timer(f"every {seconds}s", "UTC", anchor)
    nextrun = anchor + steps * interval
    now = nextrun + late
    live = [open_run("busy", now)] if blocked else []
    decision = decide(timer, nextrun, now, live, overlap)
    plan, next_run = decision.plan_time, decision.next_run
    assert next_run is not None
    assert nextrun <= plan <= now
    assert (plan - anchor) % interval == timedelta(0)
    assert next_run > now
    assert (next_run - plan) % interval == timedelta(0)
    assert next_run - interval <= now  # no occurrence after now is jumped over
    if late < interval:
        assert plan == nextrun
        assert isinstance(decision, Skip) or decision.trigger is Trigger.SCHEDULED
