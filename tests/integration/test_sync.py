"""``beat_schedule`` sync against a real database: upsert by name, keep what is unchanged,
take what changed, disable what left, never touch API rows, converge under concurrency."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab
from sqlalchemy import update

from bridge import Bridge
from bridge.config import Settings
from bridge.database import database_for
from bridge.models import PeriodicTask
from bridge.sync import REMOVED_NOTE, sync_beat_schedule


def make_app(schedule: dict[str, Any]) -> Celery:
    app = Celery("synctest", set_as_current=False)
    app.conf.beat_schedule = schedule
    app.conf.timezone = "Europe/Paris"
    return app


def sync(url: str, schedule: dict[str, Any]) -> Bridge:
    app = make_app(schedule)
    settings = Settings(database_url=url)
    sync_beat_schedule(app, database_for(url), settings)
    return Bridge(app, settings=settings)


SCHEDULE: dict[str, Any] = {
    "seconds": {"task": "workers.app.quick", "schedule": 30.0, "args": [1, 2]},
    "delta": {"task": "workers.app.quick", "schedule": timedelta(hours=1, minutes=30)},
    "cron": {
        "task": "workers.app.quick",
        "schedule": crontab(minute="0", hour="9", day_of_week="mon-fri"),
        "options": {"queue": "reports"},
    },
    "text": {"task": "workers.app.slow", "schedule": "@daily", "kwargs": {"seconds": 1}},
}


def test_entries_are_inserted_with_their_definitions(migrated: str) -> None:
    api = sync(migrated, SCHEDULE)
    found = {s.name: s for s in api.list()}
    assert set(found) == set(SCHEDULE)
    assert found["seconds"].timer == "every 30s"
    assert found["seconds"].args == "[1,2]"
    assert found["delta"].timer == "every 1h30m"
    assert found["cron"].timer == "0 9 * * mon-fri"
    assert found["cron"].timezone == "Europe/Paris"
    assert found["cron"].options == '{"queue":"reports"}'
    assert found["text"].timer == "@daily"
    assert all(s.source == "config" and s.enabled for s in found.values())


def test_unchanged_keeps_state_changed_takes_new_definition_removed_is_disabled(
    migrated: str,
) -> None:
    api = sync(migrated, SCHEDULE)
    before = api.get("seconds")
    with database_for(migrated).session() as session:
        session.execute(
            update(PeriodicTask)
            .where(PeriodicTask.name == "seconds")
            .values(total_run_count=7, skipped_count=2)
        )
    changed = dict(SCHEDULE)
    changed["delta"] = {"task": "workers.app.quick", "schedule": timedelta(minutes=5)}
    del changed["text"]
    api = sync(migrated, changed)

    after = api.get("seconds")
    assert after.nextrun == before.nextrun
    assert after.anchor == before.anchor
    assert (after.total_run_count, after.skipped_count) == (7, 2)
    assert api.get("delta").timer == "every 5m"
    removed = api.get("text")
    assert not removed.enabled
    assert removed.note == REMOVED_NOTE

    # Back in the configuration: enabled again.
    api = sync(migrated, SCHEDULE)
    assert api.get("text").enabled
    assert api.get("text").note is None


def test_rows_created_through_the_api_are_never_touched(migrated: str) -> None:
    api = Bridge(make_app({}), database_url=migrated)
    mine = api.add("seconds", task="workers.app.fail", timer="every 10m", allow_unknown_task=True)
    other = api.add("unrelated", task="workers.app.fail", timer="every 1m", allow_unknown_task=True)
    sync(migrated, SCHEDULE)
    sync(migrated, {})
    assert api.get("seconds") == mine
    assert api.get("unrelated") == other


def _sync_in_process(url: str) -> None:
    sync(url, SCHEDULE)


def test_several_beats_starting_at_once_converge(migrated: str) -> None:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_sync_in_process, args=(migrated,)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    api = Bridge(make_app({}), database_url=migrated)
    assert sorted(s.name for s in api.list()) == sorted(SCHEDULE)
