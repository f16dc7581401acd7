"""The whole path with real processes.

CLI → periodic_task → beat → broker → worker → task_execution.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from tests.support import Env, rows, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["pg_env", "mariadb_env", "embedded_env"])
def env(request: pytest.FixtureRequest) -> Env:
    """PostgreSQL + Redis, MariaDB + Redis, and the embedded default (SQLite + filesystem
    broker)."""
    return request.getfixturevalue(request.param)


def runs(env: Env, name: str) -> list[dict[str, object]]:
    result = env.cli("history", name, "--limit", "1000", "--json")
    return list(reversed(json.loads(result.stdout)))


def show(env: Env, name: str) -> dict[str, object]:
    return json.loads(env.cli("show", name, "--json").stdout)


def ts(value: object) -> datetime:
    assert isinstance(value, str)
    return datetime.fromisoformat(value)


def test_schedules_fire_and_runs_are_recorded(env: Env) -> None:
    env.cli(
        "add",
        "quick",
        "--task",
        "workers.app.quick",
        "--timer",
        "every 2s",
        "--kwargs",
        '{"x": 20, "y": 22}',
        # Every occurrence runs, even if a loaded machine is slow to finish the last one.
        "--overlap",
        "allow",
    )
    env.cli(
        "add",
        "slow",
        "--task",
        "workers.app.slow",
        "--timer",
        "every 2s",
        "--kwargs",
        '{"seconds": 5}',
    )
    env.cli(
        "add", "failing", "--task", "workers.app.fail", "--timer", "every 3s", "--overlap", "allow"
    )
    worker = env.start("worker")
    worker.wait_log("ready", timeout=60)
    beat = env.start("beat")

    wait_for(
        lambda: sum(r["status"] == "SUCCESS" for r in runs(env, "slow")) >= 2,
        60,
        what="two finished slow runs",
    )
    beat.stop()
    # Let the worker finish what beat sent, then stop it.
    wait_for(
        lambda: all(
            r["status"] in {"SUCCESS", "FAILURE"}
            for n in ("quick", "slow", "failing")
            for r in runs(env, n)
        ),
        30,
        what="every run final",
    )
    worker.stop()

    quick = show(env, "quick")
    anchor, step = ts(quick["anchor"]), timedelta(seconds=2)
    quick_runs = runs(env, "quick")
    assert len(quick_runs) >= 3
    plan_times = [ts(r["plan_time"]) for r in quick_runs]
    # Every plan time sits on the schedule's grid, once; after the first they are consecutive.
    for plan in plan_times:
        assert (plan - anchor) % step == timedelta(0)
    assert plan_times == sorted(set(plan_times))
    assert all(b - a == step for a, b in pairwise(plan_times[1:]))
    for run in quick_runs:
        assert run["status"] == "SUCCESS"
        assert run["result"] == "42"
        assert run["trigger"] in {"scheduled", "catchup"}
        assert str(run["worker"]).startswith("worker-0@")
        assert ts(run["started_at"]) <= ts(run["finished_at"])
        assert isinstance(run["runtime"], float)
    assert quick["total_run_count"] == len(quick_runs)
    assert quick["skipped_count"] == 0
    assert quick["last_status"] == "SUCCESS"
    assert quick["last_run_id"] == quick_runs[-1]["id"]

    # The slow task outlives its interval: occurrences are skipped, never run side by side.
    slow = show(env, "slow")
    slow_runs = runs(env, "slow")
    assert slow["skipped_count"] >= 2
    spans = sorted((ts(r["started_at"]), ts(r["finished_at"])) for r in slow_runs)
    assert all(prev_end <= start for (_, prev_end), (start, _) in pairwise(spans))
    assert "skipped 'slow'" in beat.log and "is still STARTED" in beat.log

    failing_runs = runs(env, "failing")
    assert failing_runs
    for run in failing_runs:
        assert run["status"] == "FAILURE"
        assert run["error"] == "RuntimeError: this task always fails"
        assert "Traceback" in str(run["traceback"])
    # Beat logs each fire with its schedule, plan time and task id.
    first = failing_runs[0]
    assert f"fired 'failing' plan {first['plan_time']} task id {first['id']}" in beat.log

    # Exactly one record per (schedule, plan time): the database says so too.
    duplicates = rows(
        env.database_url,
        "SELECT periodic_task_id, plan_time, count(*) FROM task_execution "
        "GROUP BY periodic_task_id, plan_time HAVING count(*) > 1",
    )
    assert duplicates == []


def test_manual_run_and_changes_while_beat_runs(env: Env) -> None:
    env.cli("add", "later", "--task", "workers.app.quick", "--timer", "0 0 1 1 *")
    worker = env.start("worker")
    worker.wait_log("ready", timeout=60)
    beat = env.start("beat")
    beat.wait_log("beat: Starting", timeout=60)

    sent = env.cli("run", "later").stdout
    task_id = sent.strip().rsplit(" ", 1)[-1]
    wait_for(
        lambda: runs(env, "later") and runs(env, "later")[-1]["status"] == "SUCCESS",
        30,
        what="the manual run to succeed",
    )
    manual = runs(env, "later")[-1]
    assert manual["id"] == task_id
    assert manual["trigger"] == "manual"

    # Added while beat runs: fires without a restart.
    env.cli("add", "added-live", "--task", "workers.app.quick", "--timer", "every 1s")
    wait_for(lambda: len(runs(env, "added-live")) >= 2, 20, what="runs of a schedule added live")

    # Paused: no new runs.
    env.cli("pause", "added-live", "--note", "maintenance")
    time.sleep(1.5)  # a run already sent may still be recorded
    count = len(runs(env, "added-live"))
    time.sleep(3)
    assert len(runs(env, "added-live")) == count
    listing = env.cli("ls").stdout
    assert "maintenance" in listing and "paused" in listing

    # Resumed: runs again.
    env.cli("resume", "added-live")
    wait_for(lambda: len(runs(env, "added-live")) >= count + 2, 20, what="runs after resume")

    # Edited: the new timer takes over.
    env.cli("edit", "added-live", "--timer", "0 0 1 1 *")
    time.sleep(1.5)
    count = len(runs(env, "added-live"))
    time.sleep(3)
    assert len(runs(env, "added-live")) == count

    # Deleted: its runs go with it.
    env.cli("add", "doomed", "--task", "workers.app.quick", "--timer", "every 1s")
    wait_for(lambda: runs(env, "doomed"), 20, what="a run of 'doomed'")
    env.cli("rm", "doomed")
    assert env.cli("show", "doomed", check=False).returncode != 0
    assert (
        rows(
            env.database_url,
            "SELECT count(*) FROM task_execution t LEFT JOIN periodic_task p "
            "ON p.id = t.periodic_task_id WHERE p.id IS NULL AND t.trigger <> 'external'",
        )[0][0]
        == 0
    )
    time.sleep(2)
    assert beat.popen.poll() is None, "beat must keep running"
