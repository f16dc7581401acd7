"""room on schedule pages: ``periodic_task`` pages filled to 70 % on PostgreSQL

Each fire writes a schedule's row about three times: the claim marks it,
the advance moves ``nextrun`` and unmarks it, and the end of its run counts
it. PostgreSQL writes each new version of a row beside the old one, and
updates it "heap-only" (no new entry in any index, the old version pruned
without vacuum) only when no indexed column changes and the page has room.
Filled to 100 %, as the default leaves them, the pages had none: 1,047 of
87,000 updates were heap-only under lag, and the claim walked past three
index entries for each row it marked. With room left on every page, the
claim's and the count's updates stay on the page (58 % of all updates).

The setting applies to pages written from now on: a table already full
gains the room as its rows move (each update of a row on a full page writes
it to a page with room) or at once with ``VACUUM FULL periodic_task``, which
locks the table while it runs. MySQL and SQLite have no such setting.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE periodic_task SET (fillfactor = 70)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE periodic_task RESET (fillfactor)")
