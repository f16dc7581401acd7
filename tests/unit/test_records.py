"""Tests of bridge.rules.records: how the status changes workers report apply to a run.

Each change is a compare-and-set on the run's status. A worker's backlog
writes its changes in batches; :meth:`Effects.of` must give a batch exactly
the effect the same changes would have had written one at a time, which is
what the run history shows a user.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.decisions import Outcome
from bridge.rules.kinds import FINAL_STATUSES, RunStatus, Trigger
from bridge.rules.records import NOT_RECEIVED, NOT_STARTED, ON_ITS_WAY, OPEN, Change, Effects

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PLAN = datetime(2026, 3, 1, 11, 59, 50, tzinfo=UTC)


@dataclass(frozen=True)
class Run:
    """A run's record as the worker's batch reads it (locked)."""

    status: str
    periodic_task_id: int | None = 7
    trigger: str = "scheduled"
    plan_time: datetime | None = PLAN
    attempt: int = 1
    queued_at: datetime | None = None
    started_at: datetime | None = None
    #: Of a run of a canvas, the successes of its ending tasks it waits for.
    canvas_left: int | None = None


class Reply:
    """Where the maker of a change learns whether it applied."""

    def __init__(self) -> None:
        self.given: list[bool | None] = []

    def give(self, value: bool | None) -> None:
        self.given.append(value)

    def wait(self, timeout: float) -> bool | None:
        return self.given[-1] if self.given else None


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


# The changes the recorder and BridgeTask report, each with the statuses it moves from.
def received(run_id: str, when: datetime, worker: str = "w1") -> Change:
    return Change(run_id, RunStatus.RECEIVED, NOT_RECEIVED, when, {"worker": worker}, queued=True)


def started(run_id: str, when: datetime, worker: str = "w1") -> Change:
    return Change(run_id, RunStatus.STARTED, OPEN, when, {"worker": worker, "started_at": when})


def start_once(run_id: str, when: datetime, worker: str, reply: Reply | None = None) -> Change:
    values = {"worker": worker, "started_at": when}
    return Change(run_id, RunStatus.STARTED, NOT_STARTED, when, values, reply=reply)


def retried(run_id: str, when: datetime) -> Change:
    return Change(run_id, RunStatus.RETRY, OPEN, when, {"error": "Retry in 5s"})


def ended(run_id: str, status: RunStatus, when: datetime, **values: Any) -> Change:
    return Change(run_id, status, OPEN, when, {"finished_at": when, **values})


# ------------------------------------------------------------------ compare-and-set


def test_a_run_moves_through_its_reported_statuses() -> None:
    changes = [
        received("r", at(1)),
        started("r", at(2)),
        ended("r", RunStatus.SUCCESS, at(3), result="3"),
    ]
    effects = Effects.of(changes, {"r": Run("SENT")})
    assert effects.status == {"r": RunStatus.SUCCESS}
    assert effects.values["r"] == {
        "status": "SUCCESS",
        "updated_at": at(3),
        "queued_at": at(1),
        "worker": "w1",
        "started_at": at(2),
        "finished_at": at(3),
        "result": "3",
    }
    assert effects.ended == ["r"]


def test_a_late_receipt_does_not_move_a_started_or_ended_run_back() -> None:
    """The worker's RECEIVED can reach the batch after the run started or even ended."""
    effects = Effects.of(
        [started("r", at(2)), received("r", at(1))], {"r": Run("SENT", queued_at=at(0))}
    )
    assert effects.status["r"] is RunStatus.STARTED
    assert effects.values["r"]["updated_at"] == at(2)
    assert "queued_at" not in effects.values["r"]

    effects = Effects.of([received("late", at(5))], {"late": Run("SUCCESS")})
    assert effects.status["late"] is RunStatus.SUCCESS
    assert effects.values == {}
    assert effects.ended == []


def test_a_repeated_end_is_left_out() -> None:
    """A second SUCCESS (a redelivery) neither rewrites the record nor ends the run twice."""
    first = ended("r", RunStatus.SUCCESS, at(3), result="first")
    again = ended("r", RunStatus.SUCCESS, at(9), result="again")
    effects = Effects.of([first, again], {"r": Run("STARTED")})
    assert effects.values["r"]["result"] == "first"
    assert effects.values["r"]["updated_at"] == at(3)
    assert effects.ended == ["r"]


@pytest.mark.parametrize("final", sorted(FINAL_STATUSES))
def test_no_report_reopens_a_final_run(final: RunStatus) -> None:
    changes = [
        received("r", at(1)),
        started("r", at(2)),
        start_once("r", at(2), "w2"),
        retried("r", at(3)),
        ended("r", RunStatus.FAILURE, at(4), error="boom"),
    ]
    effects = Effects.of(changes, {"r": Run(final.value)})
    assert effects.status == {"r": final}
    assert effects.values == {}
    assert effects.ended == []


def test_of_two_compare_and_set_starts_only_the_first_wins() -> None:
    """Two deliveries of one run (BridgeTask): the first starts it, the second is told no."""
    first, second = Reply(), Reply()
    changes = [start_once("r", at(1), "w1", first), start_once("r", at(2), "w2", second)]
    effects = Effects.of(changes, {"r": Run("SENT")})
    for reply, answer in effects.replies:
        reply.give(answer)
    assert (first.given, second.given) == ([True], [False])
    assert effects.status["r"] is RunStatus.STARTED
    assert effects.values["r"]["worker"] == "w1"
    assert effects.values["r"]["started_at"] == at(1)


def test_a_retried_run_may_be_started_again_by_its_next_delivery() -> None:
    reply = Reply()
    changes = [
        start_once("r", at(1), "w1"),
        retried("r", at(2)),
        start_once("r", at(3), "w2", reply),
    ]
    effects = Effects.of(changes, {"r": Run("SENT")})
    assert [answer for _, answer in effects.replies] == [True]
    assert effects.values["r"]["worker"] == "w2"


def test_a_run_without_a_record_is_not_guarded() -> None:
    """Nothing is written for it here, and a delivery waiting to start it is let run."""
    reply = Reply()
    effects = Effects.of([start_once("unknown", at(1), "w1", reply)], {})
    assert effects.values == {} and effects.ended == []
    assert [answer for _, answer in effects.replies] == [True]


# The recorder's vocabulary of changes, as (status, moves_from).
KINDS = [
    (RunStatus.RECEIVED, NOT_RECEIVED),
    (RunStatus.STARTED, OPEN),
    (RunStatus.STARTED, NOT_STARTED),
    (RunStatus.STARTED, ON_ITS_WAY),
    (RunStatus.RETRY, OPEN),
    (RunStatus.SUCCESS, OPEN),
    (RunStatus.FAILURE, OPEN),
    (RunStatus.REVOKED, OPEN),
]

changes_of_two_runs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(KINDS),
        st.booleans(),
        st.sampled_from(["w1", "w2"]),
    ),
    max_size=8,
)


def batch(
    drawn: list[tuple[str, tuple[RunStatus, frozenset[RunStatus]], bool, str]],
) -> list[Change]:
    return [
        Change(
            run_id,
            status,
            moves_from,
            at(i),
            {"worker": worker, f"by_{i}": True},
            queued=queued,
            reply=Reply(),
            # A success reported by w2 is that of one of the tasks ending a canvas.
            part=status is RunStatus.SUCCESS and worker == "w2",
        )
        for i, (run_id, (status, moves_from), queued, worker) in enumerate(drawn)
    ]


def written(run: Run, values: dict[str, Any]) -> dict[str, Any]:
    """The record once ``values`` are written over ``run``."""
    return {**asdict(run), **values}


@given(
    changes_of_two_runs,
    st.sampled_from([s.value for s in RunStatus]),
    st.sampled_from([s.value for s in RunStatus]),
    st.booleans(),
    st.sampled_from([None, 1, 2, 3]),
)
def test_a_batch_does_what_its_changes_would_do_written_one_at_a_time(
    drawn: list[Any], status_a: str, status_b: str, queued: bool, canvas_left: int | None
) -> None:
    runs = {
        "a": Run(status_a, queued_at=at(-5) if queued else None, canvas_left=canvas_left),
        "b": Run(status_b, periodic_task_id=None, trigger="external"),
    }
    changes = batch(drawn)
    together = Effects.of(changes, runs)

    records = {run_id: written(run, {}) for run_id, run in runs.items()}
    answers = []
    ends = []
    for change in changes:
        alone = Effects.of([change], {k: SimpleNamespace(**v) for k, v in records.items()})
        answers += [answer for _, answer in alone.replies]
        ends += alone.ended
        for run_id, values in alone.values.items():
            records[run_id] = {**records[run_id], **values}

    for run_id, run in runs.items():
        assert written(run, together.values.get(run_id, {})) == records[run_id]
        assert together.status[run_id] == RunStatus(records[run_id]["status"])
    assert [answer for _, answer in together.replies] == answers
    assert together.ended == ends
    # A run ends at most once, and only a final status ends it.
    assert len(set(together.ended)) == len(together.ended)
    assert all(together.status[run_id].is_final for run_id in together.ended)


# -------------------------------------------------------------------------- outcomes


def test_the_outcome_of_a_failed_run_is_what_its_schedule_settles() -> None:
    run = Run("STARTED", trigger="retry", attempt=2)
    effects = Effects.of([ended("r", RunStatus.FAILURE, at(4), error="ValueError: no")], {"r": run})
    assert effects.outcome("r") == Outcome(
        trigger=Trigger.RETRY,
        status=RunStatus.FAILURE,
        plan_time=PLAN,
        attempt=2,
        finished_at=at(4),
        error="ValueError: no",
    )


def test_a_run_ended_without_a_finish_time_ended_when_its_status_changed() -> None:
    revoked = Change("r", RunStatus.REVOKED, OPEN, at(6), {"error": "expired"})
    effects = Effects.of([revoked], {"r": Run("SENT")})
    outcome = effects.outcome("r")
    assert (outcome.status, outcome.finished_at, outcome.error) == (
        RunStatus.REVOKED,
        at(6),
        "expired",
    )


def test_a_success_after_a_retry_keeps_the_error_the_record_keeps() -> None:
    """The batch's outcome says what the record says once the batch is written."""
    changes = [retried("r", at(1)), ended("r", RunStatus.SUCCESS, at(2))]
    outcome = Effects.of(changes, {"r": Run("STARTED")}).outcome("r")
    assert (outcome.status, outcome.error) == (RunStatus.SUCCESS, "Retry in 5s")


def test_an_outcome_reads_a_mapping_and_a_row_alike() -> None:
    columns = {
        "trigger": "catchup",
        "status": "LOST",
        "plan_time": PLAN,
        "attempt": 1,
        "finished_at": None,
        "updated_at": at(9),
        "error": "no status change for over 3600s; presumed lost by beat",
        "runtime": None,
    }

    @dataclass
    class Record:
        trigger: str
        status: str
        plan_time: datetime
        attempt: int
        finished_at: datetime | None
        updated_at: datetime
        error: str
        runtime: float | None

    outcome = Outcome.of(columns)
    assert outcome == Outcome.of(Record(**columns))
    assert outcome.trigger is Trigger.CATCHUP
    assert outcome.status is RunStatus.LOST
    assert outcome.finished_at == at(9)
    assert Outcome.of({**columns, "finished_at": at(3)}).finished_at == at(3)


def test_an_outcome_refuses_a_status_or_trigger_that_does_not_exist() -> None:
    record = {"trigger": "scheduled", "plan_time": PLAN, "attempt": 1, "finished_at": at(1)}
    with pytest.raises(ValueError, match="DONE"):
        Outcome.of({**record, "status": "DONE", "error": None})
    with pytest.raises(ValueError, match="weekly"):
        Outcome.of({**record, "status": "SUCCESS", "trigger": "weekly", "error": None})


# -------------------------------------------------------------------------- canvas


def part(run_id: str, when: datetime) -> Change:
    return Change(run_id, RunStatus.SUCCESS, OPEN, when, {"finished_at": when}, part=True)


def test_a_canvas_run_ends_with_the_last_of_its_ending_tasks() -> None:
    """A group of three ending tasks: the run stays open through two successes, ends
    SUCCESS with the third, and lasts from its first task's start to that end."""
    runs = {"r": Run("STARTED", started_at=at(0), canvas_left=3)}
    effects = Effects.of([part("r", at(5)), part("r", at(7))], runs)
    assert effects.status["r"] is RunStatus.STARTED and not effects.ended
    assert effects.values["r"]["canvas_left"] == 1
    written_run = Run("STARTED", started_at=at(0), canvas_left=1)
    effects = Effects.of([part("r", at(9))], {"r": written_run})
    assert effects.ended == ["r"] and effects.status["r"] is RunStatus.SUCCESS
    assert effects.values["r"]["runtime"] == 9.0 and effects.values["r"]["canvas_left"] == 0


def test_a_failure_of_any_task_ends_a_canvas_run_and_keeps_the_first_error() -> None:
    runs = {"r": Run("STARTED", started_at=at(0), canvas_left=2)}
    effects = Effects.of(
        [
            part("r", at(1)),
            ended("r", RunStatus.FAILURE, at(2), error="RuntimeError: first"),
            ended("r", RunStatus.FAILURE, at(3), error="RuntimeError: second"),
            part("r", at(4)),
        ],
        runs,
    )
    assert effects.ended == ["r"] and effects.status["r"] is RunStatus.FAILURE
    assert effects.values["r"]["error"] == "RuntimeError: first"
    assert effects.values["r"]["runtime"] == 2.0
