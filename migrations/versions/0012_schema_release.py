"""schema release: the oldest release that may run against the store; what history gives

``schema_release`` holds one row, the oldest release of the bridge whose
processes may run against the schema. Each process compares its own release
with it as it starts, and refuses to run when it is older. This revision
writes 0.2.0, the first release to check it: 0.2.0 reads and writes columns
that earlier revisions lack. A later revision raises it when it changes
something an older release relies on, and leaves it where it only adds.

Revisions 0007 and 0008 added columns and a table that the runs already
recorded could have filled, and left them empty: a schedule upgraded from
0.1.0 showed no last success or failure, and its statistics counted no runs
beside the durations of the runs it had. This revision fills them from
``task_execution``:

* ``last_success_at``, ``last_failure_at``: when the latest SUCCESS, and the
  latest FAILURE or LOST run, ended (as the workers and beat set them), where
  they are empty;
* ``schedule_tally``: the runs that ended, by status and hour, and their
  runtime, for the schedules that have no tally at all (those that ended no
  run since 0008). Skipped and missed occurrences stay out of the hourly
  tallies: before 0008 only their totals were kept, not when they happened.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import sqlalchemy as sa
from alembic import op

from bridge.storage.models import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

#: The oldest release that may run against the schema this revision leaves.
OLDEST_RELEASE = "0.2.0"

#: The count of ``schedule_tally`` for each final status.
TALLIED = {"SUCCESS": "success", "FAILURE": "failure", "REVOKED": "revoked", "LOST": "lost"}
#: Rows written to ``schedule_tally`` per statement.
CHUNK = 1000

schedules = sa.table(
    "periodic_task",
    sa.column("id", sa.Integer()),
    sa.column("last_success_at", UTCDateTime()),
    sa.column("last_failure_at", UTCDateTime()),
)
runs = sa.table(
    "task_execution",
    sa.column("periodic_task_id", sa.Integer()),
    sa.column("status", sa.String()),
    sa.column("finished_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
    sa.column("runtime", sa.Float()),
)
tallies = sa.table(
    "schedule_tally",
    sa.column("periodic_task_id", sa.Integer()),
    sa.column("hour", UTCDateTime()),
    *(sa.column(name, sa.Integer()) for name in TALLIED.values()),
    sa.column("runtime", sa.Float()),
)
#: When a run ended: its finish, or for a run that never finished (lost, revoked
#: unstarted) the last change of its record, which was that ending.
ended_at = sa.func.coalesce(runs.c.finished_at, runs.c.updated_at)


def upgrade() -> None:
    op.create_table(
        "schema_release",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("oldest_release", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schema_release")),
    )
    op.execute(
        sa.table("schema_release", sa.column("id"), sa.column("oldest_release"))
        .insert()
        .values(id=1, oldest_release=OLDEST_RELEASE)
    )
    _fill_last_ended()
    _fill_tallies()


def _fill_last_ended() -> None:
    of_schedule = runs.c.periodic_task_id == schedules.c.id
    for column, statuses in (
        (schedules.c.last_success_at, ("SUCCESS",)),
        (schedules.c.last_failure_at, ("FAILURE", "LOST")),
    ):
        latest = sa.select(sa.func.max(ended_at)).where(of_schedule, runs.c.status.in_(statuses))
        op.execute(
            schedules.update().where(column.is_(None)).values({column: latest.scalar_subquery()})
        )


def _fill_tallies() -> None:
    """Sum the ended runs of the schedules without a tally by hour, reading the runs as a
    stream: a history of millions of runs becomes a few rows per schedule and hour."""
    tallied = sa.select(tallies.c.periodic_task_id).distinct()
    ended = sa.select(runs.c.periodic_task_id, runs.c.status, ended_at, runs.c.runtime).where(
        runs.c.status.in_(list(TALLIED)),
        runs.c.periodic_task_id.is_not(None),
        runs.c.periodic_task_id.not_in(tallied),
    )
    hours: dict[tuple[int, datetime], Counter[str]] = {}
    connection = op.get_bind()
    for schedule_id, status, at, runtime in connection.execute(
        ended.execution_options(stream_results=True, yield_per=10_000)
    ):
        hour = at.replace(minute=0, second=0, microsecond=0)
        counts = hours.setdefault((schedule_id, hour), Counter())
        counts[TALLIED[status]] += 1
        counts["runtime"] += runtime or 0.0
    rows = [
        {
            "periodic_task_id": schedule_id,
            "hour": hour,
            **{name: int(counts[name]) for name in TALLIED.values()},
            "runtime": float(counts["runtime"]),
        }
        for (schedule_id, hour), counts in sorted(hours.items())
    ]
    for start in range(0, len(rows), CHUNK):
        connection.execute(tallies.insert(), rows[start : start + CHUNK])


def downgrade() -> None:
    # The filled columns and tallies stay: they are what the runs say.
    op.drop_table("schema_release")
