"""run trace: the OpenTelemetry trace of a run beat sent

``task_execution.trace_id`` keeps the trace id of beat's span ``bridge.fire``
of the run (``bridge_tracing``), so that a run leads to its trace. A nullable
column at the table's end: PostgreSQL, MariaDB and SQLite add it without
rewriting the runs.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_execution") as batch_op:
        batch_op.add_column(sa.Column("trace_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_execution") as batch_op:
        batch_op.drop_column("trace_id")
