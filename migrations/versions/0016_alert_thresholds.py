"""alert thresholds: a schedule is failing from its N-th failure in a row to its M-th success

``alert_after`` and ``recover_after`` are the schedule's own thresholds (NULL:
the app's ``bridge_default_alert_after`` and ``bridge_default_recover_after``).
``failing_since`` says since when it is failing, ``success_streak`` how many
runs in a row succeeded since: what the health, the watchdog and the
``failing`` incident read, where they read ``failure_streak > 0`` before.
Schedules failing before the upgrade (a failure streak) are failing from their
last failure, as the defaults of 1 and 1 have it. The watchdog's index of the
schedules in trouble is rebuilt on the new predicate (on MySQL and MariaDB, its
generated column).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_NEW = "failing_since IS NOT NULL OR broken"
_OLD = "failure_streak > 0 OR broken"


def upgrade() -> None:
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.add_column(sa.Column("alert_after", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("recover_after", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("success_streak", sa.Integer(), nullable=False, server_default="0")
        )
    table = sa.table(
        "periodic_task",
        sa.column("failure_streak", sa.Integer()),
        sa.column("failing_since", sa.DateTime(timezone=True)),
        sa.column("last_failure_at", sa.DateTime(timezone=True)),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        table.update()
        .where(table.c.failure_streak > 0)
        .values(failing_since=sa.func.coalesce(table.c.last_failure_at, table.c.updated_at))
    )
    _trouble_index(_NEW)


def downgrade() -> None:
    _trouble_index(_OLD)
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.drop_column("success_streak")
        batch_op.drop_column("failing_since")
        batch_op.drop_column("recover_after")
        batch_op.drop_column("alert_after")


def _trouble_index(predicate: str) -> None:
    """``ix_periodic_task_trouble`` rebuilt on ``predicate``: a partial index, or on MySQL
    and MariaDB the index of the generated column ``troubled`` (revision 0015)."""
    op.drop_index("ix_periodic_task_trouble", table_name="periodic_task")
    if op.get_bind().dialect.name == "mysql":
        op.drop_column("periodic_task", "troubled")
        op.add_column(
            "periodic_task",
            sa.Column(
                "troubled",
                sa.Integer(),
                sa.Computed(f"CASE WHEN {predicate} THEN 1 END", persisted=False),
                nullable=True,
            ),
        )
        op.create_index("ix_periodic_task_trouble", "periodic_task", ["troubled", "id"])
        return
    op.create_index(
        "ix_periodic_task_trouble",
        "periodic_task",
        ["id"],
        unique=False,
        postgresql_where=sa.text(predicate),
        sqlite_where=sa.text(predicate),
    )
