"""periodic_task: notify beat of changes made outside it (PostgreSQL)

A schedule added, edited or resumed (by the API, the CLI, an import, a worker
waking a held run, or plain SQL) sends a notification on the channel
``bridge_periodic_task``, so that a sleeping beat picks the change up at once
instead of at its next look at the table. Beat's own writes (claiming a row,
advancing and unmarking it) do not notify: the beat that made them already
knows, and waking every other beat after every fire would make them spin.
An empty payload lets PostgreSQL fold all the notifications of one
transaction (a bulk import) into one. SQLite has no notifications: beat
polls it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FUNCTION = """
CREATE FUNCTION bridge_notify_periodic_task() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('bridge_periodic_task', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

#: A row that is not being fired (unmarked before and after) and may now be due sooner.
ON_UPDATE = """
CREATE TRIGGER bridge_periodic_task_updated
AFTER UPDATE ON periodic_task
FOR EACH ROW
WHEN (
    OLD.worker IS NULL AND NEW.worker IS NULL AND NEW.enabled
    AND (NEW.nextrun IS DISTINCT FROM OLD.nextrun OR NOT OLD.enabled)
)
EXECUTE FUNCTION bridge_notify_periodic_task()
"""

ON_INSERT = """
CREATE TRIGGER bridge_periodic_task_inserted
AFTER INSERT ON periodic_task
FOR EACH ROW
WHEN (NEW.enabled)
EXECUTE FUNCTION bridge_notify_periodic_task()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    op.execute(ON_UPDATE)
    op.execute(ON_INSERT)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER bridge_periodic_task_inserted ON periodic_task")
    op.execute("DROP TRIGGER bridge_periodic_task_updated ON periodic_task")
    op.execute("DROP FUNCTION bridge_notify_periodic_task()")
