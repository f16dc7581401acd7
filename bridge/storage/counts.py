"""The counts of runs that ended: on their schedule's row, and in its tally of the hour.

Counting decides nothing: a run that ended adds one to its status's counter
whether or not its end has consequences for the schedule (those are the
settlement's, :mod:`bridge.service.settlement`). Runs that end with none (a
replaced run ``REVOKED``, one beat could not send) are only counted, by
:func:`count_unsettled`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from bridge.rules.kinds import RunStatus
from bridge.storage import tally
from bridge.storage.rows import Row, locked_rows, write_rows

#: The column of ``periodic_task`` counting the runs that ended with each final status,
#: and the count of ``schedule_tally`` that counts them by hour.
COUNTER_OF = {
    RunStatus.SUCCESS: ("success_count", "success"),
    RunStatus.FAILURE: ("failure_count", "failure"),
    RunStatus.REVOKED: ("revoked_count", "revoked"),
    RunStatus.LOST: ("lost_count", "lost"),
}

#: The columns of a schedule's row :func:`count_ended` changes.
COUNTED_COLUMNS = (
    *sorted({counter for counter, _ in COUNTER_OF.values()}),
    "runtime_total",
    "last_success_at",
    "last_failure_at",
)


def count_ended(
    session: Session,
    row: Row,
    status: RunStatus,
    at: datetime,
    runtime: float | None = None,
) -> None:
    """Count a run that ended on its schedule's ``row`` (locked by the caller) and in its
    tally of the hour: by status, its runtime, and when the schedule last succeeded or
    failed."""
    counter, hourly = COUNTER_OF[status]
    setattr(row, counter, (getattr(row, counter) or 0) + 1)
    tally.add(session, row.id, at, **{hourly: 1, "runtime": runtime or 0.0})
    if runtime:
        row.runtime_total = (row.runtime_total or 0.0) + runtime
    if status is RunStatus.SUCCESS:
        row.last_success_at = at if row.last_success_at is None else max(row.last_success_at, at)
    elif status in (RunStatus.FAILURE, RunStatus.LOST):
        row.last_failure_at = at if row.last_failure_at is None else max(row.last_failure_at, at)


def show_end(row: Row, run_id: str, status: str) -> None:
    """Show ``status`` on the schedule ``row`` (locked by the caller) when the run
    ``run_id`` is its latest: what ``bridge ls``, the API and the dashboard say of it,
    whoever ended the run."""
    if row.last_run_id == run_id:
        row.last_status = status


def count_unsettled(
    session: Session, ended: Sequence[tuple[str, int]], status: RunStatus, at: datetime
) -> None:
    """Count runs that ended without a settlement (revoked, or not sent), given as (run id,
    schedule id), on their schedules, locked in id order like every other writer of
    schedule rows; a schedule whose latest run is one of them shows its status."""
    rows = locked_rows(session, [schedule_id for _, schedule_id in ended])
    for run_id, schedule_id in ended:
        row = rows.get(schedule_id)
        if row is not None:
            count_ended(session, row, status, at)
            show_end(row, run_id, status.value)
    write_rows(session, [rows[key] for key in sorted(rows)], (*COUNTED_COLUMNS, "last_status"))
