"""replace with: how overlap ``replace`` ends the open runs

``replace_with`` is ``terminate`` (every open run revoked, and terminated
where it executes: what ``replace`` always did, and what every schedule keeps)
or ``revoke`` (the open runs revoked if no worker executes them yet; one
already executing finishes beside the new run).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.add_column(
            sa.Column("replace_with", sa.String(16), nullable=False, server_default="terminate")
        )


def downgrade() -> None:
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.drop_column("replace_with")
