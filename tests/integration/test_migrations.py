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
    assert rows(db_url, "SELECT version_num FROM alembic_version") == [("0010",)]


def test_the_counters_of_ended_runs_start_from_the_records_there(db_url: str) -> None:
    database = database_for(db_url)
    database.migrate("0006")
    at = datetime(2026, 12, 1, 9, 0)
    at = at if db_url.startswith("sqlite") else at.replace(tzinfo=UTC)
    execute(
        db_url,
        "INSERT INTO periodic_task (id, name, task, args, kwargs, options, timer, timezone,"
        " anchor, enabled, nextrun, overlap, source, broken, created_at, updated_at,"
        " total_run_count, skipped_count, missed_count) VALUES (7, 'old', 'workers.app.quick',"
        " '[]', '{}', '{}', 'every 1h', 'UTC', :t, true, :t, 'skip', 'api', false, :t, :t, 0,"
        " 0, 0)",
        t=at,
    )
    for number, (status, runtime) in enumerate(
        [("SUCCESS", 1.5), ("SUCCESS", 2.5), ("FAILURE", 1.0), ("LOST", None), ("SENT", None)]
    ):
        execute(
            db_url,
            "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt,"
            " trigger, status, updated_at, runtime) VALUES (:id, 7, 'workers.app.quick', :t,"
            " :n, 'scheduled', :s, :t, :r)",
            id=f"run-{number}",
            t=at,
            n=number + 1,
            s=status,
            r=runtime,
        )
    database.migrate()
    database.dispose()
    assert rows(
        db_url,
        "SELECT success_count, failure_count, revoked_count, lost_count, runtime_total"
        " FROM periodic_task WHERE id = 7",
    ) == [(2, 1, 0, 1, 5.0)]
