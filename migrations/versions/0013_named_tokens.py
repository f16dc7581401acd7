"""named tokens: the HTTP server's named tokens, and the dashboard's sessions

``api_token`` holds the tokens ``bridge token create`` makes: a name, a
role, the SHA-256 of the secret (never the secret), when it expires, when it
was revoked and last used. ``dashboard_session`` holds each signed-in
browser, so that signing out, or revoking the token a session was begun
with, ends it on the server rather than only in the browser. Both tables
are new: older releases run beside them as before, so the oldest release
the store accepts stays where 0012 put it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=8), nullable=False),
        sa.Column("secret_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("name", name=op.f("uq_api_token_name")),
        sa.UniqueConstraint("secret_digest", name=op.f("uq_api_token_secret_digest")),
    )
    op.create_table(
        "dashboard_session",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("role", sa.String(length=8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_token.id"],
            name=op.f("fk_dashboard_session_token_id_api_token"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_session")),
    )
    op.create_index(
        op.f("ix_dashboard_session_expires_at"), "dashboard_session", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_dashboard_session_expires_at"), table_name="dashboard_session")
    op.drop_table("dashboard_session")
    op.drop_table("api_token")
