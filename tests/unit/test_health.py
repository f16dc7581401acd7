"""The health of a schedule, judged without I/O from its row, its open runs and now."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.decisions import FINISHED_NOTES
from bridge.rules.health import (
    TROUBLE,
    Health,
    OpenRunView,
    StateCounts,
    Watched,
    health_of,
    states_counted,
    worst,
)

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)
GRACE = timedelta(minutes=1)
HEALTHY = Watched(
    enabled=True,
    broken=False,
    note=None,
    nextrun=NOW + timedelta(minutes=5),
    failure_streak=0,
    last_run_at=NOW - timedelta(minutes=5),
    grace=GRACE,
    max_runtime=timedelta(minutes=10),
)


def run(
    status: str, plan_ago: float, started_ago: float | None = None, queued_ago: float | None = None
) -> OpenRunView:
    return OpenRunView(
        id=f"{status}-{plan_ago}",
        status=status,
        plan_time=NOW - timedelta(seconds=plan_ago),
        started_at=None if started_ago is None else NOW - timedelta(seconds=started_ago),
        queued_at=None if queued_ago is None else NOW - timedelta(seconds=queued_ago),
    )


def state(**changes: object) -> Health:
    return health_of(replace(HEALTHY, **changes), NOW).health  # type: ignore[arg-type]


def test_each_state_from_its_cause() -> None:
    assert state() is Health.OK
    assert state(broken=True, enabled=False, note="broken: 3 failures") is Health.BROKEN
    assert state(enabled=False, note="holiday") is Health.PAUSED
    assert state(enabled=False, note=None) is Health.PAUSED
    for done in FINISHED_NOTES:
        assert state(enabled=False, note=done) is Health.FINISHED
    # A person's note that merely looks alike is a pause.
    assert state(enabled=False, note="finished: for now") is Health.PAUSED
    assert state(open_runs=[run("STARTED", 700, 660)]) is Health.OVERRUN
    assert state(open_runs=[run("STARTED", 300, 290)]) is Health.RUNNING
    assert state(open_runs=[run("SENT", 300, queued_ago=120)]) is Health.LATE
    assert state(nextrun=NOW - timedelta(minutes=2)) is Health.LATE
    assert state(failure_streak=2, failing_since=NOW) is Health.FAILING
    assert state(failure_streak=2) is Health.OK  # below its alert_after
    assert state(last_run_at=None) is Health.NEW


def test_a_run_sent_late_is_waited_for_from_its_sending() -> None:
    """Occurrences beat catches up after an outage are not late the moment they go out."""
    caught_up = run("SENT", plan_ago=3600, queued_ago=5)
    assert state(open_runs=[caught_up]) is Health.OK
    stuck = run("SENT", plan_ago=3600, queued_ago=61)
    found = health_of(replace(HEALTHY, open_runs=[stuck]), NOW)
    assert found.health is Health.LATE
    assert found.runs == (stuck.id,)
    assert found.since == stuck.queued_at
    assert found.reason == "a run sent 1m ago has not started (grace 1m)"


def test_a_run_that_expired_unstarted_keeps_its_schedule_late_until_a_run_starts() -> None:
    """A stopped worker: each run expires at the next occurrence, unstarted."""
    expired = run("REVOKED", plan_ago=600, queued_ago=600)
    assert state(open_runs=[expired]) is Health.LATE
    assert state(open_runs=[expired], last_started=NOW - timedelta(seconds=30)) is Health.OK
    assert state(open_runs=[expired], last_started=NOW - timedelta(seconds=900)) is Health.LATE


def test_without_a_max_runtime_nothing_overruns() -> None:
    assert state(max_runtime=None, open_runs=[run("STARTED", 86400, 86400)]) is Health.RUNNING


def test_the_reasons_read_as_sentences() -> None:
    overrun = health_of(replace(HEALTHY, open_runs=[run("STARTED", 900, 900)]), NOW)
    assert overrun.reason == "a run has been going for more than its max runtime of 10m"
    assert overrun.since == NOW - timedelta(seconds=300)
    late = health_of(replace(HEALTHY, nextrun=NOW - timedelta(hours=2, minutes=5)), NOW)
    assert late.reason == "due 2h5m ago and not sent (grace 1m)"
    failing = health_of(replace(HEALTHY, failure_streak=1, failing_since=NOW), NOW)
    assert failing.reason == "its last 1 occurrence failed"
    assert failing.since == NOW
    recovering = health_of(replace(HEALTHY, success_streak=2, failing_since=NOW), NOW)
    assert recovering.health is Health.FAILING
    assert recovering.reason == "it failed, and has succeeded 2 times in a row since"


statuses = st.sampled_from(["PENDING", "SENT", "RECEIVED", "STARTED", "RETRY"])
seconds = st.floats(min_value=0, max_value=7200)
open_runs = st.lists(
    st.builds(
        lambda status, plan, started, queued: run(
            status, plan, started if status == "STARTED" else None, queued
        ),
        statuses,
        seconds,
        seconds,
        st.none() | seconds,
    ),
    max_size=4,
)
watched = st.builds(
    Watched,
    enabled=st.booleans(),
    broken=st.booleans(),
    note=st.none() | st.text(max_size=5),
    nextrun=st.none() | st.builds(lambda s: NOW + timedelta(seconds=s), st.floats(-7200, 7200)),
    failure_streak=st.integers(0, 5),
    failing_since=st.none() | st.just(NOW - timedelta(minutes=30)),
    success_streak=st.integers(0, 3),
    last_run_at=st.none() | st.just(NOW - timedelta(hours=1)),
    grace=st.builds(lambda s: timedelta(seconds=s), st.floats(1, 3600)),
    max_runtime=st.none() | st.builds(lambda s: timedelta(seconds=s), st.floats(1, 3600)),
    open_runs=open_runs,
)


@given(watched)
def test_the_most_pressing_cause_wins_whatever_the_order_of_the_runs(subject: Watched) -> None:
    found = health_of(subject, NOW)
    reordered = health_of(replace(subject, open_runs=list(reversed(subject.open_runs))), NOW)
    assert (found.health, found.since, set(found.runs)) == (
        reordered.health,
        reordered.since,
        set(reordered.runs),
    )
    if subject.broken:
        assert found.health is Health.BROKEN
    elif not subject.enabled:
        assert found.health is Health.PAUSED
    assert found.trouble == (found.health in TROUBLE)
    assert set(found.runs) <= {r.id for r in subject.open_runs}


@given(watched)
def test_a_healthy_row_with_nothing_open_is_ok_or_new(subject: Watched) -> None:
    calm = replace(
        subject,
        enabled=True,
        broken=False,
        failure_streak=0,
        failing_since=None,
        open_runs=[],
        nextrun=NOW + timedelta(seconds=1),
    )
    expected = Health.NEW if subject.last_run_at is None else Health.OK
    assert health_of(calm, NOW).health is expected


def test_worst_of_several() -> None:
    assert worst([Health.OK, Health.LATE, Health.RUNNING]) is Health.LATE
    assert worst([]) is Health.OK


def test_a_schedule_moves_to_the_state_its_runs_name_when_that_is_more_pressing() -> None:
    by_columns = {"failing": 2, "ok": 3}
    others = [("overrun", "failing"), ("running", "failing"), ("running", "ok")]
    counts = states_counted(StateCounts(by_columns, others))
    assert counts == {"failing": 1, "overrun": 1, "ok": 2, "running": 1}
    assert sum(counts.values()) == 5 and by_columns == {"failing": 2, "ok": 3}
