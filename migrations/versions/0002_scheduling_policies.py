"""scheduling policies: their columns, their state, and the stale-run sweep index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("next_occurrence", sa.DateTime(timezone=True), None),
    ("catchup", sa.String(length=16), "latest"),
    ("catchup_window", sa.Float(), None),
    ("jitter", sa.Float(), "0"),
    ("start_at", sa.DateTime(timezone=True), None),
    ("end_at", sa.DateTime(timezone=True), None),
    ("remaining", sa.Integer(), None),
    ("max_failures", sa.Integer(), None),
    ("max_attempts", sa.Integer(), "1"),
    ("backoff", sa.String(length=200), None),
    ("expires", sa.String(length=32), "next"),
    ("held", sa.DateTime(timezone=True), None),
    ("retry_plan", sa.DateTime(timezone=True), None),
    ("retry_attempt", sa.Integer(), None),
    ("retry_at", sa.DateTime(timezone=True), None),
    ("failure_streak", sa.Integer(), "0"),
)


def upgrade() -> None:
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        for name, kind, default in _COLUMNS:
            batch_op.add_column(
                sa.Column(name, kind, nullable=default is None, server_default=default)
            )
    # Existing schedules: the occurrence they wait for is the time they are due.
    op.execute("UPDATE periodic_task SET next_occurrence = nextrun")
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.create_index(
            "ix_task_execution_status_updated", ["status", "updated_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.drop_index("ix_task_execution_status_updated")
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        for name, _kind, _default in reversed(_COLUMNS):
            batch_op.drop_column(name)
