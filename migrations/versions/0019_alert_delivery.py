"""alert delivery: what the alert URLs said when they refused an alert

``incident.alert_attempts`` counts the tries in a row at the alert an
incident owes that an alert URL (``bridge_alert_urls``) refused, and
``alert_error`` says why the last one failed (the service, never the URL);
``alert_sent_to`` which targets have that alert already, so that they are
not sent it twice. All three are cleared once the alert goes out. The alert
is tried again after a backoff that grows with the attempts. Older releases
leave the three alone.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incident") as batch_op:
        batch_op.add_column(
            sa.Column("alert_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("alert_error", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("alert_sent_to", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("incident") as batch_op:
        batch_op.drop_column("alert_sent_to")
        batch_op.drop_column("alert_error")
        batch_op.drop_column("alert_attempts")
