"""schedules in trouble on MySQL: the watchdog's partial index, as a generated column

The watchdog looks at the schedules that are failing or broken at every
pass, through ``ix_periodic_task_trouble``, an index of the ids of those
rows alone (``WHERE failure_streak > 0 OR broken``). MySQL and MariaDB have
no partial index, so revision 0008 left it out there, and each pass read
every schedule: 25 to 40 ms at 100,000 schedules, ten times that at a
million. Here a virtual column ``troubled`` is 1 for such a row and NULL
for the others, and the index holds it with the id: the watchdog reads the
rows where it is 1, in id order. The model leaves the column out (it is
only read by the watchdog's look-up, see ``bridge.storage.health``).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        op.add_column(
            "periodic_task",
            sa.Column(
                "troubled",
                sa.Integer(),
                sa.Computed("CASE WHEN failure_streak > 0 OR broken THEN 1 END", persisted=False),
                nullable=True,
            ),
        )
        op.create_index("ix_periodic_task_trouble", "periodic_task", ["troubled", "id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        op.drop_index("ix_periodic_task_trouble", table_name="periodic_task")
        op.drop_column("periodic_task", "troubled")
