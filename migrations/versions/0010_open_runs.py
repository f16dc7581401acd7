"""open runs: an index of the runs that have not ended, by schedule

Beat reads each claimed schedule's open runs before deciding it. Looked up
in ``ix_task_execution_schedule_status``, PostgreSQL preferred the status
index once the table held millions of ended runs (it believed open runs
rare), and read every open run of a burst for each schedule: the read grew
to 0.2-0.4 s a batch with 10,000,000 runs in the table. This index holds the
open runs alone, so the lookup reads only the schedule's own.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OPEN = sa.text("status IN ('PENDING', 'SENT', 'RECEIVED', 'STARTED', 'RETRY')")


def upgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        # No partial index there: beat's lookup reads ix_task_execution_schedule_status.
        return
    op.create_index(
        "ix_task_execution_open",
        "task_execution",
        ["periodic_task_id", "updated_at"],
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        return
    op.drop_index("ix_task_execution_open", table_name="task_execution")
