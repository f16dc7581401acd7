"""calendars: named days and times a schedule's occurrences are not sent on

``calendar`` holds each named calendar (its dates, ranges or cron expression,
and the zone they are read in). ``periodic_task.skip_calendars`` names the
calendars a schedule skips (NULL: none), ``excluded_count`` counts the
occurrences not sent because they fell on one. Beats of an older release
running beside this one during an upgrade do not read calendars: until they
are stopped, they send the occurrences the calendars exclude.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calendar",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("entries", sa.Text(), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calendar")),
        sa.UniqueConstraint("name", name=op.f("uq_calendar_name")),
    )
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.add_column(sa.Column("skip_calendars", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("excluded_count", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("periodic_task") as batch_op:
        batch_op.drop_column("excluded_count")
        batch_op.drop_column("skip_calendars")
    op.drop_table("calendar")
