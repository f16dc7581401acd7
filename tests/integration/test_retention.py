"""Retention on SQLite and PostgreSQL: the age sweep, the counts that name the schedules to
look at, and ``Bridge.prune``, with the guarantees pruning keeps: a run that has not ended
and the latest run of each final status stay, ``pruned_through`` moves, a schedule's own
limits win over the app's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, select

from bridge import Bridge
from bridge.celery.broker import CeleryBroker
from bridge.rules.retention import Limits, to_look_at
from bridge.storage.database import database_for
from bridge.storage.models import PeriodicTask, TaskExecution
from bridge.storage.retention import BATCH, Cursor, Retention
from tests.support import on_every_store

pytestmark = on_every_store

QUICK = "workers.app.quick"


def add(api: Bridge, name: str, **fields: Any) -> int:
    schedule: Any = api.add(name, **{"task": QUICK, "timer": "every 1h", **fields})
    return int(schedule.id)


def runs(url: str, schedule_id: int, plans: list[datetime], status: str = "SUCCESS") -> None:
    """Run records of a schedule, ended (or not) at their plan times."""
    with database_for(url).engine.begin() as connection:
        connection.execute(
            insert(TaskExecution),
            [
                {
                    "id": str(uuid.uuid4()),
                    "periodic_task_id": schedule_id,
                    "task": QUICK,
                    "plan_time": plan,
                    "attempt": 1,
                    "trigger": "scheduled",
                    "status": status,
                    "updated_at": plan,
                }
                for plan in plans
            ],
        )


def kept(url: str, schedule_id: int) -> list[tuple[datetime, str]]:
    run = TaskExecution
    with database_for(url).engine.connect() as connection:
        found = connection.execute(
            select(run.plan_time, run.status)
            .where(run.periodic_task_id == schedule_id)
            .order_by(run.plan_time)
        )
        return [(plan.replace(tzinfo=UTC), status) for plan, status in found]


def pruned_through(url: str, schedule_id: int) -> datetime | None:
    with database_for(url).engine.connect() as connection:
        found = connection.scalar(
            select(PeriodicTask.pruned_through).where(PeriodicTask.id == schedule_id)
        )
    return None if found is None else found.replace(tzinfo=UTC)


def sweep(retention: Retention, days: int, limits: Limits, now: datetime) -> int:
    """The age sweep of ``days`` to its end, as the watchdog's passes go; runs deleted."""
    cursor: Cursor | None = None
    removed = 0
    while True:
        swept = retention.sweep_age(days, cursor, limits, now)
        removed += swept.runs
        cursor = swept.cursor
        if swept.done:
            return removed


def test_the_age_sweep_deletes_old_final_runs_of_every_schedule_at_once(
    api: Bridge, migrated: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    day = timedelta(days=1)
    first, second = add(api, "aged-1"), add(api, "aged-2")
    own = add(api, "aged-own", keep_days=10)
    forever = add(api, "aged-forever", keep_days=0)
    for schedule in (first, second, own, forever):
        runs(migrated, schedule, [now - (40 - i) * day for i in range(5)])  # 40 to 36 days old
        runs(migrated, schedule, [now - 35 * day], "FAILURE")  # the latest failure: kept
        runs(migrated, schedule, [now - 34 * day], "STARTED")  # not ended: kept
        runs(migrated, schedule, [now - 20 * day, now - day])  # young enough for 30 days
    retention = Retention(database_for(migrated))
    limits = Limits(0, 30)
    assert retention.keep_days_in_use(limits) == {10, 30}
    assert sweep(retention, 30, limits, now) == 10  # five old successes of each default one
    assert sweep(retention, 10, limits, now) == 6  # the own limit: five, and the 20 days old
    for schedule in (first, second):
        assert [status for _, status in kept(migrated, schedule)] == [
            "FAILURE",
            "STARTED",
            "SUCCESS",
            "SUCCESS",
        ]
        assert pruned_through(migrated, schedule) == now - 36 * day
    assert [status for _, status in kept(migrated, own)] == ["FAILURE", "STARTED", "SUCCESS"]
    assert pruned_through(migrated, own) == now - 20 * day
    assert len(kept(migrated, forever)) == 9
    assert pruned_through(migrated, forever) is None
    # Nothing new below the limit: a step reads nothing and deletes nothing.
    assert sweep(retention, 30, limits, now) == 0


def test_the_age_sweep_goes_a_batch_at_a_time_and_resumes(api: Bridge, migrated: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    schedule = add(api, "aged-many")
    oldest = now - timedelta(days=60)
    runs(migrated, schedule, [oldest + timedelta(minutes=i) for i in range(BATCH + 20)])
    retention = Retention(database_for(migrated))
    limits = Limits(0, 30)
    first = retention.sweep_age(30, None, limits, now)
    assert (first.runs, first.done) == (BATCH, False)
    second = retention.sweep_age(30, first.cursor, limits, now)
    assert (second.runs, second.done) == (19, True)  # the latest success stays
    assert len(kept(migrated, schedule)) == 1


def test_counts_name_only_the_schedules_with_runs_to_delete(api: Bridge, migrated: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    minute = timedelta(minutes=1)
    over = add(api, "count-over", keep_runs=10)  # slack: 5 more
    within = add(api, "count-within", keep_runs=10)
    aged = add(api, "count-aged", keep_days=1)
    alone = add(api, "count-alone", keep_days=1)  # its old run is the latest of its status
    runs(migrated, over, [now - i * minute for i in range(16)])
    runs(migrated, within, [now - i * minute for i in range(15)])
    runs(migrated, within, [now - timedelta(days=400)], "STARTED")
    runs(migrated, aged, [now - timedelta(days=3), now - minute])
    runs(migrated, alone, [now - timedelta(days=3)])
    retention = Retention(database_for(migrated))
    limits = Limits(100, 30)
    counted = retention.count_slice(0, 100, limits, now)
    assert counted.schedules == 4 and counted.last_id is None
    assert {f.id: f.limits for f in to_look_at(counted.counted)} == {
        over: Limits(10, 30),
        aged: Limits(100, 1),
    }
    sliced = retention.count_slice(0, 2, limits, now)
    assert (sliced.schedules, sliced.last_id) == (2, within)
    assert [f.id for f in to_look_at(retention.final_runs([aged, alone], limits, now))] == [aged]
    # Those that ended runs lately, through the index on (status, updated_at).
    assert retention.ended_since(now - 2 * minute) == [over, within, aged]
    assert retention.ended_since(now - 2 * minute, within) == [aged]
    assert retention.ended_since(now + minute) == []
    for flagged in to_look_at(counted.counted):
        retention.prune_schedule(flagged, now)
    assert len(kept(migrated, over)) == 10
    assert len(kept(migrated, aged)) == 1
    assert to_look_at(retention.count_slice(0, 100, limits, now).counted) == []


def test_bridge_prune_counts_then_prunes_every_schedule(api: Bridge, migrated: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    hour = timedelta(hours=1)
    many = add(api, "prune-many", keep_runs=3)
    old = add(api, "prune-old")
    add(api, "prune-none")
    runs(migrated, many, [now - i * hour for i in range(1, 9)])
    runs(migrated, many, [now - 20 * hour], "FAILURE")  # the latest failure: kept
    runs(migrated, old, [now - timedelta(days=40 + i) for i in range(3)])
    dry = api.prune(dry_run=True)
    assert (dry.schedules, dry.runs) == (3, 7)
    assert len(kept(migrated, many)) == 9
    done = api.prune()
    assert (done.schedules, done.runs) == (3, 7)
    assert [status for _, status in kept(migrated, many)] == ["FAILURE"] + ["SUCCESS"] * 3
    assert len(kept(migrated, old)) == 1
    assert api.prune().runs == 0


def test_the_watchdog_prunes_over_its_passes(api: Bridge, migrated: str) -> None:
    from bridge.beat.watchdog import Watchdog
    from workers.app import app

    now = datetime.now(UTC).replace(microsecond=0)
    counted = add(api, "watched-count", keep_runs=5)
    aged = add(api, "watched-age")
    runs(migrated, counted, [now - i * timedelta(minutes=1) for i in range(20)])
    runs(migrated, aged, [now - timedelta(days=40, minutes=i) for i in range(30)])
    watchdog = Watchdog(CeleryBroker(app), api.settings, api.database)
    for _ in range(3):
        watchdog.prune(datetime.now(UTC))
    assert len(kept(migrated, counted)) == 5
    assert len(kept(migrated, aged)) == 1  # the latest success
    assert pruned_through(migrated, aged) is not None


def test_a_pass_counts_the_schedules_that_ended_runs_a_part_at_a_time(
    api: Bridge, migrated: str, monkeypatch: Any
) -> None:
    """With the workers down, every schedule's expired run ends in the same minute: a
    pass counts them a part at a time, and prunes every one that went over its limit."""
    from bridge.beat import watchdog as watchdog_module
    from workers.app import app

    monkeypatch.setattr(watchdog_module, "COUNTED_AT_ONCE", 2)
    now = datetime.now(UTC).replace(microsecond=0)
    ended = [add(api, f"ended-{i}", keep_runs=2) for i in range(5)]
    watchdog = watchdog_module.Watchdog(CeleryBroker(app), api.settings, api.database)
    watchdog.prune(now - timedelta(minutes=1))  # the first pass: nothing has ended since
    for schedule in ended:
        runs(migrated, schedule, [now - timedelta(seconds=i) for i in range(5)])
    watchdog.prune(now)
    # Each schedule keeps its 2 latest runs: counted within the one pass, not found by the
    # slow count of every schedule (a slice of one schedule a pass here).
    assert [len(kept(migrated, schedule)) for schedule in ended] == [2] * 5
