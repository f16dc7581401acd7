"""What operators read and steer through the Python API, on SQLite and PostgreSQL: labels,
pages, runs across schedules, statistics, the audit log, cancel and retry, health."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import delete, event, insert, update

from bridge import Bridge, ValidationError
from bridge.celery.beat_schedule import sync_beat_schedule
from bridge.celery.broker import CeleryBroker
from bridge.errors import RunNotFound, StateConflict
from bridge.manage.bulk import export_schedules, import_schedules
from bridge.rules.decisions import Thresholds
from bridge.rules.definition import LABEL_MAX, LABELS_MAX
from bridge.rules.health import waiting_since
from bridge.rules.kinds import RunStatus
from bridge.rules.records import OPEN, Change
from bridge.service.edits import Edits
from bridge.service.records import Recording
from bridge.storage import tally
from bridge.storage.audit import Change as StoreChange
from bridge.storage.database import database_for
from bridge.storage.health import Cursors
from bridge.storage.models import BeatInstance, PeriodicTask, TaskExecution
from tests.support import on_every_store, rows

QUICK = "workers.app.quick"
#: When the schedules a test makes failing by writing their rows began to fail.
FAILING_SINCE = datetime(2026, 11, 1, tzinfo=UTC)
QUEUE = f"operations-test-{uuid.uuid4().hex[:8]}"
START = datetime(2026, 11, 1, 12, tzinfo=UTC)


def add(api: Bridge, name: str, **fields: Any) -> Any:
    return api.add(name, **{"task": QUICK, "timer": "every 1h", **fields})


def record(
    url: str, schedule_id: int, plan_time: datetime, status: str = "SUCCESS", **values: Any
) -> str:
    """A run record, written as beat and a worker would have left it."""
    run_id = str(uuid.uuid4())
    with database_for(url).engine.begin() as connection:
        connection.execute(
            insert(TaskExecution).values(
                id=run_id,
                periodic_task_id=schedule_id,
                task=QUICK,
                plan_time=plan_time,
                attempt=values.pop("attempt", 1),
                trigger=values.pop("trigger", "scheduled"),
                status=status,
                updated_at=plan_time,
                **values,
            )
        )
    return run_id


@pytest.fixture
def sender(migrated: str, redis_url: str) -> Bridge:
    """A Bridge whose app sends to the real Redis broker, on a queue no worker reads."""
    app = Celery("operations", broker=redis_url, set_as_current=False)
    app.conf.task_default_queue = QUEUE
    return Bridge(app, database_url=migrated, actor="test:operator")


# -- labels --------------------------------------------------------------------------------


def test_labels_are_set_replaced_filtered_and_acted_on(api: Bridge) -> None:
    add(api, "a", labels=["team:ops", "nightly"])
    add(api, "b", labels="team:ops")
    add(api, "c")
    assert api.get("a").labels == ("nightly", "team:ops")
    assert [s.name for s in api.schedules(label="team:ops").items] == ["a", "b"]
    api.edit("b", labels=["other"])
    assert [s.name for s in api.schedules(label="team:ops").items] == ["a"]
    assert api.edit("b", labels="other").updated_at == api.get("b").updated_at
    paused = api.pause_label("other", note="freeze")
    assert [(s.name, s.enabled, s.note) for s in paused] == [("b", False, "freeze")]
    assert api.pause_label("other") == []  # paused already: left as it is
    assert [s.name for s in api.resume_label("other")] == ["b"]
    with pytest.raises(ValidationError) as caught:
        api.pause_label("two words")
    assert caught.value.field == "label"


@on_every_store
def test_a_page_lists_every_label_of_each_schedule_however_many_and_long(api: Bridge) -> None:
    most = [f"{n:02d}".ljust(LABEL_MAX, "x") for n in reversed(range(LABELS_MAX))]
    add(api, "a", labels=["team:ops", "nightly"])
    add(api, "b")
    add(api, "c", labels=most)
    pages = (api.schedules(), api.schedules(sort="next"), api.schedules(label=most[0]))
    assert [[(s.name, s.labels) for s in page.items] for page in pages] == [
        [("a", ("nightly", "team:ops")), ("b", ()), ("c", tuple(sorted(most)))],
        [("a", ("nightly", "team:ops")), ("b", ()), ("c", tuple(sorted(most)))],
        [("c", tuple(sorted(most)))],
    ]


def test_labels_travel_through_export_and_import(api: Bridge, migrated: str) -> None:
    add(api, "exported", labels=["a", "b"])
    text = "".join(line + "\n" for line in export_schedules(api))
    assert json.loads(text)["labels"] == ["a", "b"]
    api.remove("exported")
    report = import_schedules(api, io.StringIO(text))
    assert report.created == 1
    assert api.get("exported").labels == ("a", "b")
    relabelled = text.replace('"labels": ["a", "b"]', '"labels": ["c"]')
    assert import_schedules(api, io.StringIO(relabelled)).updated == 1
    assert api.get("exported").labels == ("c",)
    assert import_schedules(api, io.StringIO(relabelled)).unchanged == 1
    assert rows(migrated, "SELECT label FROM schedule_label") == [("c",)]


# -- pages ---------------------------------------------------------------------------------


def test_pages_cover_every_schedule_once_in_either_order(api: Bridge) -> None:
    for index in range(23):
        add(api, f"s{index:02d}", timer=f"{index} * * * *", enabled=index % 5 != 0)
    names: list[str] = []
    cursor = None
    while True:
        page = api.schedules(limit=7, cursor=cursor)
        names += [s.name for s in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert names == [f"s{index:02d}" for index in range(23)]
    soonest: list[Any] = []
    cursor = None
    while True:
        page = api.schedules(sort="next", limit=4, cursor=cursor)
        soonest += page.items
        if page.next is None:
            break
        cursor = page.next
    assert len(soonest) == 18  # the enabled ones
    assert [s.nextrun for s in soonest] == sorted(s.nextrun for s in soonest)
    assert api.schedules(prefix="s1").items[0].name == "s10"
    assert {s.name for s in api.schedules(paused=True).items} == {"s00", "s05", "s10", "s15", "s20"}
    with pytest.raises(ValidationError) as caught:
        api.schedules(sort="next", cursor=api.schedules(limit=1).next)
    assert caught.value.field == "cursor"
    for bad in ({"limit": 0}, {"limit": 1001}, {"sort": "size"}, {"enabled": "yes"}):
        with pytest.raises(ValidationError):
            api.schedules(**bad)


def test_late_schedules_are_those_due_beyond_the_grace(api: Bridge, migrated: str) -> None:
    add(api, "on-time")
    late = add(api, "late")
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            update(PeriodicTask)
            .where(PeriodicTask.id == late.id)
            .values(nextrun=datetime.now(UTC) - timedelta(minutes=5))
        )
    assert [s.name for s in api.schedules(late=True).items] == ["late"]


# -- runs ------------------------------------------------------------------------------------


def test_runs_of_every_schedule_newest_first_filtered_and_paged(api: Bridge, migrated: str) -> None:
    first, second = add(api, "first"), add(api, "second")
    made = []
    for minute in range(10):
        schedule = first if minute % 2 else second
        status = "FAILURE" if minute % 3 == 0 else "SUCCESS"
        trigger = "manual" if minute == 4 else "scheduled"
        plan = START + timedelta(minutes=minute)
        made.append((plan, record(migrated, schedule.id, plan, status, trigger=trigger)))
    newest = [run_id for _, run_id in sorted(made, reverse=True)]
    seen: list[str] = []
    cursor = None
    while True:
        page = api.runs(limit=3, cursor=cursor)
        seen += [run.id for run in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert seen == newest
    assert {run.schedule for run in api.runs("first").items} == {"first"}
    failed = api.runs(status="FAILURE")
    assert [run.plan_time.minute for run in failed.items] == [9, 6, 3, 0]
    assert [run.plan_time.minute for run in api.runs(trigger="manual").items] == [4]
    window = api.runs(since=START + timedelta(minutes=2), until=START + timedelta(minutes=5))
    assert [run.plan_time.minute for run in window.items] == [4, 3, 2]
    assert api.runs(status="FAILURE,SUCCESS", limit=100).items == api.runs(limit=100).items
    with pytest.raises(ValidationError) as caught:
        api.runs(status="DONE")
    assert (caught.value.field, caught.value.value) == ("status", "DONE")
    with pytest.raises(ValidationError):
        api.runs(since="yesterday")
    with pytest.raises(RunNotFound):
        api.run_info("no-such-run")


@on_every_store
def test_the_latest_statuses_of_a_page_of_schedules_oldest_first(
    api: Bridge, migrated: str
) -> None:
    """The list's strips: each schedule's newest ``count`` runs, oldest first (a retry after
    the attempt it follows), in one read for the page; none for a schedule without runs."""
    busy, quiet, idle = add(api, "busy"), add(api, "quiet"), add(api, "idle")
    for minute in range(5):
        record(migrated, busy.id, START + timedelta(minutes=minute), "FAILURE")
    # A lost run and its retry: in the order of their attempts, not of their statuses' names.
    record(migrated, busy.id, START + timedelta(minutes=5), "LOST")
    record(migrated, busy.id, START + timedelta(minutes=5), "FAILURE", attempt=2)
    record(migrated, quiet.id, START, "REVOKED")
    for _ in range(2):  # the statement is built once, then bound anew
        found = api.recent_statuses([busy.id, quiet.id, idle.id], 3)
        assert found == {
            busy.id: [
                (iso(START + timedelta(minutes=4)), "FAILURE"),
                (iso(START + timedelta(minutes=5)), "LOST"),
                (iso(START + timedelta(minutes=5)), "FAILURE"),
            ],
            quiet.id: [(iso(START), "REVOKED")],
        }
    assert api.recent_statuses([], 3) == {}


def iso(moment: datetime) -> str:
    """A time as the strips' read gives it: ISO 8601 in UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def end_run(url: str, run_id: str, status: str, at: datetime, runtime: float) -> None:
    """A worker's report that the run ended, written as the recorder writes it."""
    change = Change(
        run_id,
        RunStatus(status),
        OPEN,
        at,
        {"finished_at": at, "runtime": runtime, "started_at": at - timedelta(seconds=runtime)},
    )
    Recording(database_for(url), Thresholds()).write([change])


def test_stats_over_a_window_survive_pruned_records(api: Bridge, migrated: str) -> None:
    schedule = add(api, "measured")
    now = datetime.now(UTC)
    ids = []
    for index, runtime in enumerate([1.0, 2.0, 3.0, 4.0, 10.0]):
        plan = now - timedelta(minutes=index + 1)
        run_id = record(migrated, schedule.id, plan, "STARTED", started_at=plan)
        end_run(
            migrated,
            run_id,
            "SUCCESS" if index < 4 else "FAILURE",
            plan + timedelta(seconds=runtime),
            runtime,
        )
        ids.append(run_id)
    record(migrated, schedule.id, now - timedelta(seconds=10), "SENT")
    figures = api.stats("measured", "1h", now=now + timedelta(minutes=1))
    assert figures.counts == {"SUCCESS": 4, "FAILURE": 1, "SENT": 1}
    assert figures.success_rate == 0.8
    assert figures.duration == {"count": 5.0, "p50": 3.0, "p95": 10.0, "max": 10.0}
    assert figures.totals["SUCCESS"] == 4
    # The records go (as pruning removes them); the counts stay.
    with database_for(migrated).engine.begin() as connection:
        connection.execute(delete(TaskExecution).where(TaskExecution.id.in_(ids)))
    after = api.stats("measured", "1h", now=now + timedelta(minutes=1))
    assert after.counts == {"SUCCESS": 4, "FAILURE": 1, "SENT": 1}
    assert after.duration["count"] == 0.0
    assert api.get("measured").last_failure_at is not None
    with pytest.raises(ValidationError) as caught:
        api.stats("measured", "forever")
    assert caught.value.field == "window"


@on_every_store
def test_the_next_days_fires_each_labels_rate_and_a_schedules_gaps(
    api: Bridge, migrated: str
) -> None:
    """What the overview and a schedule's page draw, as the store answers on each dialect."""
    now = datetime.now(UTC).replace(minute=30)
    for index in range(3):
        add(api, f"nightly-{index}", timer="0 3 * * *", timezone="UTC", labels=["night"])
    hourly = add(api, "hourly", timer="0 * * * *", timezone="UTC", labels=["day", "team"])
    add(api, "paused", timer="0 * * * *", timezone="UTC")
    api.pause("paused")
    timeline = api.timeline(now=now)
    by_timer = {group.timer: group for group in timeline.groups}
    assert set(by_timer) == {"0 3 * * *", "0 * * * *"} and timeline.left_out == 0
    nightly, each_hour = by_timer["0 3 * * *"], by_timer["0 * * * *"]
    assert (nightly.schedules, nightly.first_name, nightly.words) == (
        3,
        "nightly-0",
        "every day at 03:00 (UTC)",
    )
    assert [fire.hour for fire in nightly.fires] == [3] and not nightly.more
    assert each_hour.schedules == 1 and len(each_hour.fires) == 24  # not the paused one
    assert all(now < fire < now + timedelta(hours=24) for fire in each_hour.fires)
    # A schedule that skips the even hours is a group of its own, without them.
    api.add_calendar("even-hours", cron="* */2 * * *", timezone="UTC")
    add(api, "odd-hours", timer="0 * * * *", timezone="UTC", skip_calendars=["even-hours"])
    groups = api.timeline(now=now).groups
    odd = next(group for group in groups if group.first_name == "odd-hours")
    assert len(odd.fires) == 12 and all(fire.hour % 2 for fire in odd.fires)
    assert next(g for g in groups if g.first_name == "hourly").schedules == 1
    for index, status in enumerate(["SUCCESS", "SUCCESS", "FAILURE"]):
        plan = now - timedelta(hours=index + 1)
        run_id = record(migrated, hourly.id, plan, "STARTED", started_at=plan)
        end_run(migrated, run_id, status, plan + timedelta(seconds=1), 1.0)
    rates = {rate.label: rate for rate in api.label_rates("7d", now=now)}
    assert set(rates) == {"day", "team"}  # "night" has no run that ended
    assert rates["day"].counts == {"SUCCESS": 2, "FAILURE": 1}
    assert rates["day"].success_rate == pytest.approx(2 / 3)
    assert api.label_rates("1h", now=now + timedelta(days=8)) == []
    database = database_for(migrated)
    with database.session() as session:
        tally.add(session, hourly.id, now - timedelta(hours=5), skipped=2)
        tally.add(session, hourly.id, now - timedelta(hours=2), missed=4)
    gaps = api.gaps("hourly", now - timedelta(days=1))
    assert [(gap.hour, gap.skipped, gap.missed) for gap in gaps] == [
        (tally.hour_of(now - timedelta(hours=2)), 0, 4),
        (tally.hour_of(now - timedelta(hours=5)), 2, 0),
    ]
    assert api.gaps("hourly", now - timedelta(hours=3)) == gaps[:1]


# -- cancel, retry, counters ---------------------------------------------------------------------


def test_cancel_and_retry_are_recorded_and_counted(sender: Bridge, migrated: str) -> None:
    schedule = add(sender, "steered", allow_unknown_task=True)
    run = sender.run("steered")
    cancelled = sender.cancel(run.id, note="wrong input")
    assert (cancelled.status, cancelled.error) == (
        "REVOKED",
        "cancelled by test:operator: wrong input",
    )
    with pytest.raises(StateConflict) as caught:
        sender.cancel(run.id)
    assert caught.value.expected == "a run that has not ended (it is REVOKED)"
    counted = sender.get("steered")
    assert (counted.revoked_count, counted.success_count) == (1, 0)
    assert (counted.last_run_id, counted.last_status) == (run.id, "REVOKED")
    retried = sender.retry(run.id)
    assert (retried.attempt, retried.plan_time, retried.trigger) == (2, run.plan_time, "manual")
    with pytest.raises(StateConflict):
        sender.retry(run.id)
    with pytest.raises(StateConflict) as caught:
        sender.retry(retried.id)  # SENT: nothing to retry yet
    assert "it is SENT" in caught.value.expected
    succeeded = record(migrated, schedule.id, START, "SUCCESS")
    with pytest.raises(StateConflict):
        sender.retry(succeeded)
    trail = [(entry.action, entry.actor) for entry in sender.audit("steered").items]
    assert trail[:3] == [
        ("retry", "test:operator"),
        ("cancel", "test:operator"),
        ("run", "test:operator"),
    ]


# -- the audit log -----------------------------------------------------------------------------


def test_every_surface_writes_the_audit_log(api: Bridge, migrated: str) -> None:
    operator = Bridge(api.app, database_url=migrated, actor="python:alice@host")
    add(operator, "tracked", labels="x")
    operator.edit("tracked", jitter="10s", labels="")
    operator.edit("tracked", jitter="10s")  # the same values: no entry
    operator.pause("tracked", note="why")
    operator.resume("tracked")
    operator.remove("tracked")
    entries = operator.audit("tracked").items
    assert [e.action for e in entries] == ["delete", "resume", "pause", "edit", "create"]
    assert {e.actor for e in entries} == {"python:alice@host"}
    edit = entries[3].to_json()
    assert (edit["before"], edit["after"]) == (
        {"jitter": 0.0, "labels": ["x"]},
        {"jitter": 10.0, "labels": []},
    )
    assert entries[2].note == "why"

    line = json.dumps({"name": "imported", "task": QUICK, "timer": "every 5m"})
    import_schedules(operator, io.StringIO(line + "\n"))
    import_schedules(operator, io.StringIO(line.replace("5m", "10m") + "\n"))
    imported = operator.audit("imported").items
    assert [(e.action, e.note) for e in imported] == [
        ("edit", "bridge import"),
        ("create", "bridge import"),
    ]
    assert imported[0].to_json()["after"] == {"timer": "every 10m"}

    app = Celery("synced", set_as_current=False)
    app.conf.bridge_database_url = migrated
    app.conf.beat_schedule = {"from-config": {"task": QUICK, "schedule": 30.0}}
    sync_beat_schedule(app, database_for(migrated))
    sync_beat_schedule(app, database_for(migrated))  # unchanged: no entry
    app.conf.beat_schedule = {}
    sync_beat_schedule(app, database_for(migrated))
    synced = operator.audit("from-config").items
    assert [(e.action, e.actor) for e in synced] == [
        ("pause", "beat_schedule sync"),
        ("create", "beat_schedule sync"),
    ]
    every = operator.audit(limit=2)
    assert len(every.items) == 2 and every.next is not None
    assert operator.audit(cursor=every.next, limit=1).items[0].id < every.items[-1].id


# -- health --------------------------------------------------------------------------------------


def test_health_needs_a_ticking_beat(api: Bridge, migrated: str) -> None:
    report = api.health()
    assert (report.ok, report.schema_current) == (False, True)
    assert report.problems() == [
        f"no beat instance ticked within {api.settings.lease_seconds:g}s (none is registered)"
    ]
    now = datetime.now(UTC)
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            insert(BeatInstance).values(
                id="h:1:x", host="h", pid=1, started_at=now, last_tick=now, sent=0
            )
        )
    assert api.health().ok is True
    assert api.health(beat_timeout=1, now=now + timedelta(seconds=5)).ok is False


def test_a_deleted_schedule_closes_its_incidents_and_keeps_them(api: Bridge, migrated: str) -> None:
    from bridge.storage.incidents import IncidentStore, Opening

    schedule = add(api, "doomed-one")
    store = IncidentStore(database_for(migrated))
    [opened] = store.open([Opening("late", schedule.id, "doomed-one", None, "late")], START)
    record(migrated, schedule.id, START)
    api.remove("doomed-one")
    [incident] = api.incidents().items
    assert (incident.id, incident.schedule_name) == (opened, "doomed-one")
    assert incident.closed_at is not None
    assert rows(migrated, "SELECT count(*) FROM task_execution") == [(0,)]


def test_an_alert_a_target_refused_is_tried_again_after_its_backoff(
    api: Bridge, migrated: str
) -> None:
    from datetime import timedelta as span

    from bridge.storage.incidents import IncidentStore, Opening

    store = IncidentStore(database_for(migrated))
    [opened] = store.open([Opening("no_beat", None, None, None, "silence")], START)
    hour = span(hours=1)
    assert store.claim(opened, START, hour) == "opened"
    assert store.claim(opened, START, hour) is None  # claimed: no second sender
    assert [i.id for i in store.owed(START, hour, 10)] == []
    # Refused by a target: not owed again before the backoff ends, and it says why.
    store.defer(opened, START + span(seconds=5), "URL 1 (json) refused the opened alert", "o")
    assert store.claim(opened, START + span(seconds=4), hour) is None
    [owed] = store.owed(START + span(seconds=6), hour, 10)
    assert (owed.alert_attempts, owed.alert_error, owed.alert_sent_to) == (
        1, "URL 1 (json) refused the opened alert", "o",
    )  # fmt: skip
    assert store.claim(opened, START + span(seconds=6), hour) == "opened"
    store.sent(opened, "opened", START)
    [done] = store.page(False, None, 10)
    assert (done.alert_attempts, done.alert_error, done.alert_sent_to) == (0, None, None)
    assert store.owed(START + span(minutes=1), hour, 10) == []
    # A claim whose holder died lapses: another may send.
    assert store.claim(opened, START + 2 * hour, hour) == "repeat"
    assert store.claim(opened, START + 2 * hour + span(minutes=1), hour) == "repeat"


@pytest.mark.parametrize("db_url", ["postgres", "mariadb"], indirect=True)
def test_an_alert_another_sender_sent_meanwhile_is_not_claimed_again(
    api: Bridge, migrated: str
) -> None:
    """Two beats' watchdogs both find an incident owing its opening alert; one claims it and
    sends it while the other is about to claim it. The other then finds nothing owed.
    (On SQLite a session takes the write lock as it begins: claims cannot interleave.)"""
    from bridge.storage.database import Database
    from bridge.storage.incidents import IncidentStore, Opening

    first = IncidentStore(database_for(migrated))
    second = IncidentStore(Database(migrated))
    [opened] = first.open([Opening("no_beat", None, None, None, "silence")], START)
    hour = timedelta(hours=1)
    sent_first: list[str | None] = []

    def first_sends_it(_c: object, _cursor: object, statement: str, *_: object) -> None:
        if not sent_first and statement.lstrip().upper().startswith("UPDATE INCIDENT"):
            sent_first.append(event_claimed := first.claim(opened, START, hour))
            first.sent(opened, str(event_claimed), START)

    event.listen(second.database.engine, "before_cursor_execute", first_sends_it)
    try:
        assert second.claim(opened, START, hour) is None
    finally:
        event.remove(second.database.engine, "before_cursor_execute", first_sends_it)
        second.database.dispose()
    assert sent_first == ["opened"]
    [(alerts,)] = rows(migrated, "SELECT alerts FROM incident")
    assert alerts == 1


def test_a_backfill_does_not_resend_what_retention_pruned(sender: Bridge, migrated: str) -> None:
    from bridge.rules.retention import FinalRuns, Limits
    from bridge.storage.retention import Retention

    schedule = add(sender, "kept-short", timer="0 * * * *", allow_unknown_task=True)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=5)
    first = sender.backfill("kept-short", start, end)
    assert len(first.created) == 6
    for run in first.created:
        sender.cancel(run.id)
    retention = Retention(database_for(migrated))
    done = retention.prune_schedule(FinalRuns(schedule.id, Limits(2, 0)), datetime.now(UTC))
    assert done == 4  # six runs: the two latest are kept
    again = sender.backfill("kept-short", start, end)
    assert (len(again.created), again.existing) == (0, 6)
    assert schedule.id


def test_a_prefix_tells_case_apart_on_both_databases(api: Bridge) -> None:
    add(api, "report")
    add(api, "Report-2")
    assert [s.name for s in api.schedules(prefix="rep").items] == ["report"]
    assert [s.name for s in api.schedules(prefix="Rep").items] == ["Report-2"]


@on_every_store
def test_incidents_open_in_batches_each_once_per_kind_and_subject(
    api: Bridge, migrated: str
) -> None:
    """More openings than one statement takes: each opens once, one open already is
    skipped, and the ids given are those of the incidents opened."""
    from bridge.storage.incidents import OPEN_BATCH, IncidentStore, Opening

    count = 2 * OPEN_BATCH + 7
    lines = "".join(
        json.dumps({"name": f"s{n}", "task": QUICK, "timer": "@daily"}) + "\n" for n in range(count)
    )
    assert import_schedules(api, io.StringIO(lines)).created == count
    ids = {name: number for number, name in rows(migrated, "SELECT id, name FROM periodic_task")}
    store = IncidentStore(database_for(migrated))
    [first] = store.open([Opening("late", ids["s0"], "s0", None, "late")], START)
    openings = [
        Opening("late", ids["s0"], "s0", None, "late"),  # open already
        *(Opening("failing", ids[f"s{n}"], f"s{n}", None, f"failing {n}") for n in range(count)),
    ]
    inserts: list[str] = []

    def seen(_c: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO INCIDENT"):
            inserts.append(statement)

    event.listen(store.database.engine, "before_cursor_execute", seen)
    try:
        opened = store.open(openings, START + timedelta(seconds=1))
    finally:
        event.remove(store.database.engine, "before_cursor_execute", seen)
    assert len(inserts) == -(-len(openings) // OPEN_BATCH), "one INSERT per batch"
    assert len(opened) == len(set(opened)) == count
    assert first not in opened
    assert store.open(openings, START + timedelta(seconds=2)) == []
    found = rows(migrated, "SELECT id, kind, subject FROM incident WHERE closed_at IS NULL")
    assert sorted(row[0] for row in found) == sorted([first, *opened])
    assert sorted(row[2] for row in found if row[1] == "failing") == sorted(
        f"schedule:{number}" for number in ids.values()
    )


@on_every_store
def test_the_watchdog_looks_at_failing_schedules_in_turn_when_there_are_more_than_a_look_takes(
    api: Bridge, migrated: str
) -> None:
    """Five failing schedules, looks of two: each look takes the next two by id, and after
    the last the looks start again, so every one of them is judged in turn."""
    from bridge.storage.health import HealthStore

    ids = [add(api, f"failing-{n}").id for n in range(5)]
    add(api, "healthy")
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            update(PeriodicTask)
            .where(PeriodicTask.id.in_(ids))
            .values(failure_streak=3, failing_since=FAILING_SINCE)
        )
    store = HealthStore(database_for(migrated))
    now = datetime.now(UTC)
    looked: list[list[int]] = []
    cursors = Cursors()
    for _ in range(4):
        found, cursors = store.at_risk(now, 3600.0, 0.0, 2, cursors)
        looked.append(found)
    assert looked == [ids[0:2], ids[2:4], ids[4:5], ids[0:2]]


def failing(api: Bridge, migrated: str) -> list[int]:
    """Five schedules failing since :data:`FAILING_SINCE`, with no incident yet: their ids."""
    ids = [add(api, f"failing-{n}").id for n in range(5)]
    table = PeriodicTask.__table__
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            update(table)
            .where(table.c.id.in_(ids))
            .values(failure_streak=3, failing_since=FAILING_SINCE)
        )
    return ids


def failing_with_incidents(
    api: Bridge, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], Any, datetime]:
    """Five failing schedules, each with its incident opened by a watchdog whose looks take
    two: their ids, the watchdog, and when it first judged them."""
    from bridge.beat import watchdog as watchdog_module
    from workers.app import app

    monkeypatch.setattr(watchdog_module, "AT_RISK_LIMIT", 2)
    ids = failing(api, migrated)
    watchdog = watchdog_module.Watchdog(CeleryBroker(app), api.settings, api.database)
    now = datetime.now(UTC)
    for look in range(3):  # looks of 2, 2 and 1
        watchdog.judge(now + timedelta(seconds=look))
    return ids, watchdog, now


@on_every_store
def test_a_settled_incident_goes_on_unjudged_until_a_run_ends_and_closes_as_its_row_recovers(
    api: Bridge, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five failing schedules, looks of two. Once each has its incident, a look reads only
    the schedules whose trouble may have changed: one with a run that ended since the
    last look (its message restated), those whose row says the trouble may be over (one
    recovered, one paused), whose incidents close, and one whose breaker tripped, which
    gets its `broken` incident; the others' stay open, read in a slow round."""
    from bridge.storage.health import HealthStore

    ids, watchdog, now = failing_with_incidents(api, migrated, monkeypatch)
    table = PeriodicTask.__table__

    def open_incidents() -> dict[tuple[int, str], str]:
        found = rows(
            migrated,
            "SELECT periodic_task_id, kind, message FROM incident WHERE closed_at IS NULL",
        )
        return {(row[0], row[1]): row[2] for row in found}

    assert sorted(open_incidents()) == [(number, "failing") for number in ids]
    paused = add(api, "paused-failing").id  # paused, not failing: never an incident
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            update(table)
            .where(table.c.id == paused)
            .values(failure_streak=2, failing_since=FAILING_SINCE, enabled=False)
        )
    store = HealthStore(database_for(migrated))
    cursors, rounds = Cursors(), []
    for _ in range(7):  # every incident settled: one a look (a hundredth of 2, at least 1)
        found, cursors = store.at_risk(now, 3600.0, 0.0, 2, cursors)
        rounds.append(found)
    assert rounds == [[ids[0]], [ids[1]], [ids[2]], [ids[3]], [ids[4]], [], [ids[0]]]

    later = now + timedelta(seconds=3)
    record(migrated, ids[0], later, "FAILURE")  # what the recorder writes with its streak
    with database_for(migrated).engine.begin() as connection:
        connection.execute(update(table).where(table.c.id == ids[0]).values(failure_streak=4))
        connection.execute(
            update(table).where(table.c.id == ids[1]).values(broken=True, enabled=False)
        )
        connection.execute(update(table).where(table.c.id == ids[3]).values(enabled=False))
        connection.execute(
            update(table).where(table.c.id == ids[4]).values(failure_streak=0, failing_since=None)
        )
    after_round = Cursors(settled_after=ids[4], ended_since=later)
    found, _ = store.at_risk(later, 3600.0, 0.0, 2, after_round)
    assert found == [ids[0], ids[1], ids[3], ids[4]]
    watchdog.judge(later)
    assert open_incidents() == {
        (ids[0], "failing"): "its last 4 occurrences failed",
        (ids[1], "failing"): "its last 3 occurrences failed",  # lasts through broken
        (ids[1], "broken"): "the breaker disabled it",
        (ids[2], "failing"): "its last 3 occurrences failed",
    }


@on_every_store
def test_incidents_whose_trouble_may_be_over_are_judged_in_turn_a_look_at_a_time(
    api: Bridge, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five failing schedules with their incidents open are paused: their rows no longer say
    the trouble goes on. Looks of two take them two at a time by id, and a pass of the
    watchdog closes the incidents of the schedules it judged, leaving the others open as
    they are until a pass judges them (with every schedule late, judging all of them at
    each pass held all their rows and runs at once)."""
    from bridge.storage.health import HealthStore

    ids, watchdog, now = failing_with_incidents(api, migrated, monkeypatch)
    table = PeriodicTask.__table__

    def still_open() -> list[int]:
        return sorted(
            row[0]
            for row in rows(
                migrated, "SELECT periodic_task_id FROM incident WHERE closed_at IS NULL"
            )
        )

    assert still_open() == ids
    with database_for(migrated).engine.begin() as connection:
        connection.execute(update(table).where(table.c.id.in_(ids)).values(enabled=False))
    store = HealthStore(database_for(migrated))
    cursors, looks = Cursors(), []
    for _ in range(4):
        found, cursors = store.at_risk(now, 3600.0, 0.0, 2, cursors)
        looks.append(found)
    assert looks == [ids[0:2], ids[2:4], ids[4:5], ids[0:2]]
    later = now + timedelta(seconds=5)
    watchdog.judge(later)
    assert still_open() == ids[2:]
    watchdog.judge(later + timedelta(seconds=1))
    watchdog.judge(later + timedelta(seconds=2))
    assert still_open() == []


@on_every_store
def test_a_pass_reads_and_judges_the_schedules_it_found_a_part_at_a_time(
    api: Bridge, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five failing schedules, parts of two: one pass reads them two, two and one at a time
    and opens all five incidents; once they recover, one pass closes all five."""
    from bridge.beat import watchdog as watchdog_module
    from bridge.storage.health import HealthStore
    from workers.app import app

    monkeypatch.setattr(watchdog_module, "JUDGED_AT_ONCE", 2)
    parts: list[list[int]] = []
    judged = HealthStore.judged

    def reading(self: HealthStore, ids: list[int], *args: Any, **kwargs: Any) -> Any:
        parts.append(list(ids))
        return judged(self, ids, *args, **kwargs)

    monkeypatch.setattr(HealthStore, "judged", reading)
    ids = failing(api, migrated)
    table = PeriodicTask.__table__
    watchdog = watchdog_module.Watchdog(CeleryBroker(app), api.settings, api.database)
    now = datetime.now(UTC)
    watchdog.judge(now)
    assert parts == [ids[0:2], ids[2:4], ids[4:5]]
    query = "SELECT periodic_task_id FROM incident WHERE closed_at IS NULL"
    assert sorted(row[0] for row in rows(migrated, query)) == ids
    with database_for(migrated).engine.begin() as connection:
        connection.execute(
            update(table).where(table.c.id.in_(ids)).values(failure_streak=0, failing_since=None)
        )
    watchdog.judge(now + timedelta(seconds=1))
    assert rows(migrated, query) == []


@on_every_store
def test_the_watchdog_reads_only_the_open_runs_that_may_be_late_or_overrun(
    api: Bridge, migrated: str
) -> None:
    """A run waiting within its grace, or going within its max runtime, cannot make its
    schedule late or overrun: a look reads only the schedules of the others."""
    from bridge.storage.health import HealthStore

    now = datetime.now(UTC)
    hours_ago = now - timedelta(hours=2)
    ids = {name: add(api, name, max_runtime="1h").id for name in ("going", "overran")}
    ids |= {name: add(api, name).id for name in ("waiting", "late", "no-limit", "zero")}
    with database_for(migrated).engine.begin() as connection:  # 0 as stored by hand: no limit
        connection.execute(
            update(PeriodicTask).where(PeriodicTask.id == ids["zero"]).values(max_runtime=0)
        )
    record(migrated, ids["going"], now, "STARTED", started_at=now - timedelta(seconds=10))
    record(migrated, ids["overran"], hours_ago, "STARTED", started_at=hours_ago)
    record(migrated, ids["waiting"], now - timedelta(seconds=10), "SENT")
    record(migrated, ids["late"], hours_ago, "SENT", queued_at=hours_ago)
    record(migrated, ids["no-limit"], hours_ago, "STARTED", started_at=hours_ago)
    record(migrated, ids["zero"], hours_ago, "STARTED", started_at=hours_ago)
    store = HealthStore(database_for(migrated))

    def looked(default_max_runtime: float) -> set[str]:
        found, _ = store.at_risk(now, 3600.0, default_max_runtime, 10)
        names = {number: name for name, number in ids.items()}
        return {names[number] for number in found}

    assert looked(0.0) == {"overran", "late"}
    assert looked(60.0) == {"overran", "late", "no-limit", "zero"}


@on_every_store
def test_a_backlog_of_queued_runs_is_read_from_the_oldest_no_start_passed_over(
    api: Bridge, migrated: str
) -> None:
    """Workers down for hours: a run a minute expired unstarted, then waits. The health reads
    the runs started and the three oldest of the others that no start passed over, and
    judges each schedule late since the oldest of those, as from all of them."""
    from bridge.rules.decisions import EXPIRED
    from bridge.storage.runs import QUEUED_SEEN, runs_seen

    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(minutes=300)

    def backlog(name: str, resumed_at: int | None) -> tuple[int, list[str], str]:
        """A schedule's run started ``first``, then a run a minute, expired until the 200th
        minute and waiting since; a run started at minute ``resumed_at`` and succeeded."""
        schedule = add(api, name, timer="every 1m", max_runtime="1d")
        started = record(migrated, schedule.id, first, "STARTED", started_at=first)
        queued = []
        for minute in range(1, 300):
            plan = first + timedelta(minutes=minute)
            if minute == resumed_at:
                record(migrated, schedule.id, plan, "SUCCESS", started_at=plan, queued_at=plan)
                continue
            if minute < 200:  # expired at its next occurrence, never started
                ended = plan + timedelta(minutes=1)
                values = {"error": EXPIRED, "finished_at": ended, "queued_at": plan}
                queued.append(record(migrated, schedule.id, plan, "REVOKED", **values))
            else:
                queued.append(record(migrated, schedule.id, plan, "SENT", queued_at=plan))
        return schedule.id, queued, started

    stopped, stopped_runs, stopped_start = backlog("stopped", None)
    resumed, resumed_runs, resumed_start = backlog("resumed", 250)
    with database_for(migrated).session() as session:
        read = runs_seen(session, [stopped, resumed], now, waiting_since, count_open=True)
    # Every run not final is counted (for the metrics): the one started, and those sent
    # from minute 200 on.
    assert read.open_counts == {stopped: 1 + 100, resumed: 1 + 99}
    seen = {schedule: {run.id for run in runs} for schedule, runs in read.runs.items()}
    # The oldest queued runs, a few of each kind (waiting, expired), and the one started.
    assert {stopped_start, *stopped_runs[:QUEUED_SEEN]} <= seen[stopped]
    assert len(seen[stopped]) <= 1 + 2 * QUEUED_SEEN
    # Runs 1 to 249 were passed over by the run of minute 250: runs 251 on are read too.
    after = resumed_runs[249 : 249 + QUEUED_SEEN]
    assert {resumed_start, *after} <= seen[resumed]
    assert len(seen[resumed]) <= 1 + 4 * QUEUED_SEEN
    shown = {schedule.name: schedule for schedule in api.list()}
    assert (shown["stopped"].health, shown["stopped"].health_since) == (
        "late",
        first + timedelta(minutes=1),
    )
    assert (shown["resumed"].health, shown["resumed"].health_since) == (
        "late",
        first + timedelta(minutes=251),
    )


@on_every_store
def test_the_look_at_ended_runs_gets_past_more_runs_ended_at_one_instant_than_it_takes(
    api: Bridge, migrated: str
) -> None:
    """Three runs that ended at one instant (a sweep marks many lost in one statement),
    looks of two: the look after a full one goes on from that instant, and the next one
    past it, rather than read the same two at every pass."""
    from bridge.storage.health import HealthStore

    now = datetime.now(UTC)
    instant = now - timedelta(hours=1)
    for name in ("a", "b", "c"):
        record(migrated, add(api, name).id, instant, "FAILURE")
    store = HealthStore(database_for(migrated))
    cursors, counts = Cursors(ended_since=instant - timedelta(seconds=1)), []
    for _ in range(3):
        found, cursors = store.at_risk(now, 3600.0, 0.0, 2, cursors, timedelta(seconds=10))
        counts.append(len(found))
    assert counts == [2, 2, 0]
    assert cursors.ended_since is not None and cursors.ended_since > instant


@on_every_store
def test_a_schedule_cannot_be_left_naming_a_calendar_that_is_gone(
    api: Bridge, migrated: str
) -> None:
    """The transaction that writes a schedule's calendars holds them and refuses one gone
    since the API looked (a removal at the same moment), and a calendar's removal sees the
    schedules written before it: either way no schedule names a calendar that is not."""
    api.add_calendar("holidays", dates=["2026-12-25"])
    add(api, "closing", timer="0 9 * * *")
    edits = Edits(database_for(migrated))
    change = StoreChange("test", "edit")
    with (
        pytest.raises(ValidationError) as refused,
        edits.changing("closing", change, datetime.now(UTC)) as editing,
    ):
        editing.row.skip_calendars = "holidays,gone"
    assert (refused.value.field, refused.value.value) == ("skip_calendars", "gone")
    assert api.get("closing").skip_calendars == ()  # nothing written
    with edits.changing("closing", change, datetime.now(UTC)) as editing:
        editing.row.skip_calendars = "holidays"
    with pytest.raises(StateConflict, match="skipped by closing"):
        api.remove_calendar("holidays")
    assert [info.name for info in api.calendars()] == ["holidays"]
