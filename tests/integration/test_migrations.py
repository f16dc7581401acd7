"""Upgrading a database that holds schedules and runs of earlier revisions: what is kept, what
the migrations fill from the runs, and which schema a process refuses."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy

from bridge import Bridge
from bridge.rules.releases import Fit
from bridge.storage.database import (
    SchemaMismatch,
    database_for,
    migrations_location,
    shipped_revisions,
)
from tests.support import execute, on_every_store, quoted, rows


@on_every_store
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
    assert rows(db_url, "SELECT version_num FROM alembic_version") == [("0022",)]


@on_every_store
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
            f" {quoted(db_url, 'trigger')}, status, updated_at, runtime) VALUES (:id, 7,"
            " 'workers.app.quick', :t, :n, 'scheduled', :s, :t, :r)",
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


@on_every_store
def test_migrate_says_from_which_revision_to_which(db_url: str) -> None:
    database = database_for(db_url)
    assert database.migrate("0005") == (None, "0005")
    assert database.migrate() == ("0005", "0022")
    assert database.migrate() == ("0022", "0022")
    assert rows(db_url, "SELECT id, oldest_release FROM schema_release") == [(1, "0.2.0")]
    database.dispose()


@on_every_store
def test_the_history_of_0_1_0_fills_what_later_revisions_added(db_url: str) -> None:
    """last_success_at, last_failure_at and the hourly tallies come from the runs recorded
    before the revisions that added them, so the statistics count the runs they time."""
    database = database_for(db_url)
    database.migrate("0005")
    sqlite = db_url.startswith("sqlite")
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)

    def stored(moment: datetime) -> datetime:
        return moment.replace(tzinfo=None) if sqlite else moment

    execute(
        db_url,
        "INSERT INTO periodic_task (id, name, task, args, kwargs, options, timer, timezone,"
        " anchor, enabled, nextrun, overlap, source, broken, created_at, updated_at,"
        " total_run_count, skipped_count, missed_count) VALUES (7, 'old', 'workers.app.quick',"
        " '[]', '{}', '{}', 'every 1h', 'UTC', :t, true, :t, 'skip', 'api', false, :t, :t, 5,"
        " 0, 0)",
        t=stored(start),
    )
    runs = [  # status, ended minutes after start (None: never finished), runtime
        ("SUCCESS", 10, 1.5),
        ("FAILURE", 20, 1.0),
        ("SUCCESS", 70, 2.5),
        ("LOST", None, None),
        ("SENT", None, None),
    ]
    for number, (status, minutes, runtime) in enumerate(runs):
        ended = None if minutes is None else start + timedelta(minutes=minutes)
        execute(
            db_url,
            "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt,"
            f" {quoted(db_url, 'trigger')}, status, finished_at, updated_at, runtime) VALUES"
            " (:id, 7, 'workers.app.quick', :p, 1, 'scheduled', :s, :f, :u, :r)",
            id=f"run-{number}",
            p=stored(start + timedelta(minutes=number)),
            s=status,
            f=None if ended is None else stored(ended),
            u=stored(ended or start + timedelta(minutes=90)),
            r=runtime,
        )
    database.migrate()
    database.dispose()

    from workers.app import app

    api = Bridge(app, database_url=db_url)
    schedule = api.get("old")
    assert schedule.last_success_at == start + timedelta(minutes=70)
    # The LOST run never finished: its record's last change is when it was found lost.
    assert schedule.last_failure_at == start + timedelta(minutes=90)
    figures = api.stats("old", "1d")
    assert figures.counts == {"SUCCESS": 2, "FAILURE": 1, "LOST": 1, "SENT": 1}
    assert figures.duration["count"] == 3
    hours = rows(
        db_url,
        "SELECT success, failure, lost, runtime FROM schedule_tally"
        " WHERE periodic_task_id = 7 ORDER BY hour",
    )
    assert hours == [(1, 1, 0, 2.5), (1, 0, 1, 2.5)]
    database.dispose()


def test_schedule_pages_keep_room_for_updates_on_postgresql(pg_url: str) -> None:
    """Migration 0014: a schedule's row is updated about three times a fire, and only a
    page with room keeps the new version beside the old one without an index entry."""
    database = database_for(pg_url)
    database.migrate("0013")
    assert rows(pg_url, "SELECT reloptions FROM pg_class WHERE relname = 'periodic_task'") == [
        (None,)
    ]
    database.migrate()
    assert rows(pg_url, "SELECT reloptions FROM pg_class WHERE relname = 'periodic_task'") == [
        (["fillfactor=70"],)
    ]
    database.dispose()


def test_a_schedules_strip_is_read_from_the_index_alone_on_postgresql(pg_url: str) -> None:
    """Migration 0022: the unique index of a schedule's runs carries their status, so the
    dashboard's strips need no read of the table's pages; the index still refuses a second
    record of an occurrence."""
    database = database_for(pg_url)
    database.migrate("0021")
    database.migrate()
    from workers.app import app

    api = Bridge(app, database_url=pg_url)
    schedule_id = api.add("strip", task="workers.app.quick", timer="every 1h").id
    record = (
        "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger,"
        " status, updated_at) VALUES (:id, :s, 'workers.app.quick', :t, 1, 'scheduled',"
        " 'SUCCESS', :t)"
    )
    at = datetime(2026, 12, 1, 9, 0)
    for hour in range(3):
        execute(pg_url, record, id=f"run-{hour}", s=schedule_id, t=at + timedelta(hours=hour))
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        execute(pg_url, record, id="again", s=schedule_id, t=at)
    engine = sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("VACUUM ANALYZE task_execution"))
        connection.execute(sqlalchemy.text("SET enable_seqscan = off"))
        plan = connection.execute(
            sqlalchemy.text(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT plan_time, status FROM task_execution"
                " WHERE periodic_task_id = :s ORDER BY plan_time DESC, attempt DESC LIMIT 20"
            ),
            {"s": schedule_id},
        ).scalar_one()
    engine.dispose()
    scans = [node for node in _plan_nodes(plan[0]["Plan"]) if "Scan" in node["Node Type"]]
    assert [(node["Node Type"], node["Index Name"], node["Heap Fetches"]) for node in scans] == [
        ("Index Only Scan", "uq_task_execution_periodic_task_id_plan_time_attempt", 0)
    ]
    assert [at for at, _ in api.recent_statuses([schedule_id])[schedule_id]] == [
        "2026-12-01T09:00:00Z",
        "2026-12-01T10:00:00Z",
        "2026-12-01T11:00:00Z",
    ]
    database.dispose()


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


@on_every_store
def test_a_schema_a_later_release_needs_is_refused_and_left_as_it_is(db_url: str) -> None:
    database = database_for(db_url)
    database.migrate()
    execute(db_url, "UPDATE alembic_version SET version_num = '0023'")
    # A later revision that this release may run beside.
    database.require_schema("0.2.0")
    assert database.migrate() == ("0023", "0023")
    execute(db_url, "UPDATE schema_release SET oldest_release = '0.3.0'")
    with pytest.raises(SchemaMismatch) as refused:
        database.require_schema("0.2.0")
    assert refused.value.fit is Fit.AHEAD
    assert "needs celery-periodic-bridge 0.3.0 or later" in str(refused.value)
    with pytest.raises(SchemaMismatch):
        database.migrate()
    assert rows(db_url, "SELECT version_num FROM alembic_version") == [("0023",)]
    database.dispose()


def test_the_revisions_are_numbered_by_their_file_names_in_one_line() -> None:
    """The schema check reads the revisions from the file names (without Alembic): each
    file's number is its revision, and each revises the one numbered before it."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", migrations_location())
    scripts = ScriptDirectory.from_config(config)
    shipped = shipped_revisions()
    assert scripts.get_current_head() == shipped[-1]
    chain = {script.revision: script.down_revision for script in scripts.walk_revisions()}
    assert chain == dict(zip(shipped, (None, *shipped[:-1]), strict=True))
