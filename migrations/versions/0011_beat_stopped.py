"""beat stopped: a beat that stops cleanly keeps its row, marked stopped

Workers open the ``no_beat`` incident once no beat has ticked for
``bridge_no_beat_alert``. A beat used to delete its ``beat_instance`` row as
it stopped, and with no row left a worker counted the silence from its own
start: a clean stop of the only beat opened the incident at once when the
worker had been up for longer than the setting. A stopped beat now keeps
its row with the time it stopped, and the latest row is never forgotten, so
the time of the last tick outlives every beat.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("beat_instance", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("beat_instance", schema=None) as batch_op:
        batch_op.drop_column("stopped_at")
