"""operators: labels, the audit log, run counts on the schedule, runs listed by time

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: The counters of ended runs, by final status.
COUNTERS = ("success_count", "failure_count", "revoked_count", "lost_count")


def upgrade() -> None:
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        for name in COUNTERS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("runtime_total", sa.Float(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True))
    # Schedules that ran before this revision start their counts from their records.
    schedules = sa.table(
        "periodic_task",
        sa.column("id"),
        *(sa.column(name) for name in (*COUNTERS, "runtime_total")),
    )
    runs = sa.table(
        "task_execution", sa.column("periodic_task_id"), sa.column("status"), sa.column("runtime")
    )
    of_schedule = runs.c.periodic_task_id == schedules.c.id
    counts = {
        name: sa.select(sa.func.count())
        .where(of_schedule, runs.c.status == status)
        .scalar_subquery()
        for status, name in zip(("SUCCESS", "FAILURE", "REVOKED", "LOST"), COUNTERS, strict=True)
    }
    total = sa.select(sa.func.coalesce(sa.func.sum(runs.c.runtime), 0)).where(of_schedule)
    op.execute(schedules.update().values(**counts, runtime_total=total.scalar_subquery()))
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_task_execution_plan_time_id"), ["plan_time", "id"], unique=False
        )
    op.create_table(
        "schedule_label",
        sa.Column("periodic_task_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["periodic_task_id"],
            ["periodic_task.id"],
            name=op.f("fk_schedule_label_periodic_task_id_periodic_task"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("periodic_task_id", "label", name=op.f("pk_schedule_label")),
    )
    op.create_index(
        "ix_schedule_label_label", "schedule_label", ["label", "periodic_task_id"], unique=False
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=True),
        sa.Column("schedule_name", sa.String(length=200), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(
        "ix_audit_log_schedule_name_id", "audit_log", ["schedule_name", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_audit_log_schedule_name_id", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_index("ix_schedule_label_label", table_name="schedule_label")
    op.drop_table("schedule_label")
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_task_execution_plan_time_id"))
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        for name in (*COUNTERS, "runtime_total", "last_success_at", "last_failure_at"):
            batch_op.drop_column(name)
