"""watchdog: health limits and retention per schedule, incidents, hourly tallies

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("grace", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("max_runtime", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column("on_overrun", sa.String(length=16), nullable=False, server_default="none")
        )
        batch_op.add_column(sa.Column("keep_runs", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("keep_days", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("silenced_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("alert_count", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("pruned_through", sa.DateTime(timezone=True), nullable=True))
    mysql = op.get_bind().dialect.name == "mysql"
    if not mysql:  # without its WHERE, the index would repeat the primary key
        op.create_index(
            "ix_periodic_task_trouble",
            "periodic_task",
            ["id"],
            unique=False,
            postgresql_where=sa.text("failure_streak > 0 OR broken"),
            sqlite_where=sa.text("failure_streak > 0 OR broken"),
        )
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            "ix_periodic_task_name_pattern",
            "periodic_task",
            ["name"],
            unique=False,
            postgresql_ops={"name": "varchar_pattern_ops"},
        )
    op.create_table(
        "schedule_tally",
        sa.Column("periodic_task_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *(
            sa.Column(name, sa.Integer(), nullable=False, server_default="0")
            for name in ("success", "failure", "revoked", "lost", "skipped", "missed", "alerts")
        ),
        sa.Column("runtime", sa.Float(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(
            ["periodic_task_id"],
            ["periodic_task.id"],
            name=op.f("fk_schedule_tally_periodic_task_id_periodic_task"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("periodic_task_id", "hour", name=op.f("pk_schedule_tally")),
    )
    op.create_table(
        "incident",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("periodic_task_id", sa.Integer(), nullable=True),
        sa.Column("schedule_name", sa.String(length=200), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=255), nullable=True),
        sa.Column("alerted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("alerts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("recovery_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("message", sa.Text(), nullable=False, server_default=_text_default("")),
        sa.Column("runs", sa.Text(), nullable=False, server_default=_text_default("[]")),
        *(
            # MySQL has no partial index: the open incidents' subjects, NULL once closed.
            [
                sa.Column(
                    "open_subject",
                    sa.String(length=64),
                    sa.Computed("CASE WHEN closed_at IS NULL THEN subject END", persisted=True),
                )
            ]
            if mysql
            else []
        ),
        sa.ForeignKeyConstraint(
            ["periodic_task_id"],
            ["periodic_task.id"],
            name=op.f("fk_incident_periodic_task_id_periodic_task"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incident")),
    )
    op.create_index(
        "ix_incident_open",
        "incident",
        ["kind", "open_subject" if mysql else "subject"],
        unique=True,
        postgresql_where=sa.text("closed_at IS NULL"),
        sqlite_where=sa.text("closed_at IS NULL"),
    )
    op.create_index("ix_incident_closed_at", "incident", ["closed_at"], unique=False)


def _text_default(value: str) -> str | sa.TextClause:
    """A text column's default: MySQL takes one only as an expression, in parentheses."""
    return sa.text(f"('{value}')") if op.get_bind().dialect.name == "mysql" else value


def downgrade() -> None:
    op.drop_index("ix_incident_closed_at", table_name="incident")
    op.drop_index("ix_incident_open", table_name="incident")
    op.drop_table("incident")
    op.drop_table("schedule_tally")
    if op.get_bind().dialect.name != "mysql":
        op.drop_index("ix_periodic_task_trouble", table_name="periodic_task")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_periodic_task_name_pattern", table_name="periodic_task")
    with op.batch_alter_table("periodic_task", schema=None) as batch_op:
        for name in (
            "pruned_through",
            "alert_count",
            "silenced_until",
            "keep_days",
            "keep_runs",
            "on_overrun",
            "max_runtime",
            "grace",
        ):
            batch_op.drop_column(name)
