"""Tests of bridge.rules.fire: a claimed row turned into the runs beat records and sends.

:func:`prepare` is everything beat decides for a row before it writes: the
runs and their ids, what ``replace`` revokes, when the messages expire. Its
answers are what a user finds in the run history: one run per occurrence,
under the same id whichever beat fires it, even one that resumes a fire cut
short by a crash.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.rules.decisions import OpenRun, first_at_or_after
from bridge.rules.fire import (
    OLDEST_OPEN_READ,
    Resumable,
    RowRefused,
    fires_of_backlog,
    prepare,
    reads_all_open_runs,
    recorded_by_unfinished_fire,
    resumable,
    state_of,
)
from bridge.rules.kinds import SCHEDULED_TRIGGERS, RunStatus
from bridge.rules.policy import Catchup, Overlap, Policies
from bridge.rules.runs import ids_of_occurrence, run_id_for
from bridge.rules.timers import parse_timer
from tests.unit.rows import T0, Row

SECOND = timedelta(seconds=1)
TEN = 10 * SECOND


def open_run(row: Row, plan_time: datetime, status: str, **fields: object) -> OpenRun:
    """An open run of ``row`` as beat reads it, under its deterministic id by default."""
    run = {
        "id": run_id_for(row.id, plan_time),
        "status": status,
        "plan_time": plan_time,
        "updated_at": T0,
        "trigger": "scheduled",
        "attempt": 1,
        **fields,
    }
    return OpenRun(**run)  # type: ignore[arg-type]


def recorded(row: Row, fire_records: list[dict[str, object]]) -> list[OpenRun]:
    """The records a fire wrote, read back as open runs (the fire then died)."""
    return [
        OpenRun(
            id=str(r["id"]),
            status=str(r["status"]),
            plan_time=r["plan_time"],  # type: ignore[arg-type]
            updated_at=r["updated_at"],  # type: ignore[arg-type]
            trigger=str(r["trigger"]),
            attempt=r["attempt"],  # type: ignore[arg-type]
        )
        for r in fire_records
    ]


# --------------------------------------------------------------------------- prepare


def test_a_due_row_gives_one_pending_run_under_its_occurrences_id() -> None:
    row = Row(args="[1, 2]", kwargs='{"x": 3}', options='{"queue": "reports"}')
    fire = prepare(row, [], T0 + SECOND)
    run_id = run_id_for(row.id, T0)
    assert fire.run_ids == [run_id]
    assert fire.records(T0 + SECOND) == [
        {
            "id": run_id,
            "periodic_task_id": row.id,
            "task": row.task,
            "plan_time": T0,
            "attempt": 1,
            "trigger": "scheduled",
            "status": "PENDING",
            "updated_at": T0 + SECOND,
            "canvas_left": None,
        }
    ]
    assert (fire.payload.args, fire.payload.kwargs) == ([1, 2], {"x": 3})
    assert fire.payload.options == {"queue": "reports"}
    assert fire.plan.next_occurrence == T0 + TEN
    assert fire.plan.revoke == [] and fire.own == frozenset()


def test_a_message_expires_at_the_following_occurrence_by_default() -> None:
    """Policy ``expires next``: a run not received before the next one is due never runs."""
    now = T0 + 2 * SECOND
    assert prepare(Row(), [], now).expires(now) == T0 + TEN
    never = Row().with_policies(Policies(expires="never"))
    assert prepare(never, [], now).expires(now) is None
    own = Row(options='{"expires": 3}')
    assert prepare(own, [], now).expires(now) == now + 3 * SECOND


def test_a_message_sent_late_in_a_long_tick_still_has_a_second_to_live() -> None:
    """The expiry is reckoned as the message goes: a row of a schedule every 10 s decided at
    T0 + 2 s and sent at T0 + 9.8 s (the end of a backlog's tick) expires a second after it
    is sent, not 0.2 s later; one sent past the following occurrence, a second after."""
    fire = prepare(Row(), [], T0 + 2 * SECOND)
    assert fire.expires(T0 + 9 * SECOND) == T0 + TEN
    assert fire.expires(T0 + 9.8 * SECOND) == T0 + 10.8 * SECOND
    assert fire.expires(T0 + 12 * SECOND) == T0 + 13 * SECOND
    own = prepare(Row(options='{"expires": 3}'), [], T0)
    assert own.expires(T0 + 5 * SECOND) == T0 + 8 * SECOND


def test_replace_revokes_the_open_run_and_says_which_run_replaced_it() -> None:
    row = Row().with_policies(Policies(overlap=Overlap.REPLACE))
    running = open_run(row, T0 - TEN, "STARTED")
    fire = prepare(row, [running], T0)
    assert fire.plan.revoke == [running.id]
    assert fire.run_ids == [run_id_for(row.id, T0)]
    assert fire.revoke_reason == f"replaced by run {fire.run_ids[0]}"


def test_skip_sends_nothing_while_the_previous_run_is_open() -> None:
    row = Row()
    fire = prepare(row, [open_run(row, T0 - TEN, "STARTED")], T0)
    assert fire.run_ids == [] and fire.plan.skipped == 1
    assert fire.plan.next_occurrence == T0 + TEN


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        ({"timer": "every fortnight"}, "timer"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"args": "{not json"}, "args"),
        ({"kwargs": "[1]"}, "kwargs"),
        ({"options": '{"colour": "red"}'}, "options"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_a_row_that_cannot_be_used_is_refused_naming_the_field(
    columns: dict[str, object], field: str
) -> None:
    """Beat disables such a row with this reason as its note."""
    with pytest.raises(RowRefused, match=rf"^{field}: got "):
        prepare(Row().with_columns(**columns), [], T0)


# -------------------------------------------------------------------------- state_of


def test_a_row_written_with_nextrun_only_waits_for_the_first_occurrence_after_it() -> None:
    """A row inserted straight into the table, with ``nextrun`` and no cursor."""
    row = Row(timer="0 * * * *", next_occurrence=None, nextrun=T0 + 61 * 60 * SECOND)
    assert state_of(row).next_occurrence == T0 + 2 * 3600 * SECOND


def test_a_cursor_off_the_timers_grid_moves_to_the_next_occurrence() -> None:
    """Whatever wrote it (an edit racing a fire, SQL), beat fires only grid times."""
    assert state_of(Row(next_occurrence=T0 + 3 * SECOND)).next_occurrence == T0 + TEN
    assert state_of(Row(next_occurrence=T0 + TEN)).next_occurrence == T0 + TEN


def test_a_fixed_delay_cursor_is_taken_as_it_is() -> None:
    """After completion, the next occurrence is one interval after a run ended: no grid."""
    row = Row(timer="every 10s after completion", next_occurrence=T0 + 3 * SECOND)
    assert state_of(row).next_occurrence == T0 + 3 * SECOND


def test_the_state_carries_what_the_row_owes() -> None:
    row = Row(
        held=T0 - TEN,
        retry_plan=T0 - 2 * TEN,
        retry_attempt=2,
        retry_at=T0,
        failure_streak=1,
    ).with_policies(Policies(max_attempts=3, overlap=Overlap.BUFFER_ONE))
    state = state_of(row)
    assert (state.held, state.retry_plan, state.retry_attempt, state.retry_at) == (
        T0 - TEN,
        T0 - 2 * TEN,
        2,
        T0,
    )
    assert state.failure_streak == 1
    assert state.policies == Policies(max_attempts=3, overlap=Overlap.BUFFER_ONE)


# ------------------------------------------------------ records left by an unfinished fire


def test_a_run_recorded_but_never_sent_is_the_fires_own_work() -> None:
    """Beat died after recording: the next fire sends that run, under its id, and nothing new."""
    row = Row(next_occurrence=T0)
    first = prepare(row, [], T0)
    left = recorded(row, first.records(T0))
    again = prepare(row, left, T0 + 5 * TEN)  # later, by another beat
    assert again.run_ids == first.run_ids
    assert again.own == frozenset(first.run_ids)
    assert again.plan.revoke == [] and again.plan.skipped == 0


def test_a_run_recorded_by_an_earlier_release_is_resumed_under_its_own_id() -> None:
    """Beat died after recording under the UUIDv5 ids of releases before the time-ordered
    ones, then was upgraded: the next fire still takes that run as its own and sends it
    under the id it was recorded with, so its record and its message agree."""
    row = Row(next_occurrence=T0)
    legacy = next(i for i in ids_of_occurrence(row.id, T0) if i != run_id_for(row.id, T0))
    again = prepare(row, [open_run(row, T0, "PENDING", id=legacy)], T0 + TEN)
    assert again.run_ids == [legacy]
    assert again.own == frozenset({legacy})
    assert [record["id"] for record in again.records(T0 + TEN)] == [legacy]


def test_a_sent_run_the_cursor_has_not_passed_is_the_fires_own_work() -> None:
    """Beat died after publishing but before advancing the row."""
    row = Row(next_occurrence=T0)
    state = state_of(row)
    assert recorded_by_unfinished_fire(state, open_run(row, T0, "SENT"))
    assert recorded_by_unfinished_fire(state, open_run(row, T0 + TEN, "STARTED"))


def test_a_run_of_an_occurrence_the_cursor_has_passed_is_overlap() -> None:
    """The fire that sent it finished: it is a previous run, which ``skip`` waits for."""
    row = Row(next_occurrence=T0)
    state = state_of(row)
    previous = open_run(row, T0 - TEN, "STARTED")
    assert not recorded_by_unfinished_fire(state, previous)
    assert prepare(row, [previous], T0).plan.skipped == 1


def test_a_held_occurrence_recorded_but_never_sent_is_the_fires_own_work() -> None:
    """A held occurrence is older than the cursor: only its PENDING status tells that
    the fire which recorded it died before sending it."""
    row = Row(held=T0 - TEN, next_occurrence=T0 + TEN).with_policies(
        Policies(overlap=Overlap.BUFFER_ONE)
    )
    first = prepare(row, [], T0 + SECOND)
    assert first.run_ids == [run_id_for(row.id, T0 - TEN)]
    left = recorded(row, first.records(T0 + SECOND))
    again = prepare(row, left, T0 + 2 * SECOND)
    assert again.run_ids == first.run_ids and again.plan.skipped == 0
    # Once sent, the same run is a previous run that the next occurrence waits for.
    sent = open_run(row, T0 - TEN, "SENT")
    assert not recorded_by_unfinished_fire(state_of(row), sent)


def test_an_owed_retry_recorded_by_an_unfinished_fire_is_its_own_work() -> None:
    row = Row(next_occurrence=T0 + TEN, retry_plan=T0 - TEN, retry_attempt=2, retry_at=T0)
    state = state_of(row)
    retry = open_run(
        row, T0 - TEN, "SENT", id=run_id_for(row.id, T0 - TEN, 2), trigger="retry", attempt=2
    )
    assert recorded_by_unfinished_fire(state, retry)
    assert not recorded_by_unfinished_fire(state, open_run(row, T0 - TEN, "SENT", attempt=2))


@pytest.mark.parametrize("trigger", ["manual", "backfill", "external"])
def test_a_run_the_user_started_is_never_the_fires_own(trigger: str) -> None:
    """Even PENDING and under the occurrence's id: only beat's triggers are beat's work."""
    row = Row(next_occurrence=T0)
    run = open_run(row, T0, "PENDING", trigger=trigger)
    assert not recorded_by_unfinished_fire(state_of(row), run)


def test_a_run_under_another_id_is_never_the_fires_own() -> None:
    row = Row(next_occurrence=T0)
    run = open_run(row, T0, "PENDING", id="4c1f0e62-8f2a-4a8e-9d0b-1f1d3c0e9a77")
    assert not recorded_by_unfinished_fire(state_of(row), run)
    other_row = open_run(Row(id=8), T0, "PENDING")
    assert not recorded_by_unfinished_fire(state_of(row), other_row)


TIMERS = ["every 10s", "every 1m", "*/5 * * * *", "0 * * * *", "every 10s after completion"]


@settings(max_examples=300, deadline=None)
@given(
    timer=st.sampled_from(TIMERS),
    overlap=st.sampled_from(list(Overlap)),
    catchup=st.sampled_from(list(Catchup)),
    behind=st.integers(min_value=0, max_value=3 * 3600),
    later=st.integers(min_value=0, max_value=3600),
    previous=st.sampled_from([None, "SENT", "STARTED"]),
    retry=st.booleans(),
)
def test_a_fire_resumed_after_a_crash_sends_the_same_runs_under_the_same_ids(
    timer: str,
    overlap: Overlap,
    catchup: Catchup,
    behind: int,
    later: int,
    previous: str | None,
    retry: bool,
) -> None:
    """Whatever the policies and however late the next beat comes, the runs a dead
    beat recorded are sent as they are, and no other run is decided in their place."""
    first_occurrence = first_at_or_after(parse_timer(timer, "UTC", T0), T0)
    assert first_occurrence is not None
    row = Row(timer=timer, next_occurrence=first_occurrence, nextrun=first_occurrence)
    if retry:
        row = Row(
            timer=timer,
            next_occurrence=first_occurrence,
            retry_plan=first_occurrence - TEN,
            retry_attempt=2,
            retry_at=first_occurrence,
        )
    row = row.with_policies(Policies(overlap=overlap, catchup=catchup, max_attempts=3))
    live = [] if previous is None else [open_run(row, first_occurrence - 3600 * SECOND, previous)]
    now = first_occurrence + behind * SECOND

    first = prepare(row, live, now)
    left = recorded(row, first.records(now))
    again = prepare(row, [*live, *left], now + later * SECOND)

    assert sorted(again.run_ids) == sorted(first.run_ids)
    assert again.own == frozenset(first.run_ids)
    assert len(set(first.run_ids)) == len(first.run_ids)
    if first.run_ids:
        # Resumed, not decided again: nothing is revoked or skipped in their place.
        assert again.plan.revoke == [] and again.plan.skipped == 0
    assert all(record["status"] == RunStatus.PENDING for record in first.records(now))
    assert {record["trigger"] for record in first.records(now)} <= set(SCHEDULED_TRIGGERS)


def picked_by(wanted: Resumable, run: OpenRun) -> bool:
    """Whether storage reads ``run`` as one the row's unfinished fire may have recorded
    (the SQL of ``bridge.storage.runs.open_runs_to_decide``, in Python)."""
    planned = run.plan_time
    after = wanted.since is not None and planned is not None and planned >= wanted.since
    retry = planned == wanted.retry_plan and run.attempt == wanted.retry_attempt
    return run.status == RunStatus.PENDING or after or retry


OFFSETS = st.one_of(st.none(), st.integers(-7200, 7200).map(lambda s: T0 + s * SECOND))


@settings(max_examples=500, deadline=None)
@given(
    timer=st.sampled_from(TIMERS),
    cursor=OFFSETS,
    nextrun=OFFSETS,
    retry_at=OFFSETS,
    plan=st.integers(-7200, 7200).map(lambda s: T0 + s * SECOND),
    status=st.sampled_from([RunStatus.PENDING, RunStatus.SENT, RunStatus.STARTED]),
    attempt=st.integers(1, 3),
)
def test_every_run_a_fire_may_take_for_its_own_is_read_however_many_are_open(
    timer: str,
    cursor: datetime | None,
    nextrun: datetime | None,
    retry_at: datetime | None,
    plan: datetime,
    status: str,
    attempt: int,
) -> None:
    """Beat reads a few of a row's oldest open runs and those :func:`resumable` picks out:
    every run :func:`recorded_by_unfinished_fire` takes for the fire's own must be among
    them, whatever the cursor (off the grid, missing) and the owed retry."""
    retry = (T0 - TEN, 2) if retry_at is not None else (None, None)
    row = Row(
        timer=timer,
        next_occurrence=cursor,
        nextrun=nextrun,
        retry_at=retry_at,
        retry_plan=retry[0],
        retry_attempt=retry[1],
    )
    run = open_run(row, plan, status, id=run_id_for(row.id, plan, attempt), attempt=attempt)
    if recorded_by_unfinished_fire(state_of(row), run):
        assert picked_by(resumable(row), run)


@pytest.mark.parametrize(
    ("overlap", "read", "stale", "all_read"),
    [
        (Overlap.SKIP, OLDEST_OPEN_READ, OLDEST_OPEN_READ - 1, False),
        (Overlap.SKIP, OLDEST_OPEN_READ, OLDEST_OPEN_READ, True),
        (Overlap.ALLOW, OLDEST_OPEN_READ + 3, 0, False),
        (Overlap.REPLACE, OLDEST_OPEN_READ - 1, 0, False),
        (Overlap.REPLACE, OLDEST_OPEN_READ, 0, True),
    ],
)
def test_every_open_run_is_read_where_more_may_be_stale_or_replace_revokes_them(
    overlap: Overlap, read: int, stale: int, all_read: bool
) -> None:
    row = Row().with_policies(Policies(overlap=overlap))
    assert reads_all_open_runs(row, read, stale) is all_read


@given(
    policies=st.lists(
        st.tuples(st.sampled_from(list(Catchup)), st.sampled_from(list(Overlap))), max_size=600
    ),
    share=st.integers(min_value=1, max_value=100),
    batch_size=st.integers(min_value=1, max_value=500),
)
def test_a_backlog_is_fired_a_batch_of_messages_at_a_time_in_order(
    policies: list[tuple[Catchup, Overlap]], share: int, batch_size: int
) -> None:
    """Every row once, in the claim's order; each fire at most a batch size of messages
    (a row under catch-up ``all`` and overlap ``allow`` counting for its share), unless one
    row alone holds more; no fire that could have taken the next fire's first row too."""
    rows = [
        Row(id=i).with_policies(Policies(catchup=c, overlap=o)) for i, (c, o) in enumerate(policies)
    ]
    fires = fires_of_backlog(rows, share, batch_size)

    def messages(fire: list[Row]) -> int:
        return sum(
            share if (row.catchup, row.overlap) == (Catchup.ALL, Overlap.ALLOW) else 1
            for row in fire
        )

    assert [row.id for fire in fires for row in fire] == [row.id for row in rows]
    assert all(fire for fire in fires)
    assert all(messages(fire) <= batch_size or len(fire) == 1 for fire in fires)
    for fire, after in pairwise(fires):
        assert messages(fire) + messages(after[:1]) > batch_size


def test_a_burst_behind_time_is_one_fire_a_backlog_sent_together_a_quarter() -> None:
    """Rows that each send one occurrence (a burst, a backlog under overlap ``skip``) go in
    one fire of a batch; a backlog under ``allow`` sends its share of each, in four."""
    burst = [Row(id=i) for i in range(500)]
    skip = [Row(id=i).with_policies(Policies(catchup=Catchup.ALL)) for i in range(500)]
    allow = [
        Row(id=i).with_policies(Policies(catchup=Catchup.ALL, overlap=Overlap.ALLOW))
        for i in range(500)
    ]
    assert [len(f) for f in fires_of_backlog(burst, 4, 500)] == [500]
    assert [len(f) for f in fires_of_backlog(skip, 4, 500)] == [500]
    assert [len(f) for f in fires_of_backlog(allow, 4, 500)] == [125, 125, 125, 125]
