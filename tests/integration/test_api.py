"""Tests of the Python API (bridge.Bridge) and the schema, on SQLite and on PostgreSQL.

Round trips check the exact values a user reads back; every refusal is checked
to leave the table exactly as it was.
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from importlib import resources
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from alembic.script import ScriptDirectory
from celery import Celery
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from bridge import Bridge, DuplicateSchedule, ScheduleNotFound, ValidationError
from bridge.errors import RunSkipped, SendFailed
from bridge.rules.runs import run_id_for
from bridge.storage.database import Database, database_for
from bridge.storage.models import PeriodicTask, TaskExecution
from tests.clock import next_offset_change
from tests.support import on_every_store

pytestmark = on_every_store

QUICK = "workers.app.quick"
PARIS = ZoneInfo("Europe/Paris")


def utcnow() -> datetime:
    return datetime.now(UTC)


def next_wall_time(now: datetime, zone: ZoneInfo, at: time) -> datetime:
    """The first instant after ``now`` when the clocks of ``zone`` show ``at``, in UTC."""
    local = now.astimezone(zone)
    day: date = local.date()
    candidate = datetime.combine(day, at, tzinfo=zone)
    if candidate <= local:
        candidate = datetime.combine(day + timedelta(days=1), at, tzinfo=zone)
    return candidate.astimezone(UTC)


# ------------------------------------------------------------------------ round trips


def test_add_interval_get_and_list_round_trip(api: Bridge) -> None:
    """An 'every 10s' schedule is stored as given and first runs at anchor + 10s."""
    before = utcnow()
    added = api.add("ten", task=QUICK, timer="every 10s", args=[1], kwargs={"y": 5})
    after = utcnow()
    assert before <= added.anchor <= after
    assert added.nextrun == added.anchor + timedelta(seconds=10)
    assert (added.name, added.task, added.timer, added.timezone) == (
        "ten",
        QUICK,
        "every 10s",
        "UTC",
    )
    assert (added.args, added.kwargs, added.options, added.overlap) == (
        "[1]",
        '{"y":5}',
        "{}",
        "skip",
    )
    assert added.enabled is True
    assert added.broken is False
    assert added.note is None
    assert added.source == "api"
    assert (added.total_run_count, added.skipped_count, added.missed_count) == (0, 0, 0)
    assert (added.last_run_at, added.last_status, added.worker, added.marked) == (
        None,
        None,
        None,
        None,
    )
    assert added.created_at == added.updated_at == added.anchor
    stored = api.get("ten")
    assert stored == added
    assert api.list() == [stored]
    assert stored.to_json()["args"] == [1]
    assert stored.to_json()["nextrun"].endswith("+00:00")


def test_add_with_an_explicit_anchor_counts_from_it(api: Bridge) -> None:
    """The anchor fixes the grid: nextrun is the first grid point after now."""
    anchor = utcnow().replace(microsecond=0) - timedelta(seconds=95)
    added = api.add("grid", task=QUICK, timer="every 1m", anchor=anchor)
    assert added.anchor == anchor
    assert added.nextrun == anchor + timedelta(minutes=2)
    assert api.get("grid").nextrun == anchor + timedelta(minutes=2)


def test_add_cron_in_paris_first_runs_at_nine_paris_time(api: Bridge) -> None:
    """'0 9 * * *' in Europe/Paris is due at the next 09:00 on Paris clocks, stored in UTC."""
    now = utcnow()
    added = api.add("paris", task=QUICK, timer="0 9 * * *", timezone="Europe/Paris")
    assert added.timezone == "Europe/Paris"
    assert added.nextrun == next_wall_time(now, PARIS, time(9))
    stored = api.get("paris")
    assert stored.nextrun == added.nextrun
    assert stored.nextrun is not None
    assert stored.nextrun.utcoffset() == timedelta(0)


def test_list_is_ordered_by_name(api: Bridge) -> None:
    """ls shows schedules alphabetically, whatever the order they were added in."""
    for name in ("charlie", "alpha", "bravo"):
        api.add(name, task=QUICK, timer="@hourly")
    assert [s.name for s in api.list()] == ["alpha", "bravo", "charlie"]


def test_edit_timer_moves_nextrun_and_keeps_the_rest(api: Bridge) -> None:
    """A new timer re-anchors an interval and moves nextrun; other fields stay."""
    original = api.add("e", task=QUICK, timer="every 10s", kwargs={"x": 1}, queue="q1")
    before = utcnow()
    edited = api.edit("e", timer="every 1h")
    assert edited.timer == "every 1h"
    assert edited.anchor >= before
    assert edited.nextrun == edited.anchor + timedelta(hours=1)
    assert edited.kwargs == original.kwargs == '{"x":1}'
    assert edited.options == original.options == '{"queue":"q1"}'
    assert edited.created_at == original.created_at
    assert edited.updated_at > original.updated_at
    assert api.get("e") == edited


def test_edit_to_a_cron_in_another_zone(api: Bridge) -> None:
    """Switching to a cron timer in Paris moves nextrun to the next 09:00 Paris time."""
    api.add("e2", task=QUICK, timer="every 10s")
    now = utcnow()
    edited = api.edit("e2", timer="0 9 * * *", timezone="Europe/Paris")
    assert (edited.timer, edited.timezone) == ("0 9 * * *", "Europe/Paris")
    assert edited.nextrun == next_wall_time(now, PARIS, time(9))


def test_add_with_every_policy_round_trip(api: Bridge) -> None:
    """Each policy keyword is stored normalised and read back; the first run honours start."""
    start = (utcnow() + timedelta(days=2)).replace(minute=17, second=0, microsecond=0)
    end = start + timedelta(days=30)
    added = api.add(
        "full",
        task=QUICK,
        timer="@hourly",
        overlap="buffer_one",
        catchup="all",
        catchup_window="2h",
        jitter=90,
        start=start.isoformat(),
        end=end,
        remaining="10",
        max_failures=3,
        max_attempts=4,
        backoff="30s,2m",
        expires="never",
    )
    first = start.replace(minute=0) + timedelta(hours=1)
    assert (added.nextrun, added.next_occurrence) == (first, first)
    assert (added.overlap, added.catchup, added.catchup_window, added.jitter) == (
        "buffer_one",
        "all",
        7200.0,
        90.0,
    )
    assert (added.start_at, added.end_at, added.remaining, added.max_failures) == (
        start,
        end,
        10,
        3,
    )
    assert (added.max_attempts, added.backoff, added.expires) == (4, "30s,2m", "never")
    assert (added.held, added.retry_plan, added.retry_attempt, added.retry_at) == (None,) * 4
    assert added.failure_streak == 0
    assert api.get("full") == added
    shown = json.loads(json.dumps(added.to_json()))
    assert (shown["start_at"], shown["jitter"], shown["held"]) == (start.isoformat(), 90.0, None)


def test_new_schedule_policy_defaults(api: Bridge) -> None:
    """No policy given: the defaults of Policies, both cursors on the first occurrence."""
    added = api.add("plain", task=QUICK, timer="every 1m")
    assert added.next_occurrence == added.nextrun == added.anchor + timedelta(minutes=1)
    assert (added.overlap, added.catchup, added.catchup_window, added.jitter) == (
        "skip",
        "latest",
        None,
        0.0,
    )
    assert (added.start_at, added.end_at, added.remaining, added.max_failures) == (None,) * 4
    assert (added.max_attempts, added.backoff, added.expires) == (1, None, "next")


def test_edit_policies_keeps_the_next_run_and_bounds_move_it(api: Bridge) -> None:
    """A policy edit leaves nextrun; a new start or end moves it; None keeps, 'none' clears."""
    original = api.add("pol", task=QUICK, timer="@daily", remaining=5, backoff="1m")
    edited = api.edit(
        "pol",
        overlap="allow",
        catchup="none",
        catchup_window=timedelta(minutes=30),
        jitter="10s",
        remaining="none",
        max_failures="2",
        max_attempts=3,
        backoff="10s..5m",
        expires="15m",
    )
    assert (edited.nextrun, edited.next_occurrence) == (original.nextrun, original.nextrun)
    assert (edited.overlap, edited.catchup, edited.catchup_window, edited.jitter) == (
        "allow",
        "none",
        1800.0,
        10.0,
    )
    assert (edited.remaining, edited.max_failures, edited.max_attempts) == (None, 2, 3)
    assert (edited.backoff, edited.expires) == ("10s..5m", "15m")
    kept = api.edit("pol", overlap=None, jitter=None)
    assert replace(kept, updated_at=edited.updated_at) == edited

    start = (utcnow() + timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    bounded = api.edit("pol", start=start, end=start + timedelta(hours=5))
    assert (bounded.nextrun, bounded.next_occurrence) == (start, start)
    assert bounded.anchor == original.anchor  # the timer did not change
    unbounded = api.edit("pol", start="none", end="none")
    assert unbounded.start_at is None and unbounded.end_at is None
    assert unbounded.nextrun == unbounded.next_occurrence == original.nextrun
    assert (unbounded.overlap, unbounded.backoff) == ("allow", "10s..5m")


def test_edit_fields_without_timer_keeps_nextrun(api: Bridge) -> None:
    """Changing only the call leaves the schedule's timing alone."""
    original = api.add("e3", task=QUICK, timer="every 10s")
    edited = api.edit(
        "e3", task="workers.app.slow", args="[3]", kwargs='{"seconds": 1}', overlap="allow"
    )
    assert (edited.task, edited.args, edited.kwargs, edited.overlap) == (
        "workers.app.slow",
        "[3]",
        '{"seconds":1}',
        "allow",
    )
    assert (edited.nextrun, edited.anchor) == (original.nextrun, original.anchor)


def test_pause_with_note_then_resume(api: Bridge) -> None:
    """Pause disables with a note; resume clears it and sets a future nextrun."""
    api.add("p", task=QUICK, timer="every 10s")
    paused = api.pause("p", note="maintenance until 14:00")
    assert paused.enabled is False
    assert paused.note == "maintenance until 14:00"
    assert api.get("p") == paused
    before = utcnow()
    resumed = api.resume("p")
    assert resumed.enabled is True
    assert resumed.note is None
    assert resumed.broken is False
    assert resumed.nextrun is not None
    assert resumed.nextrun > before
    assert (resumed.nextrun - resumed.anchor) % timedelta(seconds=10) == timedelta(0)
    assert api.get("p") == resumed


def test_add_disabled_then_remove(api: Bridge) -> None:
    """A schedule created paused is listed as such; remove deletes it."""
    api.add("gone", task=QUICK, timer="@daily", enabled=False)
    assert api.get("gone").enabled is False
    api.remove("gone")
    assert api.list() == []
    with pytest.raises(ScheduleNotFound):
        api.get("gone")


def test_next_runs_of_a_cron_across_a_dst_change(api: Bridge) -> None:
    """next_runs gives exact instants; 09:00 Paris is 08:00 UTC in winter, 07:00 in summer.

    The schedule starts a day and a half before Paris's next move to summer time, and
    its first run is the start bound's, not the timer's next after now.
    """
    change = utcnow()
    while change.astimezone(PARIS).utcoffset() != timedelta(hours=1):  # summer now
        change = next_offset_change(PARIS, change)
    change = next_offset_change(PARIS, change)  # the Sunday morning Paris moves ahead
    eve = datetime.combine(change.date() - timedelta(days=1), time(), UTC)
    start = eve - timedelta(hours=12)
    api.add("dst", task=QUICK, timer="0 9 * * *", timezone="Europe/Paris", start=start)
    assert api.next_runs("dst", count=4) == [
        eve + timedelta(hours=8),
        eve + timedelta(days=1, hours=7),
        eve + timedelta(days=2, hours=7),
        eve + timedelta(days=3, hours=7),
    ]
    assert api.next_runs("dst", count=1) == [eve + timedelta(hours=8)]


def test_next_runs_of_a_one_shot_stops_after_its_instant(api: Bridge) -> None:
    """A one-shot has exactly one upcoming run."""
    when = (utcnow() + timedelta(days=2)).replace(microsecond=0)
    added = api.add("once", task=QUICK, timer=f"at {when.isoformat()}")
    assert added.nextrun == when
    assert api.next_runs("once", count=3) == [when]


def test_history_of_a_new_schedule_is_empty(api: Bridge) -> None:
    """No run yet: history is an empty list, not an error."""
    api.add("fresh", task=QUICK, timer="every 10s")
    assert api.history("fresh") == []
    assert api.history("fresh", limit=1) == []


# --------------------------------------------------------------------------- refusals


def refusals(api: Bridge) -> list[tuple[str, Callable[[], Any], type[Exception], str | None]]:
    """(label, call, error type, field) for every input the API must refuse."""
    now = utcnow()
    past = (now - timedelta(days=1)).isoformat()
    in_a_day, in_two_days = now + timedelta(days=1), now + timedelta(days=2)
    hour_ago = now - timedelta(hours=1)
    calls: list[tuple[str, Callable[[], Any], type[Exception], str | None]] = [
        ("bad timer", lambda: api.add("n", task=QUICK, timer="every 5x"), ValidationError, "timer"),
        (
            "cron range",
            lambda: api.add("n", task=QUICK, timer="61 * * * *"),
            ValidationError,
            "timer",
        ),
        (
            "zone",
            lambda: api.add("n", task=QUICK, timer="@daily", timezone="Mars/Olympus"),
            ValidationError,
            "timezone",
        ),
        (
            "task",
            lambda: api.add("n", task="no.such.task", timer="@daily"),
            ValidationError,
            "task",
        ),
        (
            "args",
            lambda: api.add("n", task=QUICK, timer="@daily", args='{"a": 1}'),
            ValidationError,
            "args",
        ),
        (
            "args json",
            lambda: api.add("n", task=QUICK, timer="@daily", args="not json"),
            ValidationError,
            "args",
        ),
        (
            "kwargs",
            lambda: api.add("n", task=QUICK, timer="@daily", kwargs=[1]),
            ValidationError,
            "kwargs",
        ),
        (
            "overlap",
            lambda: api.add("n", task=QUICK, timer="@daily", overlap="sometimes"),
            ValidationError,
            "overlap",
        ),
        (
            "past one-shot",
            lambda: api.add("n", task=QUICK, timer=f"at {past}"),
            ValidationError,
            "timer",
        ),
        (
            "catchup",
            lambda: api.add("n", task=QUICK, timer="@daily", catchup="most"),
            ValidationError,
            "catchup",
        ),
        (
            "policy keyword",
            lambda: api.add("n", task=QUICK, timer="@daily", colour="red"),  # type: ignore[call-arg]
            ValidationError,
            "policy",
        ),
        (
            "naive start",
            lambda: api.add("n", task=QUICK, timer="@daily", start=datetime(2026, 1, 1)),
            ValidationError,
            "start",
        ),
        (
            "end before the first occurrence",
            lambda: api.add("n", task=QUICK, timer=f"at {in_two_days.isoformat()}", end=in_a_day),
            ValidationError,
            "end",
        ),
        (
            "start after the only occurrence",
            lambda: api.add("n", task=QUICK, timer=f"at {in_a_day.isoformat()}", start=in_two_days),
            ValidationError,
            "start",
        ),
        (
            "naive anchor",
            lambda: api.add("n", task=QUICK, timer="every 1m", anchor=datetime(2026, 1, 1)),
            ValidationError,
            "anchor",
        ),
        ("empty name", lambda: api.add("", task=QUICK, timer="@daily"), ValidationError, "name"),
        (
            "duplicate",
            lambda: api.add("existing", task=QUICK, timer="@hourly"),
            DuplicateSchedule,
            "name",
        ),
        (
            "edit timer",
            lambda: api.edit("existing", timer="every 5x"),
            ValidationError,
            "timer",
        ),
        (
            "edit zone",
            lambda: api.edit("existing", timezone="Mars/Olympus"),
            ValidationError,
            "timezone",
        ),
        ("edit task", lambda: api.edit("existing", task="no.such.task"), ValidationError, "task"),
        ("edit kwargs", lambda: api.edit("existing", kwargs="[1]"), ValidationError, "kwargs"),
        ("edit jitter", lambda: api.edit("existing", jitter="lots"), ValidationError, "jitter"),
        (
            "edit end before start",
            lambda: api.edit("existing", start=in_two_days, end=in_a_day),
            ValidationError,
            "end",
        ),
        (
            "edit past end",
            lambda: api.edit("existing", end=now - timedelta(minutes=1)),
            ValidationError,
            "end",
        ),
        ("resume from", lambda: api.resume("existing", "later"), ValidationError, "from"),
        (
            "manual buffer_one",
            lambda: api.run("existing", overlap="buffer_one"),
            ValidationError,
            "overlap",
        ),
        ("manual overlap", lambda: api.run("existing", overlap="x"), ValidationError, "overlap"),
        (
            "backfill from",
            lambda: api.backfill("existing", "yesterday", now),
            ValidationError,
            "from",
        ),
        (
            "backfill naive to",
            lambda: api.backfill("existing", hour_ago, "2026-01-01T00:00:00"),
            ValidationError,
            "to",
        ),
        (
            "backfill reversed",
            lambda: api.backfill("existing", now, hour_ago),
            ValidationError,
            "to",
        ),
        (
            "backfill future",
            lambda: api.backfill("existing", hour_ago, in_a_day),
            ValidationError,
            "to",
        ),
        (
            "backfill limit",
            lambda: api.backfill("existing", hour_ago, now, limit=0),
            ValidationError,
            "limit",
        ),
        (
            "backfill too many",
            lambda: api.backfill("existing", hour_ago, now),
            ValidationError,
            "to",
        ),
        (
            "backfill overlap",
            lambda: api.backfill("existing", hour_ago, now, overlap="buffer_one"),
            ValidationError,
            "overlap",
        ),
        ("count", lambda: api.next_runs("existing", count=0), ValidationError, "count"),
        ("limit", lambda: api.history("existing", limit=0), ValidationError, "limit"),
        ("get", lambda: api.get("missing"), ScheduleNotFound, None),
        ("edit", lambda: api.edit("missing", timer="@daily"), ScheduleNotFound, None),
        ("remove", lambda: api.remove("missing"), ScheduleNotFound, None),
        ("run", lambda: api.run("missing"), ScheduleNotFound, None),
        ("history", lambda: api.history("missing"), ScheduleNotFound, None),
        ("pause", lambda: api.pause("missing", note="x"), ScheduleNotFound, None),
        ("resume", lambda: api.resume("missing"), ScheduleNotFound, None),
        (
            "backfill",
            lambda: api.backfill("missing", hour_ago, now),
            ScheduleNotFound,
            None,
        ),
        ("next_runs", lambda: api.next_runs("missing"), ScheduleNotFound, None),
    ]
    return calls


def test_every_refusal_leaves_the_table_unchanged(api: Bridge, migrated: str) -> None:
    """Each bad input raises the documented error, names the field, and writes nothing."""
    api.add("existing", task=QUICK, timer="every 10s", kwargs={"x": 1})
    snapshot = api.list()
    for label, call, error, field in refusals(api):
        with pytest.raises(error) as caught:
            call()
        if isinstance(caught.value, ValidationError):
            assert caught.value.field == field, label
            assert field in str(caught.value), label
            assert repr(caught.value.value) in str(caught.value), label
        else:
            assert isinstance(caught.value, ScheduleNotFound)
            assert caught.value.name == "missing"
            assert "'missing'" in str(caught.value)
        assert api.list() == snapshot, f"{label} changed the table"
    assert count_runs(migrated) == 0


def test_unknown_task_is_accepted_when_allowed(api: Bridge) -> None:
    """allow_unknown_task=True accepts a task only the workers import, in add and edit."""
    added = api.add("ext", task="other.project.task", timer="@daily", allow_unknown_task=True)
    assert added.task == "other.project.task"
    edited = api.edit("ext", task="another.task", allow_unknown_task=True)
    assert edited.task == "another.task"


# ----------------------------------------------------------------------------- schema


def count_runs(url: str) -> int:
    with database_for(url).engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(TaskExecution)).scalar_one()


def insert_run(url: str, schedule_id: int, run_id: str, plan_time: datetime) -> None:
    """Write one task_execution row with SQLAlchemy Core, as a worker would."""
    with database_for(url).engine.begin() as connection:
        connection.execute(
            insert(TaskExecution).values(
                id=run_id,
                periodic_task_id=schedule_id,
                task=QUICK,
                plan_time=plan_time,
                attempt=1,
                trigger="scheduled",
                status="SUCCESS",
                updated_at=plan_time,
            )
        )


def test_removing_a_schedule_cascades_to_its_runs(api: Bridge, migrated: str) -> None:
    """rm deletes the run history with the schedule (ON DELETE CASCADE)."""
    kept = api.add("kept", task=QUICK, timer="@daily")
    doomed = api.add("doomed", task=QUICK, timer="@daily")
    plan = datetime(2026, 1, 1, 9, tzinfo=UTC)
    insert_run(migrated, doomed.id, "00000000-0000-0000-0000-000000000001", plan)
    insert_run(migrated, kept.id, "00000000-0000-0000-0000-000000000002", plan)
    history = api.history("doomed")
    assert [(r.id, r.plan_time, r.status) for r in history] == [
        ("00000000-0000-0000-0000-000000000001", plan, "SUCCESS")
    ]
    api.remove("doomed")
    assert count_runs(migrated) == 1
    assert [r.id for r in api.history("kept")] == ["00000000-0000-0000-0000-000000000002"]


def test_one_occurrence_cannot_be_recorded_twice(api: Bridge, migrated: str) -> None:
    """The unique key (schedule, plan time, attempt) refuses a second record."""
    schedule = api.add("once-only", task=QUICK, timer="@daily")
    plan = datetime(2026, 1, 1, 9, tzinfo=UTC)
    insert_run(migrated, schedule.id, "00000000-0000-0000-0000-00000000000a", plan)
    with pytest.raises(IntegrityError):
        insert_run(migrated, schedule.id, "00000000-0000-0000-0000-00000000000b", plan)
    insert_run(
        migrated, schedule.id, "00000000-0000-0000-0000-00000000000c", plan + timedelta(days=1)
    )
    assert count_runs(migrated) == 2


def head_revision() -> str:
    script = ScriptDirectory(str(resources.files("bridge.migrations")))
    head = script.get_current_head()
    assert head is not None
    return head


def schema_state(url: str) -> list[str]:
    """The alembic_version rows of a database."""
    with database_for(url).engine.connect() as connection:
        return [
            row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version"))
        ]


def test_migrate_twice_is_a_no_op(api: Bridge, migrated: str) -> None:
    """Running migrate again on a current database changes nothing and keeps the data."""
    api.add("survivor", task=QUICK, timer="@daily")
    snapshot = api.list()
    Database(migrated).migrate()
    api.migrate()
    assert schema_state(migrated) == [head_revision()]
    assert api.list() == snapshot


def _migrate_after(barrier: Any, url: str) -> None:
    """Child process: wait for the others, then migrate at the same moment."""
    barrier.wait(timeout=60)
    Database(url).migrate()


@pytest.fixture
def fresh_url(db_url: str) -> Iterator[str]:
    yield db_url
    database_for(db_url).dispose()


def test_concurrent_migrations_of_a_fresh_database(fresh_url: str) -> None:
    """Four processes migrating one empty database at once all succeed; the schema is at head."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    processes = [
        context.Process(target=_migrate_after, args=(barrier, fresh_url)) for _ in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    assert schema_state(fresh_url) == [head_revision()]
    assert database_for(fresh_url).is_migrated()
    with database_for(fresh_url).session() as session:
        assert session.scalars(select(PeriodicTask)).all() == []


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"anchor": "2026-01-01T00:00:00+00:00"}, "anchor"),
        ({"enabled": "no"}, "enabled"),
        ({"kwargs": {1: 2}}, "kwargs"),
    ],
)
def test_values_of_the_wrong_python_type_are_refused(
    api: Bridge, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        api.add("typed", task="workers.app.quick", timer="every 1m", **changes)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert api.list() == []


# ------------------------------------------------------ resume, manual runs, backfill


def set_columns(url: str, name: str, **values: Any) -> None:
    """Write schedule columns straight into the table, as beat or an operator would."""
    with database_for(url).session() as session:
        session.execute(update(PeriodicTask).where(PeriodicTask.name == name).values(**values))


def set_run(url: str, run_id: str, status: str, updated_at: datetime) -> None:
    with database_for(url).session() as session:
        session.execute(
            update(TaskExecution)
            .where(TaskExecution.id == run_id)
            .values(status=status, updated_at=updated_at)
        )


#: The state beat leaves on a broken schedule with a retry owed and an occurrence held.
TROUBLE = {
    "enabled": False,
    "broken": True,
    "note": "broken: 3 failures in a row",
    "failure_streak": 3,
    "retry_plan": datetime(2026, 1, 1, tzinfo=UTC),
    "retry_attempt": 2,
    "retry_at": datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
    "held": datetime(2026, 1, 1, 0, 5, tzinfo=UTC),
}


def assert_fresh(schedule: Any) -> None:
    """Enabled, and nothing left of the breaker, the retries or a held occurrence."""
    assert (schedule.enabled, schedule.broken, schedule.note) == (True, False, None)
    assert schedule.failure_streak == 0
    assert (schedule.retry_plan, schedule.retry_attempt, schedule.retry_at) == (None,) * 3
    assert schedule.held is None


def test_resume_from_catchup_keeps_the_missed_occurrence(api: Bridge, migrated: str) -> None:
    """--from catchup restarts where it stopped, so beat catches up what was missed."""
    added = api.add("r", task=QUICK, timer="every 1m")
    missed = added.anchor - timedelta(minutes=10)
    set_columns(migrated, "r", next_occurrence=missed, nextrun=missed, **TROUBLE)
    resumed = api.resume("r", from_="catchup")
    assert (resumed.next_occurrence, resumed.nextrun) == (missed, missed)
    assert_fresh(resumed)
    assert api.get("r") == resumed


def test_resume_from_now_skips_what_was_missed(api: Bridge, migrated: str) -> None:
    """--from now (the default) restarts at the first occurrence after now."""
    added = api.add("r", task=QUICK, timer="every 1m")
    missed = added.anchor - timedelta(minutes=10)
    set_columns(migrated, "r", next_occurrence=missed, nextrun=missed, **TROUBLE)
    before = utcnow()
    resumed = api.resume("r")
    assert resumed.nextrun == resumed.next_occurrence
    assert resumed.nextrun is not None
    assert before < resumed.nextrun <= before + timedelta(minutes=1)
    assert (resumed.nextrun - added.anchor) % timedelta(minutes=1) == timedelta(0)
    assert_fresh(resumed)


def test_resume_from_now_honours_the_start(api: Bridge) -> None:
    start = (utcnow() + timedelta(days=1)).replace(minute=30, second=0, microsecond=0)
    api.add("later", task=QUICK, timer="@hourly", start=start)
    api.pause("later")
    resumed = api.resume("later", "now")
    assert resumed.nextrun == resumed.next_occurrence == start + timedelta(minutes=30)


def test_resume_from_catchup_needs_an_occurrence(api: Bridge, migrated: str) -> None:
    """A schedule with no occurrence left has nothing to catch up from: refused, unchanged."""
    api.add("done", task=QUICK, timer="@daily")
    set_columns(migrated, "done", enabled=False, next_occurrence=None, nextrun=None)
    before = api.get("done")
    with pytest.raises(ValidationError) as caught:
        api.resume("done", "catchup")
    assert (caught.value.field, caught.value.value) == ("from", "catchup")
    assert api.get("done") == before


#: The sender's own queue, so that the workers of other test runs sharing the Redis
#: database do not take its messages.
QUEUE = f"api-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sender(migrated: str, redis_url: str) -> Bridge:
    """A Bridge whose app sends to the real Redis broker, on a queue of its own."""
    app = Celery("api-sender", broker=redis_url, set_as_current=False)
    app.conf.task_default_queue = QUEUE
    return Bridge(app, database_url=migrated)


def queued(redis_url: str) -> list[str]:
    """The task ids of the messages waiting in the sender's queue, oldest first."""
    messages = redis.Redis.from_url(redis_url).lrange(QUEUE, 0, -1)
    return [json.loads(message)["headers"]["id"] for message in reversed(messages)]


def add_for_sending(api: Bridge, name: str, timer: str, **policies: Any) -> Any:
    return api.add(name, task=QUICK, timer=timer, allow_unknown_task=True, **policies)


def test_manual_run_overlap_allow_skip_and_replace(
    sender: Bridge, migrated: str, redis_url: str
) -> None:
    """allow sends beside an open run, skip refuses and writes nothing, replace revokes."""
    added = add_for_sending(sender, "man", "@yearly", remaining=5, max_failures=1)
    first = sender.run("man")
    assert (first.status, first.trigger, first.attempt) == ("SENT", "manual", 1)
    second = sender.run("man", overlap="allow")
    assert queued(redis_url) == [first.id, second.id]

    # The first is running on a worker; the second has finished.
    set_run(migrated, first.id, "STARTED", utcnow() - timedelta(seconds=5))
    set_run(migrated, second.id, "SUCCESS", utcnow())
    before = sender.history("man")
    with pytest.raises(RunSkipped) as caught:
        sender.run("man", overlap="skip")
    assert (
        str(caught.value) == f"run 'man': skipped: run {first.id} is still STARTED (overlap skip)"
    )
    assert (caught.value.run_id, caught.value.status) == (first.id, "STARTED")
    assert sender.history("man") == before
    assert queued(redis_url) == [first.id, second.id]

    third = sender.run("man", overlap="replace")
    assert third.status == "SENT"
    runs = {run.id: run for run in sender.history("man")}
    replaced = runs[first.id]
    assert replaced.status == "REVOKED"
    assert replaced.error == f"replaced by manual run {third.id}"
    assert replaced.finished_at is not None
    assert runs[second.id].status == "SUCCESS"
    assert queued(redis_url) == [first.id, second.id, third.id]

    # Manual runs count as runs but never touch the timing, the countdown or the breaker.
    after = sender.get("man")
    assert (after.nextrun, after.next_occurrence) == (added.nextrun, added.next_occurrence)
    assert (after.remaining, after.failure_streak, after.enabled) == (5, 0, True)
    assert (after.total_run_count, after.last_run_id) == (3, third.id)


def test_backfill_records_each_occurrence_once(
    sender: Bridge, migrated: str, redis_url: str
) -> None:
    """Each occurrence in [from, to] is sent once with its scheduled run id; repeats are counted."""
    added = add_for_sending(sender, "bf", "*/10 * * * *", remaining=3)
    base = (utcnow() - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    result = sender.backfill("bf", base, base + timedelta(minutes=40))
    plans = [base + timedelta(minutes=10 * k) for k in range(5)]
    assert result.existing == 0
    assert [run.plan_time for run in result.created] == plans
    assert [run.id for run in result.created] == [run_id_for(added.id, plan) for plan in plans]
    assert {(run.trigger, run.status, run.attempt) for run in result.created} == {
        ("backfill", "SENT", 1)
    }
    assert queued(redis_url) == [run.id for run in result.created]

    # An overlapping range, as ISO-8601 text: only the new occurrences are sent.
    again = sender.backfill(
        "bf",
        (base + timedelta(minutes=25)).isoformat(),
        (base + timedelta(minutes=70)).astimezone(PARIS).isoformat(),
    )
    assert again.existing == 2
    assert [run.plan_time for run in again.created] == [
        base + timedelta(minutes=m) for m in (50, 60, 70)
    ]
    assert len(queued(redis_url)) == 8
    assert len(sender.history("bf")) == 8
    # The schedule's row is not touched: timing, countdown, counters.
    assert sender.get("bf") == added


def test_backfill_limit_fixed_delay_and_overlap(
    sender: Bridge, migrated: str, redis_url: str
) -> None:
    add_for_sending(sender, "bf", "*/10 * * * *")
    base = (utcnow() - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    with pytest.raises(ValidationError) as caught:
        sender.backfill("bf", base, base + timedelta(hours=2), limit=12)
    assert caught.value.field == "to"
    assert "a range of at most 12 occurrences" in str(caught.value)
    assert sender.history("bf") == []
    assert queued(redis_url) == []
    # Both ends are included: 12 occurrences fit a limit of 12.
    assert len(sender.backfill("bf", base, base + timedelta(minutes=110), limit=12).created) == 12

    add_for_sending(sender, "delay", "every 1h after completion")
    with pytest.raises(ValidationError) as caught:
        sender.backfill("delay", base, base + timedelta(hours=2))
    assert (caught.value.field, caught.value.value) == ("timer", "every 1h after completion")

    add_for_sending(sender, "rep", "@hourly")
    manual = sender.run("rep")
    with pytest.raises(RunSkipped) as skipped:
        sender.backfill("rep", base, base + timedelta(hours=1), overlap="skip")
    assert str(skipped.value) == (
        f"backfill 'rep': skipped: run {manual.id} is still SENT (overlap skip)"
    )
    assert [run.id for run in sender.history("rep")] == [manual.id]
    result = sender.backfill("rep", base, base + timedelta(hours=1), overlap="replace")
    assert len(result.created) == 2
    revoked = {run.id: run for run in sender.history("rep")}[manual.id]
    assert (revoked.status, revoked.error) == ("REVOKED", "replaced by a backfill")


def test_a_send_the_broker_refuses_marks_the_run_failed(api: Bridge, migrated: str) -> None:
    """run and backfill share the send: a broker error leaves a FAILURE record, not PENDING."""
    app = Celery("dead-broker", broker="redis://127.0.0.1:9/0", set_as_current=False)
    app.conf.task_publish_retry = False
    app.conf.broker_transport_options = {"max_retries": 0}  # refuse at once, not after retries
    dead = Bridge(app, database_url=migrated)
    add_for_sending(dead, "nowhere", "@hourly")
    with pytest.raises(SendFailed) as caught:
        dead.run("nowhere")
    assert str(caught.value).startswith("run 'nowhere': could not send: ")
    base = (utcnow() - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    with pytest.raises(SendFailed) as caught:
        dead.backfill("nowhere", base, base + timedelta(hours=1))
    assert str(caught.value).startswith("backfill 'nowhere': could not send: ")
    runs = dead.history("nowhere")
    assert sorted((run.trigger, run.status) for run in runs) == [
        ("backfill", "FAILURE"),
        ("manual", "FAILURE"),
    ]
    assert all(run.error and run.error.startswith("could not send: ") for run in runs)
