"""Tests of bridge.decisions: the pure decisions of the fire sequence.

Every function here takes ``now`` and returns a decision, so the tests pin the
exact instants a user would see in the run history and in ``nextrun``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.decisions import (
    CATCHUP_PER_TICK,
    EXPIRED,
    MISSED_BY_NONE,
    NOTE_FIXED_DELAY,
    NOTE_NO_OCCURRENCE,
    NOTE_NO_RUNS_LEFT,
    NOTE_PAST_END,
    TICK_MESSAGES,
    OpenRun,
    Outcome,
    Send,
    Settlement,
    State,
    Streaks,
    Thresholds,
    Way,
    advance,
    catchup_share,
    decide,
    displaced,
    finish_note,
    fire_time,
    first_at_or_after,
    forecast,
    manual_overlap,
    overlap_way,
    rest,
    resume,
    settle,
    split_stale,
    streaks_after,
    wait_seconds,
    wake_time,
)
from bridge.rules.kinds import RunStatus, Trigger
from bridge.rules.policy import Catchup, Overlap, Policies, ReplaceWith
from bridge.rules.timers import Timer, parse_timer, upcoming

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TEN = timedelta(seconds=10)
EVERY_10S = parse_timer("every 10s", "UTC", T0)
HOURLY = parse_timer("0 * * * *", "UTC")
HOUR = timedelta(hours=1)
THRESHOLDS = Thresholds()


def failures(result: Settlement) -> int | None:
    """The failures in a row a settlement leaves (None: it leaves them as they are)."""
    return None if result.streaks is None else result.streaks.failures


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


# ----------------------------------------------------------------------------- decide


def state(
    timer: Timer = EVERY_10S, next_occurrence: datetime | None = T0 + TEN, **policy: object
) -> State:
    """A row of schedule 1 waiting for ``next_occurrence`` with the given policies."""
    held = policy.pop("held", None)
    retry = policy.pop("retry", None)
    return State(
        schedule_id=1,
        timer=timer,
        policies=Policies.build(policy),
        next_occurrence=next_occurrence,
        held=held,  # type: ignore[arg-type]
        retry_plan=retry[0] if retry else None,  # type: ignore[index]
        retry_attempt=retry[1] if retry else None,  # type: ignore[index]
        retry_at=retry[2] if retry else None,  # type: ignore[index]
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_an_occurrence_on_time_is_sent_as_scheduled_and_the_cursor_moves_on() -> None:
    plan = decide(state(), at(10), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.next_occurrence == at(20)
    assert (plan.skipped, plan.missed) == (0, 0)


def test_a_little_late_is_still_the_scheduled_occurrence() -> None:
    """Late by less than one interval: the awaited occurrence, not a catch-up."""
    plan = decide(state(), at(19.999), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.next_occurrence == at(20)


def test_catchup_latest_sends_the_most_recent_occurrence_and_counts_the_rest_missed() -> None:
    plan = decide(state(), at(45), [])
    assert plan.sends == [Send(at(40), Trigger.CATCHUP)]
    assert plan.missed == 3  # 10, 20, 30
    assert plan.missed_reason == "catch-up latest runs only the most recent of those due"
    assert plan.next_occurrence == at(50)


def test_catchup_all_with_overlap_allow_sends_every_missed_occurrence_at_once() -> None:
    plan = decide(state(catchup="all", overlap="allow"), at(45), [])
    assert plan.sends == [Send(at(s), Trigger.CATCHUP) for s in (10, 20, 30, 40)]
    assert (plan.missed, plan.missed_reason) == (0, None)
    assert plan.next_occurrence == at(50)


def test_catchup_all_is_bounded_per_tick_and_resumes_where_it_stopped() -> None:
    late = 10 * (CATCHUP_PER_TICK + 5)
    plan = decide(state(catchup="all", overlap="allow"), at(late + 5), [])
    assert len(plan.sends) == CATCHUP_PER_TICK
    assert plan.sends[0].plan_time == at(10)
    assert plan.next_occurrence == at(10 * (CATCHUP_PER_TICK + 1))
    following = decide(
        state(catchup="all", overlap="allow", next_occurrence=plan.next_occurrence),
        at(late + 5),
        [],
    )
    assert [s.plan_time for s in following.sends] == [
        at(10 * k) for k in range(CATCHUP_PER_TICK + 1, CATCHUP_PER_TICK + 6)
    ]


@given(limit=st.integers(min_value=1, max_value=CATCHUP_PER_TICK))
def test_a_tick_that_asks_for_fewer_gets_the_oldest_and_resumes_after_them(limit: int) -> None:
    """Beat asks each row of a long backlog for fewer occurrences: however few, the
    oldest go first and the next tick starts where this one stopped."""
    plan = decide(state(catchup="all", overlap="allow"), at(10 * 200 + 5), [], limit)
    assert [s.plan_time for s in plan.sends] == [at(10 * k) for k in range(1, limit + 1)]
    assert plan.next_occurrence == at(10 * (limit + 1))


@given(
    batch_size=st.integers(min_value=1, max_value=5000),
    rows=st.integers(min_value=1, max_value=5000),
    more_due=st.booleans(),
)
def test_a_ticks_catchup_share_keeps_the_tick_short_and_the_backlog_in_step(
    batch_size: int, rows: int, more_due: bool
) -> None:
    """Each row gets at least one occurrence and at most CATCHUP_PER_TICK; the tick sends
    about TICK_MESSAGES batch sizes; a full claim's rows get a full batch's share, however
    few they are, so the first small claims of a backlog do not run ahead of the rest."""
    rows = min(rows, batch_size)
    share = catchup_share(rows, batch_size, more_due)
    assert 1 <= share <= CATCHUP_PER_TICK
    assert rows * share <= max(rows, TICK_MESSAGES * batch_size)
    if more_due:
        assert share == catchup_share(batch_size, batch_size, False)
    else:
        assert share == CATCHUP_PER_TICK or (rows * (share + 1) > TICK_MESSAGES * batch_size)


def test_catchup_none_sends_nothing_and_resyncs_to_the_future() -> None:
    plan = decide(state(catchup="none"), at(45), [])
    assert plan.sends == []
    assert plan.missed == 4
    assert plan.missed_reason == MISSED_BY_NONE
    assert plan.next_occurrence == at(50)


def test_catchup_none_still_sends_an_occurrence_that_is_merely_late() -> None:
    plan = decide(state(catchup="none"), at(15), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]


def test_occurrences_older_than_the_window_are_missed_not_sent() -> None:
    plan = decide(state(catchup="all", overlap="allow", catchup_window="25s"), at(45), [])
    assert [s.plan_time for s in plan.sends] == [at(20), at(30), at(40)]
    assert plan.missed == 1
    assert plan.missed_reason == "they fell outside its catch-up window of 25s"
    latest = decide(state(catchup_window="3s"), at(45), [])
    assert latest.sends == [] and latest.missed == 4
    assert latest.missed_reason == "they fell outside its catch-up window of 3s"


def test_catchup_of_a_cron_timer_after_hours_of_downtime() -> None:
    """An hourly job down from 10:00 to 13:30 sends 13:00 once and misses three."""
    hourly = state(HOURLY, datetime(2026, 3, 1, 10, 0, tzinfo=UTC))
    plan = decide(hourly, datetime(2026, 3, 1, 13, 30, tzinfo=UTC), [])
    assert plan.sends == [Send(datetime(2026, 3, 1, 13, 0, tzinfo=UTC), Trigger.CATCHUP)]
    assert plan.missed == 3
    assert plan.next_occurrence == datetime(2026, 3, 1, 14, 0, tzinfo=UTC)


def test_overlap_skip_counts_the_skip_and_names_the_blocking_run() -> None:
    blocking = open_run("7d1f-blocking", at(5))
    plan = decide(state(), at(11), [blocking])
    assert plan.sends == [] and plan.skipped == 1
    assert plan.skip_reason is not None
    assert "7d1f-blocking" in plan.skip_reason and "STARTED" in plan.skip_reason
    assert plan.next_occurrence == at(20)


def test_overlap_allow_sends_despite_a_live_run() -> None:
    plan = decide(state(overlap="allow"), at(10), [open_run("busy", at(5))])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]


def test_overlap_buffer_one_holds_one_occurrence_then_skips() -> None:
    busy = [open_run("busy", at(5))]
    first = decide(state(overlap="buffer_one"), at(10), busy)
    assert (first.sends, first.held, first.skipped) == ([], at(10), 0)
    second = decide(state(overlap="buffer_one", next_occurrence=at(20), held=at(10)), at(20), busy)
    assert (second.sends, second.held, second.skipped) == ([], at(10), 1)


def test_overlap_buffer_one_starts_the_held_occurrence_once_nothing_runs() -> None:
    plan = decide(state(overlap="buffer_one", next_occurrence=at(20), held=at(10)), at(12), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.held is None
    assert plan.next_occurrence == at(20)


def test_overlap_buffer_all_queues_every_occurrence_while_a_run_is_open() -> None:
    busy = [open_run("busy", at(5))]
    first = decide(state(overlap="buffer_all"), at(10), busy)
    assert (first.sends, first.held, first.skipped, first.next_occurrence) == (
        [],
        at(10),
        0,
        at(20),
    )
    second = decide(state(overlap="buffer_all", next_occurrence=at(20), held=at(10)), at(20), busy)
    assert (second.sends, second.held, second.skipped) == ([], at(10), 0)
    assert second.next_occurrence == at(30)  # the queue: 10 and 20


def test_overlap_buffer_all_starts_the_oldest_queued_once_nothing_runs() -> None:
    queued = state(overlap="buffer_all", next_occurrence=at(30), held=at(10))
    plan = decide(queued, at(25), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert (plan.held, plan.next_occurrence) == (at(20), at(30))
    last = decide(replace(queued, held=at(20)), at(26), [])
    assert (last.sends, last.held) == ([Send(at(20), Trigger.SCHEDULED)], None)


def test_overlap_buffer_all_drops_the_oldest_past_its_limit_as_skipped() -> None:
    queued = replace(
        state(overlap="buffer_all", next_occurrence=at(30), held=at(10)), buffer_limit=2
    )
    plan = decide(queued, at(30), [open_run("busy", at(5))])
    assert (plan.sends, plan.held, plan.skipped) == ([], at(20), 1)
    assert plan.skip_reason is not None and "buffer of 2 is full" in plan.skip_reason


def test_overlap_buffer_all_sends_its_queue_after_the_end_has_passed() -> None:
    """The cursor is gone past the end (every 10 s, end at 35 s): the queue still runs out."""
    queued = state(overlap="buffer_all", next_occurrence=None, held=at(10), end=at(35))
    sent = []
    for second in (40, 41, 42, 43):
        plan = decide(queued, at(second), [])
        sent += [send.plan_time for send in plan.sends]
        queued = advance(queued, plan)
    assert sent == [at(10), at(20), at(30)] and queued.held is None


def test_overlap_buffer_all_queues_no_more_than_the_runs_remaining() -> None:
    busy = [open_run("busy", at(5))]
    queued = state(overlap="buffer_all", next_occurrence=at(30), held=at(10), remaining=2)
    plan = decide(queued, at(30), busy)
    assert (plan.held, plan.skipped) == (at(20), 1)
    spent = decide(replace(queued, policies=replace(queued.policies, remaining=0)), at(31), [])
    assert (spent.sends, spent.held) == ([], None)


def test_overlap_buffer_one_holds_nothing_once_no_run_remains() -> None:
    held = state(overlap="buffer_one", next_occurrence=at(20), held=at(10), remaining=1)
    spent = replace(held, policies=replace(held.policies, remaining=0))
    plan = decide(spent, at(12), [])
    assert (plan.sends, plan.held) == ([], None)


def test_resuming_the_oldest_queued_occurrence_leaves_the_rest_queued() -> None:
    recorded = OpenRun("held", "PENDING", at(10), at(12), "scheduled")
    plan = resume(state(overlap="buffer_all", next_occurrence=at(30), held=at(10)), [recorded])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert (plan.held, plan.next_occurrence) == (at(20), at(30))


@settings(deadline=None, max_examples=50)  # a simulation of 390 seconds per example
@given(st.integers(11, 60), st.integers(1, 9))
def test_under_buffer_all_every_occurrence_runs_once_in_order_one_at_a_time(
    runtime: int, beat_delay: int
) -> None:
    """Runs of ``runtime`` seconds for a schedule every 10 s, beat acting ``beat_delay``
    seconds late now and then: the runs started are the occurrences in order, with none
    left out, none twice and never two at once, while the queue stays under its limit."""
    current = state(overlap="buffer_all")
    nextrun: datetime | None = at(10)
    sent: list[datetime] = []
    ends_at: datetime | None = None
    for second in range(10, 400):
        now = at(second)
        ended = ends_at is not None and now >= ends_at
        if ended:
            ends_at = None
        due = nextrun is not None and now >= nextrun + timedelta(seconds=second % beat_delay)
        if not (due or (ended and current.held is not None)):
            continue
        live = [] if ends_at is None else [open_run("running", now)]
        plan = decide(replace(current, nextrun=nextrun), now, live)
        assert plan.skipped == plan.missed == 0
        for send in plan.sends:
            assert ends_at is None, "two runs at once"
            sent.append(send.plan_time)
            ends_at = now + timedelta(seconds=runtime)
        current = advance(current, plan)
        nextrun = rest(
            current, current.next_occurrence, now, plan.waiting, ends_at is not None
        ).nextrun
    assert sent == [at(10 * (index + 1)) for index in range(len(sent))]
    assert len(sent) >= 390 // runtime - 1


def test_resuming_a_held_occurrence_sends_it_unheld_without_moving_the_cursor_back() -> None:
    """A fire of a held occurrence cut short after recording it: the cursor is already past it."""
    recorded = OpenRun("held", "PENDING", at(10), at(12), "scheduled")
    plan = resume(state(overlap="buffer_one", next_occurrence=at(20), held=at(10)), [recorded])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.held is None
    assert plan.next_occurrence == at(20)


def test_resuming_an_occurrence_moves_the_cursor_past_it_and_keeps_another_held_one() -> None:
    recorded = OpenRun("due", "PENDING", at(20), at(20), "scheduled")
    plan = resume(state(overlap="buffer_one", next_occurrence=at(20), held=at(10)), [recorded])
    assert plan.sends == [Send(at(20), Trigger.SCHEDULED)]
    assert (plan.held, plan.next_occurrence) == (at(10), at(30))


def test_resuming_a_fixed_delay_run_waits_for_it_to_finish() -> None:
    timer = parse_timer("every 10s after completion", "UTC", T0)
    recorded = OpenRun("due", "PENDING", at(10), at(10), "scheduled")
    plan = resume(state(timer, next_occurrence=at(10)), [recorded])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.next_occurrence is None


def test_overlap_replace_revokes_the_live_runs_and_sends() -> None:
    live = [open_run("old-1", at(5)), open_run("old-2", at(6))]
    plan = decide(state(overlap="replace"), at(10), live)
    assert plan.revoke == ["old-1", "old-2"]
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]


@pytest.mark.parametrize(
    ("overlap", "open_runs", "starting", "way"),
    [
        (Overlap.ALLOW, 1, False, Way.SEND),
        (Overlap.SKIP, 0, False, Way.SEND),
        (Overlap.SKIP, 1, False, Way.SKIP),
        (Overlap.SKIP, 0, True, Way.SKIP),
        (Overlap.REPLACE, 2, False, Way.REPLACE),
        (Overlap.REPLACE, 0, True, Way.SKIP),
        (Overlap.BUFFER_ONE, 1, False, Way.HOLD),
        (Overlap.BUFFER_ONE, 0, True, Way.HOLD),
        (Overlap.BUFFER_ONE, 0, False, Way.SEND),
    ],
)
def test_overlap_way_is_one_rule_for_beat_and_runs_sent_by_hand(
    overlap: Overlap, open_runs: int, starting: bool, way: Way
) -> None:
    """A run sent in the same decision blocks as an open one does, but replace cannot
    revoke it: it has no record yet."""
    live = [open_run(f"r{i}", at(i)) for i in range(open_runs)]
    assert overlap_way(overlap, live, starting) is way


def test_a_run_sent_by_hand_takes_allow_skip_or_replace() -> None:
    """buffer_one holds a scheduled occurrence, which a run sent by hand is not."""
    assert manual_overlap(None) is Overlap.ALLOW
    assert [manual_overlap(o) for o in ("allow", "skip", "replace")] == [
        Overlap.ALLOW,
        Overlap.SKIP,
        Overlap.REPLACE,
    ]
    with pytest.raises(ValidationError, match="overlap: got 'buffer_one', expected allow, skip"):
        manual_overlap("buffer_one")


@pytest.mark.parametrize("overlap", ["skip", "buffer_one", "replace"])
def test_catchup_all_sends_owed_occurrences_one_after_another(overlap: str) -> None:
    """Only allow runs side by side: the oldest goes now, the rest wait, none is skipped."""
    plan = decide(state(catchup="all", overlap=overlap), at(35), [])
    assert plan.sends == [Send(at(10), Trigger.CATCHUP)]
    assert (plan.next_occurrence, plan.waiting, plan.skipped) == (at(20), True, 0)
    busy = decide(
        state(catchup="all", overlap=overlap, next_occurrence=at(20)),
        at(36),
        [open_run("catching-up", at(35))],
    )
    assert busy.sends == [] and busy.revoke == []
    assert (busy.next_occurrence, busy.waiting, busy.skipped) == (at(20), True, 0)
    # Woken by the end of that run when only the last owed occurrence is left: still catch-up.
    last = State(1, EVERY_10S, Policies.build({"catchup": "all"}), at(30), nextrun=at(38))
    assert decide(last, at(38), []).sends == [Send(at(30), Trigger.CATCHUP)]


def test_a_due_retry_waits_for_an_open_run_unless_overlap_allows() -> None:
    retry = (at(0), 2, at(12))
    busy = [open_run("x", at(11))]
    waiting = decide(state(next_occurrence=at(20), retry=retry), at(12), busy)
    assert waiting.sends == [] and waiting.waiting and waiting.sent_retry is None
    for overlap, live in (("skip", []), ("allow", busy)):
        plan = decide(state(overlap=overlap, next_occurrence=at(20), retry=retry), at(12), live)
        assert plan.sends == [Send(at(0), Trigger.RETRY, 2)]
        assert plan.sent_retry == 2
        assert plan.next_occurrence == at(20)


def test_jitter_delays_the_fire_but_not_the_plan_time() -> None:
    jittered = state(jitter="5s")
    fire_at = fire_time(jittered, at(10))
    assert at(10) <= fire_at <= at(15)
    if fire_at > at(10):
        assert decide(jittered, fire_at - timedelta(microseconds=1), []).sends == []
    plan = decide(jittered, fire_at, [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert wake_time(jittered, at(20)) == fire_time(jittered, at(20))


def test_start_bound_skips_earlier_occurrences_and_end_bound_finishes() -> None:
    bounded = state(start=at(30).isoformat(), end=at(50).isoformat())
    assert decide(bounded, at(29), []).sends == []
    plan = decide(bounded, at(30), [])
    assert plan.sends == [Send(at(30), Trigger.SCHEDULED)]
    last = decide(state(end=at(50).isoformat(), next_occurrence=at(50)), at(50), [])
    assert last.sends == [Send(at(50), Trigger.SCHEDULED)]
    assert last.next_occurrence is None
    assert finish_note(bounded, None, None) == NOTE_PAST_END


def test_remaining_runs_cap_the_sends_and_count_down() -> None:
    plan = decide(state(catchup="all", overlap="allow", remaining=2), at(45), [])
    assert [s.plan_time for s in plan.sends] == [at(10), at(20)]
    assert plan.remaining == 0
    assert finish_note(state(), at(50), plan.remaining) == NOTE_NO_RUNS_LEFT


def test_a_one_shot_has_no_next_occurrence_after_its_run() -> None:
    when = at(10)
    once = state(parse_timer(f"at {when.isoformat()}", "UTC"), when)
    plan = decide(once, at(13), [])
    assert plan.sends == [Send(when, Trigger.SCHEDULED)]
    assert plan.next_occurrence is None
    assert finish_note(once, None, None) == NOTE_NO_OCCURRENCE


def test_a_fixed_delay_waits_for_the_run_to_finish() -> None:
    delay = state(parse_timer("every 10s after completion", "UTC", T0))
    plan = decide(delay, at(10), [])
    assert plan.sends == [Send(at(10), Trigger.SCHEDULED)]
    assert plan.next_occurrence is None
    assert finish_note(delay, None, None) is None
    finished = Outcome(Trigger.SCHEDULED, RunStatus.SUCCESS, at(10), 1, at(17))
    waiting = state(parse_timer("every 10s after completion", "UTC", T0), None)
    assert settle(waiting, finished, True, at(17), THRESHOLDS).next_occurrence == at(27)
    assert settle(waiting, finished, False, at(17), THRESHOLDS).next_occurrence is None


# ----------------------------------------------------------------------------- settle


def failed(attempt: int = 1, trigger: Trigger = Trigger.SCHEDULED) -> Outcome:
    return Outcome(trigger, RunStatus.FAILURE, at(10), attempt, at(12), "RuntimeError: boom")


def test_a_failed_attempt_with_attempts_left_owes_a_retry_after_the_backoff() -> None:
    retrying = state(max_attempts=3, backoff="5s,30s")
    assert settle(retrying, failed(1), True, at(12), THRESHOLDS).retry == (at(10), 2, at(17))
    assert settle(retrying, failed(2), True, at(12), THRESHOLDS).retry == (at(10), 3, at(42))
    last = settle(retrying, failed(3), True, at(12), THRESHOLDS)
    assert last.retry is None and failures(last) == 1


def test_the_breaker_trips_after_n_consecutive_failed_occurrences() -> None:
    breaking = State(1, EVERY_10S, Policies.build({"max_failures": 3}), at(20), failure_streak=2)
    result = settle(breaking, failed(), True, at(12), THRESHOLDS)
    assert failures(result) == 3
    assert result.broken_note == (
        "broken: 3 consecutive failed runs; last error: RuntimeError: boom"
    )
    lost = Outcome(Trigger.SCHEDULED, RunStatus.LOST, at(10), 1, at(12), None)
    assert settle(breaking, lost, True, at(12), THRESHOLDS).broken_note is not None


def test_success_resets_the_streak_and_revoked_neither_counts_nor_resets() -> None:
    ok = Outcome(Trigger.SCHEDULED, RunStatus.SUCCESS, at(10), 1, at(12))
    revoked = Outcome(Trigger.SCHEDULED, RunStatus.REVOKED, at(10), 1, at(12))
    assert failures(settle(state(), ok, True, at(12), THRESHOLDS)) == 0
    assert failures(settle(state(), revoked, True, at(12), THRESHOLDS)) is None


@pytest.mark.parametrize("trigger", [Trigger.SCHEDULED, Trigger.MANUAL, Trigger.RETRY])
def test_an_expired_run_is_counted_as_such_whatever_its_trigger(trigger: Trigger) -> None:
    expired = Outcome(trigger, RunStatus.REVOKED, at(10), 1, at(13), EXPIRED)
    replaced = Outcome(trigger, RunStatus.REVOKED, at(10), 1, at(13), "replaced by run x")
    result = settle(state(), expired, True, at(13), THRESHOLDS)
    assert result.expired and failures(result) is None and result.retry is None
    assert not settle(state(), replaced, True, at(13), THRESHOLDS).expired
    assert not settle(state(), failed(), True, at(13), THRESHOLDS).expired


@pytest.mark.parametrize("trigger", [Trigger.MANUAL, Trigger.BACKFILL, Trigger.EXTERNAL])
def test_manual_and_backfill_runs_never_trip_the_breaker(trigger: Trigger) -> None:
    breaking = State(1, EVERY_10S, Policies.build({"max_failures": 1}), at(20))
    result = settle(breaking, failed(trigger=trigger), True, at(12), THRESHOLDS)
    assert failures(result) is None and result.broken_note is None and result.retry is None


def test_any_final_run_wakes_a_held_occurrence() -> None:
    holding = state(overlap="buffer_one", held=at(10))
    ok = Outcome(Trigger.MANUAL, RunStatus.SUCCESS, None, 1, at(12))
    assert settle(holding, ok, True, at(12), THRESHOLDS).wake


def test_the_end_of_a_run_wakes_owed_work_and_only_one_retry_is_owed() -> None:
    owed = state(catchup="all", next_occurrence=at(20), max_attempts=3)
    ok = Outcome(Trigger.CATCHUP, RunStatus.SUCCESS, at(10), 1, at(21))
    assert settle(owed, ok, True, at(21), THRESHOLDS).wake
    assert not settle(state(next_occurrence=at(30)), ok, True, at(21), THRESHOLDS).wake
    already = state(max_attempts=3, retry=(at(0), 2, at(40)))
    result = settle(already, failed(), True, at(12), THRESHOLDS)
    assert result.retry is None and failures(result) == 1


def test_replace_never_runs_a_just_sent_retry_beside_a_new_occurrence() -> None:
    retry = (at(0), 2, at(10))
    plan = decide(state(overlap="replace", retry=retry), at(10), [])
    assert plan.sends == [Send(at(0), Trigger.RETRY, 2)]
    assert plan.skipped == 1 and plan.revoke == []


def test_a_fixed_delay_whose_next_run_would_pass_its_end_finishes() -> None:
    timer = parse_timer("every 10s after completion", "UTC", T0)
    ending = State(1, timer, Policies.build({"end": at(20).isoformat()}), None)
    finished = Outcome(Trigger.SCHEDULED, RunStatus.SUCCESS, at(10), 1, at(15))
    result = settle(ending, finished, True, at(15), THRESHOLDS)
    assert result.next_occurrence is None
    assert result.finish_note == NOTE_PAST_END


def test_an_owed_retry_that_fails_before_beat_clears_it_still_owes_the_next() -> None:
    """Attempt 2 fails so fast that the row still names it as the owed retry."""
    retrying = state(max_attempts=3, max_failures=1, retry=(at(10), 2, at(12)))
    result = settle(retrying, failed(2), True, at(14), THRESHOLDS)
    assert result.retry == (at(10), 3, at(12))
    assert failures(result) is None and result.broken_note is None


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
    catchup=st.sampled_from(list(Catchup)),
    window=st.none() | st.integers(min_value=1, max_value=10 * 86_400),
)
def test_every_due_occurrence_is_sent_missed_skipped_held_or_left_for_later(
    anchor: datetime,
    seconds: int,
    steps: int,
    late: timedelta,
    blocked: bool,
    overlap: Overlap,
    catchup: Catchup,
    window: int | None,
) -> None:
    """For any interval, lateness and policy, no occurrence is lost or doubled.

    Sends are on the grid, oldest first, inside [next_occurrence, now]; the
    cursor moves past them; and sent + missed + skipped + held + those left
    for the next tick add up to every occurrence that was due.
    """
    interval = timedelta(seconds=seconds)
    timer = parse_timer(f"every {seconds}s", "UTC", anchor)
    first = anchor + steps * interval
    now = first + late
    row = State(
        1,
        timer,
        Policies.build({"overlap": overlap, "catchup": catchup, "catchup_window": window}),
        first,
    )
    plan = decide(row, now, [open_run("busy", now)] if blocked else [])
    plans = [send.plan_time for send in plan.sends]
    assert plans == sorted(set(plans))
    for plan_time in plans:
        assert first <= plan_time <= now
        assert (plan_time - anchor) % interval == timedelta(0)
    due = (now - first) // interval + 1
    assert plan.next_occurrence is not None
    left = max(0, (now - plan.next_occurrence) // interval + 1)
    held = 1 if plan.held is not None else 0
    if left:  # catch-up all: the rest follow one by one, or in the next batch
        assert catchup is Catchup.ALL
        if overlap is Overlap.ALLOW:
            assert len(plans) == CATCHUP_PER_TICK
        else:
            assert plan.waiting and len(plans) <= 1
    else:
        assert plan.next_occurrence > now >= plan.next_occurrence - interval
    assert len(plans) + plan.missed + plan.skipped + held + left == due
    expected = Trigger.CATCHUP if due > 1 else Trigger.SCHEDULED
    assert all(send.trigger is expected for send in plan.sends)
    if late < interval and not blocked and (window is None or late <= timedelta(seconds=window)):
        assert plans == [first]


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(min_value=2, max_value=86_400),
    jitter=st.integers(min_value=0, max_value=86_400),
    steps=st.integers(min_value=0, max_value=1_000),
)
def test_jitter_never_reaches_the_following_occurrence(
    seconds: int, jitter: int, steps: int
) -> None:
    timer = parse_timer(f"every {seconds}s", "UTC", T0)
    row = State(7, timer, Policies.build({"jitter": jitter}), T0)
    occurrence = T0 + steps * timedelta(seconds=seconds)
    fire_at = fire_time(row, occurrence)
    assert occurrence <= fire_at <= occurrence + timedelta(seconds=jitter)
    assert fire_at < occurrence + timedelta(seconds=seconds)
    assert fire_time(row, occurrence) == fire_at  # every beat instance agrees


# ------------------------------------------------------------------ forecast (bridge next)


def test_a_forecast_applies_start_remaining_and_says_why_it_ends() -> None:
    """``--start`` in the future and ``--remaining 3``: three runs from the start, then done."""
    policies = Policies.build({"start": at(5 * 3600).isoformat(), "remaining": 3})
    row = State(1, HOURLY, policies, None)
    first = first_at_or_after(HOURLY, at(5 * 3600))
    assert first is not None
    outlook = forecast(replace(row, next_occurrence=first), first, T0, 10)
    assert [run.occurrence for run in outlook.runs] == [first + k * HOUR for k in range(3)]
    assert [run.fire_at for run in outlook.runs] == [run.occurrence for run in outlook.runs]
    assert outlook.end == NOTE_NO_RUNS_LEFT


def test_a_forecast_stops_at_the_end_bound() -> None:
    row = state(end=at(35).isoformat())
    outlook = forecast(row, at(10), T0, 10)
    assert [run.occurrence for run in outlook.runs] == [at(10), at(20), at(30)]
    assert outlook.end == NOTE_PAST_END


def test_a_forecast_gives_each_jittered_run_its_exact_time_and_window() -> None:
    row = state(jitter="4s")
    runs = forecast(row, wake_time(row, at(10)), T0, 3).runs
    for k, run in enumerate(runs, start=1):
        assert run.occurrence == at(10 * k)
        assert run.fire_at == fire_time(row, run.occurrence)
        assert run.latest == run.occurrence + timedelta(seconds=4)
        assert run.occurrence <= run.fire_at <= run.latest


def test_a_forecast_of_an_overdue_schedule_is_what_beat_catches_up_now() -> None:
    """Catch-up ``latest`` sends the newest missed occurrence at once; ``all`` sends every
    one in turn, each once the run before it ends (overlap skip); then the timer resumes."""
    now = at(35)
    latest = forecast(state(next_occurrence=at(10)), at(10), now, 2).runs
    assert [(r.occurrence, r.fire_at, r.trigger) for r in latest] == [
        (at(30), now, Trigger.CATCHUP),
        (at(40), at(40), Trigger.SCHEDULED),
    ]
    every = forecast(state(next_occurrence=at(10), catchup="all"), at(10), now, 4).runs
    assert [(r.occurrence, r.fire_at, r.after_previous) for r in every] == [
        (at(10), now, False),
        (at(20), now, True),
        (at(30), now, True),
        (at(40), at(40), False),
    ]


def test_a_forecast_of_a_fixed_delay_gives_only_the_next_run() -> None:
    timer = parse_timer("every 1h after completion", "UTC", T0)
    outlook = forecast(State(1, timer, Policies(), at(60)), at(60), T0, 5)
    assert [run.occurrence for run in outlook.runs] == [at(60)]
    assert outlook.end == NOTE_FIXED_DELAY


def test_a_forecast_sends_an_owed_retry_first() -> None:
    owed = state(max_attempts=3, retry=(at(0), 2, at(4)))
    runs = forecast(owed, at(4), at(1), 2).runs
    assert [(r.occurrence, r.fire_at, r.trigger, r.attempt) for r in runs] == [
        (at(0), at(4), Trigger.RETRY, 2),
        (at(10), at(10), Trigger.SCHEDULED, 1),
    ]


@settings(max_examples=200, deadline=None)
@given(
    text=st.sampled_from(
        ["every 7s", "every 1h30m", "*/15 * * * *", "0 9 * * mon-fri", "30 2 * * *", "@monthly"]
    ),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    now=ANCHORS,
    count=st.integers(min_value=1, max_value=30),
)
def test_a_plain_schedule_forecasts_its_timer_occurrences(
    text: str, zone: str, now: datetime, count: int
) -> None:
    """Without policies the forecast is the timer's own occurrences after now, each on time."""
    timer = parse_timer(text, zone, now)
    first = timer.next_after(now)
    assert first is not None
    outlook = forecast(State(1, timer, Policies(), first), first, now, count)
    assert [run.occurrence for run in outlook.runs] == upcoming(timer, now, count)
    assert all(run.fire_at == run.occurrence == run.latest for run in outlook.runs)
    assert outlook.end is None


# -- alert thresholds ---------------------------------------------------------------------


def failing_along(outcomes: str, policies: Policies, thresholds: Thresholds = THRESHOLDS) -> str:
    """Whether the schedule is failing after each outcome (``F`` failed, ``S`` succeeded):
    ``x`` failing, ``.`` not."""
    state, shown = State(1, EVERY_10S, policies, at(0)), []
    for index, outcome in enumerate(outcomes):
        streaks = streaks_after(state, outcome == "F", at(index), thresholds)
        state = replace(
            state,
            failure_streak=streaks.failures,
            success_streak=streaks.successes,
            failing_since=streaks.failing_since,
        )
        shown.append("x" if streaks.failing_since is not None else ".")
    return "".join(shown)


def test_failing_from_the_nth_failure_in_a_row_to_the_mth_success_in_a_row() -> None:
    policies = Policies.build({"alert_after": 3, "recover_after": 2})
    assert failing_along("FFSFFFSFSSFF", policies) == ".....xxxx..."
    # The app's thresholds, where the schedule has none of its own.
    assert failing_along("FFSFFFSFSSFF", Policies(), Thresholds(2, 1)) == ".x..xx.....x"
    assert failing_along("FFSFFFSFSSFF", Policies(), THRESHOLDS) == "xx.xxx.x..xx"


def test_failing_since_is_its_nth_failure_and_stays_while_it_recovers() -> None:
    state = State(1, EVERY_10S, Policies.build({"alert_after": 2, "recover_after": 3}), at(0))
    first = streaks_after(state, True, at(1), THRESHOLDS)
    assert first == Streaks(1, 0, None)
    second = streaks_after(replace(state, failure_streak=1), True, at(2), THRESHOLDS)
    assert second == Streaks(2, 0, at(2))
    failing = replace(state, failure_streak=0, success_streak=1, failing_since=at(2))
    assert streaks_after(failing, False, at(3), THRESHOLDS) == Streaks(0, 2, at(2))
    assert streaks_after(failing, True, at(3), THRESHOLDS) == Streaks(1, 0, at(2))
    # A schedule that is not failing counts no success: a success writes nothing new.
    assert streaks_after(state, False, at(3), THRESHOLDS) == Streaks(0, 0, None)


@given(st.text(alphabet="FS", max_size=40), st.integers(1, 5), st.integers(1, 5))
def test_the_thresholds_hold_for_any_history(outcomes: str, alert: int, recover: int) -> None:
    policies = Policies.build({"alert_after": alert, "recover_after": recover})
    shown = failing_along(outcomes, policies)
    for index, flag in enumerate(shown):
        before = outcomes[: index + 1]
        # Never failing without `alert` failures in a row at some point up to here.
        if flag == "x":
            assert "F" * alert in before
        # Failing, it recovers only at the `recover`-th success in a row.
        if index and shown[index - 1] == "x" and flag == ".":
            assert before.endswith("S" * recover)
        if index and shown[index - 1] == "x" and before.endswith("F"):
            assert flag == "x"
    # With both thresholds at 1: failing exactly when the last occurrence failed.
    assert failing_along(outcomes, Policies()) == "".join(
        "x" if outcome == "F" else "." for outcome in outcomes
    )


def test_a_threshold_of_zero_is_refused_naming_the_field() -> None:
    for field in ("alert_after", "recover_after"):
        with pytest.raises(ValidationError) as caught:
            Policies.build({field: 0})
        assert (caught.value.field, caught.value.value) == (field, 0)


# -- replace with ------------------------------------------------------------------------------


def test_replace_terminates_every_open_run_or_revokes_those_not_started() -> None:
    live = [open_run("sent", at(0), "SENT"), open_run("started", at(0), "STARTED")]
    terminating = State(1, EVERY_10S, Policies.build({"overlap": "replace"}), at(10))
    plan = decide(terminating, at(10), live)
    assert (plan.revoke, plan.terminate) == (["sent", "started"], True)
    assert [send.plan_time for send in plan.sends] == [at(10)]
    revoking = replace(
        terminating, policies=Policies.build({"overlap": "replace", "replace_with": "revoke"})
    )
    plan = decide(revoking, at(10), live)
    assert (plan.revoke, plan.terminate) == (["sent"], False)
    assert [send.plan_time for send in plan.sends] == [at(10)]  # beside the started run
    assert displaced(live[1:], ReplaceWith.REVOKE) == []
    with pytest.raises(ValidationError) as caught:
        Policies.build({"replace_with": "kill"})
    assert (caught.value.field, caught.value.value) == ("replace_with", "kill")
