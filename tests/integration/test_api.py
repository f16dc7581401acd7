"""Tests of the Python API (bridge.Bridge) and the schema, on SQLite and on PostgreSQL.

Round trips check the exact values a user reads back; every refusal is checked
to leave the table exactly as it was.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from importlib import resources
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import IntegrityError

from bridge import Bridge, DuplicateSchedule, ScheduleNotFound, ValidationError
from bridge.database import Database, database_for
from bridge.models import PeriodicTask, TaskExecution

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
    """next_runs gives exact instants; 09:00 Paris is 08:00 UTC in winter, 07:00 in summer."""
    api.add("dst", task=QUICK, timer="0 9 * * *", timezone="Europe/Paris")
    now = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert api.next_runs("dst", count=4, now=now) == [
        datetime(2026, 3, 28, 8, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 31, 7, 0, tzinfo=UTC),
    ]
    assert api.next_runs("dst", count=1, now=now) == [datetime(2026, 3, 28, 8, 0, tzinfo=UTC)]


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
    past = (utcnow() - timedelta(days=1)).isoformat()
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
        ("count", lambda: api.next_runs("existing", count=0), ValidationError, "count"),
        ("limit", lambda: api.history("existing", limit=0), ValidationError, "limit"),
        ("get", lambda: api.get("missing"), ScheduleNotFound, None),
        ("edit", lambda: api.edit("missing", timer="@daily"), ScheduleNotFound, None),
        ("remove", lambda: api.remove("missing"), ScheduleNotFound, None),
        ("run", lambda: api.run("missing"), ScheduleNotFound, None),
        ("history", lambda: api.history("missing"), ScheduleNotFound, None),
        ("pause", lambda: api.pause("missing", note="x"), ScheduleNotFound, None),
        ("resume", lambda: api.resume("missing"), ScheduleNotFound, None),
        ("next_runs", lambda: api.next_runs("missing"), ScheduleNotFound, None),
    ]
    return calls


def test_every_refusal_leaves_the_table_unchanged(api: Bridge) -> None:
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
