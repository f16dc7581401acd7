"""run expiry: when a sent run's message expires, and how many runs of a schedule expired

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("expired_count", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        batch_op.drop_column("expired_count")
    with op.batch_alter_table("task_execution", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
