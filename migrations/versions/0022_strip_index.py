"""strips from the index: each schedule's runs by plan time carry their status

The dashboard's list shows each schedule's latest runs as a strip of
statuses, read along the unique index on ``(periodic_task_id, plan_time,
attempt)``. With the status only in the table, each of those runs was a read
of a table page of its own, and a page of 100 schedules outside PostgreSQL's
buffers waited for hundreds of them. On PostgreSQL the index now carries the
status (``INCLUDE``), so a strip is read from the index alone once vacuum has
marked the table's pages all-visible. MySQL, MariaDB and SQLite have no
``INCLUDE``: their index is left as it is.

The index is built again under the table's lock (``ACCESS EXCLUSIVE``): on
PostgreSQL about a second a million runs, while nothing reads or records a
run. ``INCLUDE`` needs PostgreSQL 11 or later.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

TABLE = "task_execution"
NAME = "uq_task_execution_periodic_task_id_plan_time_attempt"
# Written out: Alembic's constraint knows only the key's columns, not one it includes.
UNIQUE = f"ALTER TABLE {TABLE} ADD CONSTRAINT {NAME} UNIQUE (periodic_task_id, plan_time, attempt)"


def upgrade() -> None:
    _rebuild(f"{UNIQUE} INCLUDE (status)")


def downgrade() -> None:
    _rebuild(UNIQUE)


def _rebuild(statement: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_constraint(NAME, TABLE, type_="unique")
    op.execute(sa.text(statement))
