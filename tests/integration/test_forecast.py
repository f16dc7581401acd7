"""``bridge next`` tells the truth: its forecast is what beat then does.

The property test drives beat's own steps on a real database (claim the
row, decide, apply the plan to the row as beat's advance does), with the
clock set to each wake-up, and holds the runs it sends against the forecast
made before the first of them. The end-to-end test checks the same against
a real beat process and the runs it records.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from bridge import Bridge, ValidationError
from bridge.clock import utcnow
from bridge.rules.decisions import Thresholds, decide
from bridge.rules.fire import state_of
from bridge.rules.runs import run_id_for
from bridge.service.fire import Advance, Firing
from bridge.storage.models import PeriodicTask
from tests.integration.test_policies import SEC, add, history, iso, now, ts
from tests.support import Env, wait_for

pytestmark = pytest.mark.xdist_group("test_forecast")

#: The beat instance the property test plays.
INSTANCE = "forecast-test:1:0"
LEASE = timedelta(seconds=30)
_names = itertools.count()


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bridge]:
    url = f"sqlite:///{tmp_path_factory.mktemp('forecast') / 'bridge.db'}"
    api = Bridge(database_url=url)
    api.migrate()
    yield api
    api.database.dispose()


def beat_sends(api: Bridge, name: str, start: datetime, count: int) -> list[tuple[object, ...]]:
    """The runs beat sends for ``name`` from ``start`` on, each run ending at once.

    Beat's steps as it takes them, on the database: each wake-up at the
    row's ``nextrun`` claims the row, decides with no open run, and advances
    the row as beat's advance phase does (:meth:`bridge.service.fire.Firing.advance`).
    """
    firing, clock, sent = Firing(api.database, Thresholds()), start, []
    store = firing.store
    while len(sent) < count:
        row = api.get(name)
        if not row.enabled or row.nextrun is None:
            break
        clock = max(clock, row.nextrun)
        rows = store.claim_due(INSTANCE, clock, LEASE, 1000).rows
        [claimed] = [r for r in rows if r.name == name]
        plan = decide(state_of(claimed), clock, [])
        run_ids = [run_id_for(claimed.id, s.plan_time, s.attempt) for s in plan.sends]
        sent += [(s.plan_time, clock, s.trigger, s.attempt) for s in plan.sends]
        assert claimed.marked is not None
        firing.advance([Advance(claimed, plan, run_ids)], INSTANCE, claimed.marked, clock)
    return sent[:count]


@settings(max_examples=80, deadline=None)
@given(
    timer=st.sampled_from(
        ["every 7s", "every 1h30m", "*/15 * * * *", "0 9 * * mon-fri", "30 2 * * *"]
    ),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
    jitter=st.sampled_from(["0s", "3s", "10m"]),
    start=st.none() | st.integers(min_value=0, max_value=48),
    end=st.none() | st.integers(min_value=1, max_value=400),
    remaining=st.none() | st.integers(min_value=1, max_value=5),
    catchup=st.sampled_from(["latest", "all", "none"]),
    overlap=st.sampled_from(["skip", "allow"]),
    downtime=st.sampled_from([0, 30, 3600, 5 * 86_400]),
)
def test_beat_sends_what_the_forecast_said(
    bridge: Bridge,
    timer: str,
    zone: str,
    jitter: str,
    start: int | None,
    end: int | None,
    remaining: int | None,
    catchup: str,
    overlap: str,
    downtime: int,
) -> None:
    """For any timer, zone, bounds, remaining runs, jitter, catch-up state and overlap."""
    name = f"s{next(_names)}"
    moment = utcnow()
    policies: dict[str, object] = {
        "jitter": jitter,
        "catchup": catchup,
        "overlap": overlap,
        "start": None if start is None else (moment + timedelta(hours=start)).isoformat(),
        "end": None if end is None else (moment + timedelta(hours=end)).isoformat(),
        "remaining": remaining,
    }
    try:
        bridge.add(name, task="t", timer=timer, timezone=zone, **policies)  # type: ignore[arg-type]
    except ValidationError:
        assume(False)  # the bounds leave no occurrence
    if downtime:
        # Beat was down, or the schedule paused and resumed from where it stopped.
        with bridge.database.session() as session:
            row = session.scalars(select(PeriodicTask).where(PeriodicTask.name == name)).one()
            assert row.next_occurrence is not None
            row.next_occurrence = row.nextrun = row.next_occurrence - timedelta(seconds=downtime)
    clock = utcnow()
    predicted = [
        (r.occurrence, r.fire_at, r.trigger, r.attempt)
        for r in bridge.forecast(name, 8, now=clock).runs
    ]
    assert beat_sends(bridge, name, clock, 8) == predicted


def test_a_paused_schedule_has_no_forecast_and_says_why(bridge: Bridge) -> None:
    bridge.add("paused-one", task="t", timer="every 10s")
    bridge.pause("paused-one", "holiday")
    outlook = bridge.forecast("paused-one", 5)
    assert (outlook.runs, outlook.end) == ([], "paused: holiday")
    assert bridge.next_runs("paused-one") == []


@pytest.mark.e2e
def test_a_real_beat_fires_when_next_said(pg_env: Env) -> None:
    """``bridge next --json`` before the first occurrence: each run recorded at its occurrence
    and time."""
    env = pg_env
    # Beat first, past its start: the runs must not wait for a process still starting.
    env.start("worker", "-c", "2")
    env.start("beat").wait_log("bridge: beat instance", 60)
    # The forecast must come before the first occurrence. On a loaded machine two commands
    # can take longer than the lead: then the lead is doubled, on a schedule of a new name
    # (the late one's runs, counted from its catch-up, would not be those forecast).
    for lead in (10, 20, 40, 80):
        name = f"told-{lead}"
        begin = now().replace(microsecond=0) + lead * SEC
        policies = ["--start", iso(begin), "--remaining", "4", "--jitter", "1s"]
        add(env, name, "quick", "every 2s", *policies)
        told = json.loads(env.cli("next", name, "--count", "10", "--json").stdout)
        if told["runs"] and ts(told["runs"][0]["fire_at"]) > now():
            break
    else:
        pytest.fail("the machine never answered two commands within 80 seconds")
    assert told["end"] == "finished: no runs remaining"
    assert len(told["runs"]) == 4
    wait_for(lambda: len(history(env, name)) == 4, 60 + lead, what="four runs")
    wait_for(
        lambda: json.loads(env.cli("show", name, "--json").stdout)["enabled"] is False,
        30,
        what="the schedule to finish",
    )
    runs = history(env, name)
    for run, said in zip(runs, told["runs"], strict=True):
        assert run["plan_time"] == ts(said["occurrence"])
        assert run["plan_time"] >= begin
        fire_at = ts(said["fire_at"])
        assert fire_at is not None and run["plan_time"] <= fire_at <= ts(said["latest"])
        # Sent when told: not before, and soon after (the latency itself is the benches'
        # to measure; here two seconds leave room for a loaded machine).
        assert fire_at <= run["queued_at"] <= fire_at + 2 * SEC, (run, said)
    assert env.cli("next", name).stdout.strip() == "finished: no runs remaining"


def test_a_preview_gives_the_next_occurrences_of_a_timer_not_saved(bridge: Bridge) -> None:
    """What the dashboard's form shows while a timer is typed: nothing is written."""
    schedules = len(bridge.list())
    at = datetime.fromisoformat("2026-03-28T12:00:00+00:00")
    tokyo = bridge.preview("0 9 * * *", "Asia/Tokyo", 3, now=at)
    assert tokyo.timezone == "Asia/Tokyo"
    assert [moment.isoformat() for moment in tokyo.runs] == [
        "2026-03-29T00:00:00+00:00",
        "2026-03-30T00:00:00+00:00",
        "2026-03-31T00:00:00+00:00",
    ]
    # An interval counts from now; a fixed delay's later runs wait for each run's end.
    assert bridge.preview("every 2h", "UTC", 2, now=at).runs == [
        at + timedelta(hours=2),
        at + timedelta(hours=4),
    ]
    assert len(bridge.preview("every 1h after completion", "UTC", 5, now=at).runs) == 1
    assert bridge.preview("at 2026-01-01T00:00:00+00:00", "UTC", 5, now=at).runs == []
    # No zone: the app's (UTC without an app), said with the runs.
    assert bridge.preview("@daily", None, 1, now=at).timezone == "UTC"
    with pytest.raises(ValidationError) as refused:
        bridge.preview("0 9 * * *", "Mars/Base")
    assert refused.value.field == "timezone"
    with pytest.raises(ValidationError) as refused:
        bridge.preview("0 9 * * *", "UTC", 0)
    assert refused.value.field == "count"
    assert len(bridge.list()) == schedules
