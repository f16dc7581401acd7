"""``beat_schedule`` sync against a real database: upsert by name, keep what is unchanged,
take what changed, disable what left, never touch API rows, converge under concurrency."""

from __future__ import annotations

import logging
import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab
from sqlalchemy import update

from bridge import Bridge
from bridge.celery.beat_schedule import sync_beat_schedule
from bridge.config import Settings
from bridge.storage.database import database_for
from bridge.storage.models import PeriodicTask
from bridge.storage.sync import REMOVED_NOTE
from tests.support import on_every_store

pytestmark = on_every_store

#: A start years ahead of any day the tests run, at a whole hour.
LATER = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=5 * 365)


def make_app(schedule: dict[str, Any]) -> Celery:
    app = Celery("synctest", set_as_current=False)
    app.conf.beat_schedule = schedule
    app.conf.timezone = "Europe/Paris"
    return app


def sync(url: str, schedule: dict[str, Any]) -> Bridge:
    app = make_app(schedule)
    settings = Settings(database_url=url)
    sync_beat_schedule(app, database_for(url))
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
    back = api.get("text")
    assert back.enabled
    assert back.note is None
    assert back.next_occurrence == back.nextrun


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


# ------------------------------------------------------------------------------ policies


def with_policies(**policies: Any) -> dict[str, Any]:
    """SCHEDULE with policies on its 'seconds' entry."""
    return {**SCHEDULE, "seconds": {**SCHEDULE["seconds"], "policies": policies}}


def test_entry_policies_are_stored(migrated: str) -> None:
    """The 'policies' key takes the API's keywords, in their Python or text forms."""
    start = LATER
    api = sync(
        migrated,
        with_policies(
            overlap="allow",
            catchup="all",
            jitter=5,
            start=start,
            end=(LATER + timedelta(days=365)).isoformat(),
            max_attempts=3,
            backoff=["10s", "1m"],
            expires="never",
        ),
    )
    row = api.get("seconds")
    assert (row.overlap, row.catchup, row.jitter, row.max_attempts) == ("allow", "all", 5.0, 3)
    assert (row.backoff, row.expires, row.end_at) == (
        "10s,1m",
        "never",
        LATER + timedelta(days=365),
    )
    # The first occurrence honours start: the first 30 s step at or after it.
    assert row.nextrun == row.next_occurrence
    assert row.nextrun is not None
    assert start <= row.nextrun < start + timedelta(seconds=30)
    assert api.get("delta").overlap == "skip"  # no policies: the defaults


def test_a_bad_policy_refuses_only_its_entry(
    migrated: str, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = {
        **SCHEDULE,
        "bad-overlap": {**SCHEDULE["text"], "policies": {"overlap": "sometimes"}},
        "bad-keyword": {**SCHEDULE["text"], "policies": {"colour": "red"}},
        "not-a-mapping": {**SCHEDULE["text"], "policies": ["allow"]},
        "past-end": {**SCHEDULE["text"], "policies": {"end": "2020-01-01T00:00:00+00:00"}},
    }
    with caplog.at_level(logging.ERROR, logger="bridge.sync"):
        api = sync(migrated, schedule)
    assert sorted(s.name for s in api.list()) == sorted(SCHEDULE)
    logged = caplog.text
    assert "entry 'bad-overlap' refused: overlap: got 'sometimes'" in logged
    assert "entry 'bad-keyword' refused: policy: got 'colour'" in logged
    assert "entry 'not-a-mapping' refused: policies: got ['allow']" in logged
    assert "entry 'past-end' refused: end: got '2020-01-01T00:00:00+00:00'" in logged


def test_an_entry_skips_calendars_that_exist_only(
    migrated: str, caplog: pytest.LogCaptureFixture
) -> None:
    Bridge(database_url=migrated).add_calendar("holidays", dates=["2026-12-25"])
    schedule = {
        "skips": {**SCHEDULE["text"], "policies": {"skip_calendars": ["holidays"]}},
        "skips-nothing-known": {**SCHEDULE["text"], "policies": {"skip_calendars": "gone"}},
    }
    with caplog.at_level(logging.ERROR, logger="bridge.sync"):
        api = sync(migrated, schedule)
    assert [(s.name, s.skip_calendars) for s in api.list()] == [("skips", ("holidays",))]
    assert "entry 'skips-nothing-known' refused: skip_calendars: got 'gone'" in caplog.text


def set_columns(url: str, name: str, **values: Any) -> None:
    """What beat writes as the schedule runs."""
    with database_for(url).session() as session:
        session.execute(update(PeriodicTask).where(PeriodicTask.name == name).values(**values))


def test_changed_policies_update_the_row_and_keep_its_place(migrated: str) -> None:
    """A policy change is taken; the next run moves only when the timer or bounds change."""
    api = sync(migrated, with_policies(overlap="allow", remaining=5))
    before, untouched = api.get("seconds"), api.get("delta")
    set_columns(migrated, "seconds", total_run_count=7, remaining=2)

    # Unchanged (the countdown beat moved is not a change): everything kept.
    api = sync(migrated, with_policies(overlap="allow", remaining=5))
    kept = api.get("seconds")
    assert (kept.remaining, kept.total_run_count) == (2, 7)
    assert kept.updated_at == before.updated_at

    # Another policy: taken as written (the countdown with it); the place in time stays.
    api = sync(migrated, with_policies(overlap="replace", remaining=5, jitter="2s"))
    changed = api.get("seconds")
    assert (changed.overlap, changed.jitter, changed.remaining) == ("replace", 2.0, 5)
    assert (changed.nextrun, changed.next_occurrence, changed.anchor) == (
        before.nextrun,
        before.next_occurrence,
        before.anchor,
    )
    assert changed.total_run_count == 7
    assert api.get("delta") == untouched

    # A new start: a new first occurrence, counted from the start.
    start = LATER + timedelta(hours=15)
    api = sync(migrated, with_policies(overlap="replace", remaining=5, jitter="2s", start=start))
    moved = api.get("seconds")
    assert moved.start_at == start
    assert moved.next_occurrence == moved.nextrun
    assert moved.nextrun is not None
    assert start <= moved.nextrun < start + timedelta(seconds=30)
    assert moved.anchor > before.anchor
    assert moved.total_run_count == 7
