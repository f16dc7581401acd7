"""Applying the decisions to a schedule's row: after beat fires it, and after a run ends.

Beat and the workers change the same row concurrently: beat moves the cursor
of a row it has marked while a worker may be recording that a run failed
(owing a retry) or finished (freeing a held occurrence, starting a fixed
delay). Both therefore lock the row, read its current values and write only
what their decision owns, so neither undoes the other.

Each function runs inside its caller's unit of work (``session``), on rows
the caller has locked, or locks them itself in id order like every other
writer of schedule rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from bridge.rules.decisions import (
    FINISHED_NOTES,
    Outcome,
    Plan,
    State,
    Thresholds,
    advance,
    rest,
    settle,
)
from bridge.rules.edits import TIMING_COLUMNS, retimes
from bridge.rules.fire import ScheduleRow, state_of
from bridge.rules.kinds import RunStatus
from bridge.storage import runs, tally
from bridge.storage.counts import COUNTED_COLUMNS, count_ended, show_end
from bridge.storage.database import Transaction
from bridge.storage.incidents import Opening, open_incident
from bridge.storage.rows import Row, locked_rows, snapshot, write_changed

logger = logging.getLogger("bridge.lifecycle")

#: The columns :func:`apply_plan` writes, all of them: a batch writes them in one statement.
PLAN_COLUMNS = (
    "next_occurrence",
    "held",
    "retry_plan",
    "retry_attempt",
    "retry_at",
    "remaining",
    "skipped_count",
    "missed_count",
    "excluded_count",
    "last_run_at",
    "last_run_id",
    "last_status",
    "total_run_count",
    "nextrun",
    "enabled",
    "note",
    "worker",
    "marked",
)


#: What :func:`apply_plan` reads of a row as beat claimed it: its id, its timing and its
#: remaining runs.
CLAIMED_READ = ("id", "remaining", *TIMING_COLUMNS)


def apply_plan(
    session: Transaction,
    row: Row,
    claimed: ScheduleRow,
    plan: Plan,
    sent: list[str],
    now: datetime,
    thresholds: Thresholds,
    last_status: str | None = None,
) -> None:
    """Write a plan's outcome onto ``row`` (locked by the caller) and clear the mark.

    ``row`` holds the plain values of a row: beat's batches write
    :data:`PLAN_COLUMNS` of all their rows in one statement.

    ``claimed`` is the row as beat read it when it claimed it, ``sent`` the
    ids of the runs sent for the plan, the last one last, and ``last_status``
    that last run's status as read by the caller. An edit made meanwhile (a
    new timer, bounds or remaining runs) wins over the plan.
    """
    edited = retimes(claimed, {key: getattr(row, key) for key in TIMING_COLUMNS})
    if not edited:
        row.next_occurrence = plan.next_occurrence
        current = replace(state_of(row), next_occurrence=plan.next_occurrence)
        if sent and current.fixed_delay and plan.next_occurrence is None:
            # A quick worker may have finished the run already: its end starts the delay.
            ended = runs.ended_run(session, sent[-1])
            if ended is not None:
                done = settle(current, Outcome.of(ended), True, now, thresholds)
                row.next_occurrence = done.next_occurrence
                if done.finish_note is not None:
                    row.enabled, row.note = False, done.finish_note
    # As the row is now: a worker may have owed a new retry meanwhile, which stays owed.
    after = advance(state_of(row), plan)
    row.held = after.held
    row.retry_plan, row.retry_attempt, row.retry_at = (
        after.retry_plan,
        after.retry_attempt,
        after.retry_at,
    )
    if row.remaining == claimed.remaining:
        row.remaining = after.policies.remaining
    row.skipped_count += plan.skipped
    row.missed_count += plan.missed
    row.excluded_count += plan.excluded
    if plan.skipped or plan.missed:
        tally.add(session, row.id, now, skipped=plan.skipped, missed=plan.missed)
    if plan.missed:
        missed = f"{plan.missed} occurrence(s) were not run: {plan.missed_reason}"
        open_incident(session, Opening("missed", row.id, row.name, now, missed), now)
    if sent:
        last = sent[-1]
        row.last_run_at = now
        row.last_run_id = last
        row.last_status = last_status
        row.total_run_count += len(sent)
    _set_nextrun(session, row, now, plan.waiting)
    row.worker = None
    row.marked = None


def _set_nextrun(session: Transaction, row: Row, now: datetime, waiting: bool = False) -> None:
    """``nextrun`` from the row's cursor and pending work; finish a schedule with none left."""
    runs_open = (waiting or row.held is not None) and runs.has_open_runs(session, row.id)
    position = rest(state_of(row), row.next_occurrence, now, waiting, runs_open)
    row.nextrun = position.nextrun
    if position.finished is not None:
        row.enabled = False
        row.note = position.finished


def _latest_scheduled(session: Transaction, row: Row, state: State) -> str | None:
    """The id of the schedule's latest scheduled run, whose end starts a fixed delay.

    Only asked for fixed-delay schedules; manual and backfill runs do not count.
    """
    if not state.fixed_delay:
        return None
    return runs.latest_scheduled(session, row.id)


def give_up(
    session: Transaction,
    run_ids: Sequence[str],
    now: datetime,
    reason: str,
    thresholds: Thresholds,
) -> None:
    """End open runs ``LOST`` with ``reason`` and settle their schedules: a lost run may
    owe a retry, count towards the breaker, free a held occurrence or start a fixed
    delay, as a failure a worker reported does."""
    ended = runs.end_runs(session, run_ids, RunStatus.LOST, now, reason)
    settle_runs(session, [run_id for run_id, _ in ended], now, thresholds)


def settle_runs(
    session: Transaction, run_ids: Sequence[str], now: datetime, thresholds: Thresholds
) -> None:
    """Apply the consequences of runs that have just become final to their schedules.

    The runs that are final are read, then their schedules' rows locked in id
    order: callers that settle overlapping sets of schedules wait for each
    other instead of deadlocking. The runs themselves are locked first by
    whoever made them final, the order beat uses too. The rows are read and
    written as plain values (:mod:`bridge.storage.rows`), those that changed
    in one statement: through the ORM, ending the 10,000 runs of a burst whose
    messages expired cost beat as much CPU as sending them.
    """
    if not run_ids:
        return
    position = {run_id: index for index, run_id in enumerate(run_ids)}
    ended = runs.ended_runs(session, run_ids)
    rows = locked_rows(
        session, [run["periodic_task_id"] for run in ended if run["periodic_task_id"]]
    )
    before = snapshot(rows, SHOWN_COLUMNS)
    # Runs of one schedule are settled in the order given: each sees the row the one before left.
    for run in sorted(ended, key=lambda run: position[run["id"]]):
        row = rows.get(run["periodic_task_id"])
        if row is not None:
            show_end(row, run["id"], run["status"])
            settle_run(session, row, run["id"], Outcome.of(run), now, thresholds)
    write_changed(session, rows, before, SHOWN_COLUMNS)


#: The columns of a schedule's row that :func:`settle_run` may change.
SETTLE_COLUMNS = (
    *COUNTED_COLUMNS,
    "expired_count",
    "retry_plan",
    "retry_attempt",
    "retry_at",
    "failure_streak",
    "success_streak",
    "failing_since",
    "next_occurrence",
    "broken",
    "enabled",
    "note",
    "updated_at",
    "nextrun",
)
#: :data:`SETTLE_COLUMNS` and the status of the schedule's latest run, which the end of
#: that run changes, whoever ends it.
SHOWN_COLUMNS = ("last_status", *SETTLE_COLUMNS)


def settle_run(
    session: Transaction,
    row: Row,
    run_id: str,
    outcome: Outcome,
    now: datetime,
    thresholds: Thresholds,
) -> None:
    """Apply one run's final ``outcome`` to its schedule's ``row``, locked by the caller;
    ``thresholds`` are the app's, which the schedule's own override."""
    count_ended(session, row, outcome.status, outcome.finished_at, outcome.runtime)
    try:
        state = state_of(row)
    except ValueError:
        return  # a bad row: beat disables it with the reason when it comes due
    latest = _latest_scheduled(session, row, state) == run_id
    result = settle(state, outcome, latest, now, thresholds)
    if result.expired:
        row.expired_count += 1
    if result.retry is not None and (row.enabled or row.note in FINISHED_NOTES):
        # A schedule that finished with this run (its last occurrence)
        # comes back for the retry, and finishes again after it.
        row.retry_plan, row.retry_attempt, row.retry_at = result.retry
        row.enabled, row.note = True, None
    if result.streaks is not None:
        # Set only when they change: a row left clean costs the transaction no update.
        streaks = result.streaks
        row.failure_streak, row.success_streak = streaks.failures, streaks.successes
        row.failing_since = streaks.failing_since
    if result.next_occurrence is not None:
        row.next_occurrence = result.next_occurrence
    if result.broken_note is not None:
        row.broken = True
        logger.warning("bridge: schedule %r %s", row.name, result.broken_note)
    if result.broken_note or result.finish_note:
        row.enabled = False
        row.note = result.broken_note or result.finish_note
        row.updated_at = now
    if row.enabled and (result.retry or result.next_occurrence):
        _set_nextrun(session, row, now)
    if row.enabled and result.wake:
        # Work waiting for this run's end may go now.
        row.nextrun = now if row.nextrun is None else min(row.nextrun, now)
