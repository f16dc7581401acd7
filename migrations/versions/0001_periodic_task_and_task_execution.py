"""periodic_task and task_execution

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "periodic_task",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("kwargs", sa.Text(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("timer", sa.String(length=200), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("anchor", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("nextrun", sa.DateTime(timezone=True), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("marked", sa.DateTime(timezone=True), nullable=True),
        sa.Column("overlap", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("broken", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_run_id", sa.String(length=36), nullable=True),
        sa.Column("last_status", sa.String(length=16), nullable=True),
        sa.Column("total_run_count", sa.Integer(), nullable=False),
        sa.Column("skipped_count", sa.Integer(), nullable=False),
        sa.Column("missed_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_periodic_task")),
        sa.UniqueConstraint("name", name=op.f("uq_periodic_task_name")),
    )
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        batch_op.create_index("ix_periodic_task_due", ["enabled", "nextrun"], unique=False)

    op.create_table(
        "task_execution",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("periodic_task_id", sa.Integer(), nullable=True),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("plan_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("runtime", sa.Float(), nullable=True),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["periodic_task_id"],
            ["periodic_task.id"],
            name=op.f("fk_task_execution_periodic_task_id_periodic_task"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_execution")),
        sa.UniqueConstraint(
            "periodic_task_id",
            "plan_time",
            "attempt",
            name=op.f("uq_task_execution_periodic_task_id_plan_time_attempt"),
        ),
    )
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.create_index(
            "ix_task_execution_schedule_status", ["periodic_task_id", "status"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.drop_index("ix_task_execution_schedule_status")

    op.drop_table("task_execution")
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        batch_op.drop_index("ix_periodic_task_due")

    op.drop_table("periodic_task")
