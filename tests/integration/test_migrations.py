"""Upgrading a database that holds schedules from before the scheduling policies."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.storage.database import database_for
from tests.support import execute, rows


def test_upgrade_keeps_schedules_due_when_they_were_and_gives_them_default_policies(
    db_url: str,
) -> None:
    database = database_for(db_url)
    database.migrate("0001")
    due = datetime(2026, 12, 1, 9, 0)
    execute(
        db_url,
        "INSERT INTO periodic_task (name, task, args, kwargs, options, timer, timezone, anchor,"
        " enabled, nextrun, overlap, source, broken, created_at, updated_at, total_run_count,"
        " skipped_count, missed_count) VALUES ('old', 'workers.app.quick', '[]', '{}', '{}',"
        " '0 9 * * *', 'UTC', :t, true, :t, 'skip', 'api', false, :t, :t, 0, 0, 0)",
        t=due if db_url.startswith("sqlite") else due.replace(tzinfo=UTC),
    )
    database.migrate()
    database.dispose()

    [row] = rows(
        db_url,
        "SELECT next_occurrence, catchup, jitter, max_attempts, expires, failure_streak,"
        " remaining, max_failures FROM periodic_task WHERE name = 'old'",
    )
    next_occurrence, *policies = row
    assert str(next_occurrence).startswith("2026-12-01 09:00:00")
    assert policies == ["latest", 0, 1, "next", 0, None, None]
    assert rows(db_url, "SELECT version_num FROM alembic_version") == [("0007",)]
