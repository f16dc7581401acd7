"""canvas: a schedule that sends a Celery chain, group or chord

``periodic_task.signature`` keeps the canvas a schedule sends instead of its
task alone, in Celery's JSON form; ``task_execution.canvas_left`` counts, for
a run of a canvas, the tasks that end it and have yet to succeed. Nullable
columns at the tables' ends: PostgreSQL, MariaDB and SQLite add them without
rewriting the rows.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.add_column(sa.Column("signature", sa.Text(), nullable=True))
    with op.batch_alter_table("task_execution") as batch_op:
        batch_op.add_column(sa.Column("canvas_left", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_execution") as batch_op:
        batch_op.drop_column("canvas_left")
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.drop_column("signature")
