"""Beat's behaviour under the conditions a production scheduler meets: bad rows,
runs that never finish, SIGTERM, the embedded mode, and a database the worker cannot reach."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bridge.rules.fire import OLDEST_OPEN_READ
from tests.support import Env, execute, rows, wait_for

pytestmark = pytest.mark.e2e


def history(env: Env, name: str) -> list[dict[str, object]]:
    return list(json.loads(env.cli("history", name, "--limit", "1000", "--json").stdout))


def show(env: Env, name: str) -> dict[str, object]:
    return dict(json.loads(env.cli("show", name, "--json").stdout))


def test_bad_rows_are_disabled_with_a_note_and_the_rest_go_on(embedded_env: Env) -> None:
    env = embedded_env
    # No worker runs here: overlap allow lets the good schedule fire every second anyway.
    names = ("good", "bad-timer", "bad-zone", "bad-args", "bad-kwargs", "bad-overlap", "bad-option")
    for name in names:
        env.cli(
            "add", name, "--task", "workers.app.quick", "--timer", "every 1s", "--overlap", "allow"
        )
    # Values written straight into the table, past the API's validation.
    for name, column, value in [
        ("bad-timer", "timer", "every now and then"),
        ("bad-zone", "timezone", "Mars/Olympus"),
        ("bad-args", "args", "[1, 2"),
        ("bad-kwargs", "kwargs", "[1, 2]"),
        ("bad-overlap", "overlap", "sometimes"),
        ("bad-option", "options", '{"priority": "high"}'),
    ]:
        execute(
            env.database_url,
            f"UPDATE periodic_task SET {column} = :v WHERE name = :n",
            v=value,
            n=name,
        )
    beat = env.start("beat")
    wait_for(lambda: len(history(env, "good")) >= 3, 30, what="runs of the good schedule")

    notes = {
        "bad-timer": "timer",
        "bad-zone": "Mars/Olympus",
        "bad-args": "args",
        "bad-kwargs": "kwargs",
        "bad-overlap": "sometimes",
        "bad-option": "options.priority",
    }
    for name, needle in notes.items():
        schedule = show(env, name)
        assert schedule["enabled"] is False, name
        assert str(schedule["note"]).startswith("disabled by beat: bad row:"), schedule["note"]
        assert needle in str(schedule["note"]), (name, schedule["note"])
        assert history(env, name) == []
    # `ls` still lists every row, bad ones included.
    listing = env.cli("ls").stdout
    assert all(name in listing for name in notes)
    assert beat.popen.poll() is None
    assert "Traceback" not in beat.log


def test_stale_run_is_marked_lost_and_stops_blocking(embedded_env: Env) -> None:
    env = embedded_env
    env.cli("add", "blocked", "--task", "workers.app.quick", "--timer", "every 1s")
    schedule_id = show(env, "blocked")["id"]
    old = datetime.now(UTC) - timedelta(minutes=10)
    execute(
        env.database_url,
        "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger,"
        " status, updated_at, started_at) VALUES ('stuck-run', :sid, 'workers.app.quick', :old,"
        " 1, 'scheduled', 'STARTED', :old, :old)",
        sid=schedule_id,
        old=old.replace(tzinfo=None),
    )
    # No worker runs: the new run stays SENT, which is enough to see it was not blocked.
    beat = env.start("beat", BRIDGE_STALE_RUN_SECONDS="60")
    wait_for(
        lambda: any(r["id"] != "stuck-run" for r in history(env, "blocked")),
        30,
        what="a run after the stale one",
    )
    stuck = next(r for r in history(env, "blocked") if r["id"] == "stuck-run")
    assert stuck["status"] == "LOST"
    assert "presumed lost" in str(stuck["error"])
    assert "run stuck-run of 'blocked' marked LOST" in beat.log


def test_more_stale_runs_than_beat_reads_at_once_are_all_given_up(pg_env: Env) -> None:
    """Beat reads a row's oldest open runs, a few (``OLDEST_OPEN_READ``), to decide it;
    when that many are stale, more may be: all of them are given up on, and a fresh run
    behind them still makes overlap ``skip`` skip."""
    env = pg_env
    env.cli("add", "crowded", "--task", "workers.app.quick", "--timer", "every 1s")
    schedule_id = show(env, "crowded")["id"]
    old = datetime.now(UTC) - timedelta(minutes=10)
    stale = [f"stuck-{index:02}" for index in range(OLDEST_OPEN_READ + 5)]
    for index, run_id in enumerate(stale):
        at = old + timedelta(seconds=index)
        execute(
            env.database_url,
            "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt,"
            " trigger, status, updated_at, started_at) VALUES (:id, :sid, 'workers.app.quick',"
            " :t, 1, 'manual', 'STARTED', :t, :t)",
            id=run_id,
            sid=schedule_id,
            t=at,
        )
    # Planned before them (not a run of a fire of the row's to resume), it stays fresh for
    # the whole test.
    execute(
        env.database_url,
        "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger,"
        " status, updated_at) VALUES ('running', :sid, 'workers.app.quick', :plan, 1,"
        " 'manual', 'STARTED', :fresh)",
        sid=schedule_id,
        plan=old - timedelta(minutes=1),
        fresh=datetime.now(UTC) + timedelta(minutes=5),
    )
    beat = env.start("beat", BRIDGE_STALE_RUN_SECONDS="60")
    wait_for(lambda: show(env, "crowded")["skipped_count"] >= 2, 30, what="two skips")
    statuses = {r["id"]: r["status"] for r in history(env, "crowded")}
    assert statuses == {"running": "STARTED"} | dict.fromkeys(stale, "LOST")
    assert "previous run running is still STARTED" in beat.log


def test_replace_revokes_every_open_run_however_many(pg_env: Env) -> None:
    """Beat reads only a few of a row's open runs to decide it, but all of them under
    overlap ``replace``, which ends every one."""
    env = pg_env
    env.cli("add", "replaced", "--task", "workers.app.quick", "--timer", "every 1h",
            "--overlap", "replace")  # fmt: skip
    schedule_id = show(env, "replaced")["id"]
    running = [f"running-{index:02}" for index in range(OLDEST_OPEN_READ + 3)]
    for index, run_id in enumerate(running):
        execute(
            env.database_url,
            "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt,"
            " trigger, status, updated_at, started_at) VALUES (:id, :sid, 'workers.app.quick',"
            " :plan, 1, 'manual', 'STARTED', :at, :at)",
            id=run_id,
            sid=schedule_id,
            plan=datetime.now(UTC) - timedelta(hours=1, seconds=index),
            at=datetime.now(UTC) - timedelta(seconds=60 - index),
        )
    # Due now: its first occurrence, on the timer's grid, is its anchor.
    execute(
        env.database_url,
        "UPDATE periodic_task SET nextrun = anchor, next_occurrence = anchor WHERE id = :sid",
        sid=schedule_id,
    )
    env.start("beat")
    replacement = wait_for(
        lambda: next((r for r in history(env, "replaced") if r["id"] not in running), None),
        30,
        what="the replacing run",
    )
    ended = {r["id"]: (r["status"], r["error"]) for r in history(env, "replaced")}
    reason = f"replaced by run {replacement['id']}"
    assert all(ended[run_id] == ("REVOKED", reason) for run_id in running), ended


def test_overlap_skip_with_a_fresh_open_run_skips_and_counts(embedded_env: Env) -> None:
    env = embedded_env
    env.cli("add", "busy", "--task", "workers.app.quick", "--timer", "every 1s")
    schedule_id = show(env, "busy")["id"]
    now = datetime.now(UTC) + timedelta(minutes=5)  # stays fresh for the whole test
    execute(
        env.database_url,
        "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger,"
        " status, updated_at) VALUES ('running', :sid, 'workers.app.quick', :t, 1,"
        " 'manual', 'STARTED', :t)",
        sid=schedule_id,
        t=now.replace(tzinfo=None),
    )
    beat = env.start("beat")
    wait_for(lambda: show(env, "busy")["skipped_count"] >= 3, 30, what="three skips")
    assert [r["id"] for r in history(env, "busy")] == ["running"]
    assert "skipped 'busy'" in beat.log and "previous run running is still STARTED" in beat.log


def test_sigterm_finishes_the_fire_in_hand_clears_marks_and_exits(pg_env: Env) -> None:
    env = pg_env
    # Many rows due at once, inserted straight into the table, so that a tick has work in
    # hand: every second several full batches, each finished by beat's finishing process
    # while the next one is claimed and published.
    add_every_second(env, "s", 400)
    beat = env.start("beat")
    beat.wait_log("fired", timeout=30)
    (finishing,) = children(beat.popen.pid)
    time.sleep(2)
    beat.signal(signal.SIGTERM)
    assert beat.popen.wait(20) == 0
    wait_for(lambda: not alive(finishing), 5, what="the finishing process to exit with beat")
    held = rows(env.database_url, "SELECT name FROM periodic_task WHERE worker IS NOT NULL")
    assert held == []
    pending = rows(env.database_url, "SELECT id FROM task_execution WHERE status = 'PENDING'")
    assert pending == []
    # Every row sent was advanced past its last occurrence sent.
    behind = rows(
        env.database_url,
        "SELECT p.name FROM periodic_task p JOIN task_execution e ON e.periodic_task_id = p.id"
        " WHERE e.plan_time >= p.nextrun",
    )
    assert behind == []
    # The full batches were finished, and their runs logged, by the finishing process.
    assert "/bridge-finish] bridge: fired 's" in beat.log
    # The lazily built banner instance works too.
    assert "scheduler -> bridge.celery.scheduler.DatabaseScheduler" in beat.log
    assert "database -> postgresql+psycopg://" in beat.log


def add_every_second(env: Env, prefix: str, count: int) -> None:
    """``count`` schedules every second, all due now, written straight into the table (a
    burst each second: several full batches)."""
    now = datetime.now(UTC)
    engine = create_engine(env.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO periodic_task (name, task, args, kwargs, options, timer,"
                    " timezone, anchor, enabled, nextrun, overlap, source, broken, created_at,"
                    " updated_at, total_run_count, skipped_count, missed_count) VALUES (:name,"
                    " 'workers.app.quick', '[]', '{}', '{}', 'every 1s', 'UTC', :t, true, :t,"
                    " 'allow', 'api', false, :t, :t, 0, 0, 0)"
                ),
                [{"name": f"{prefix}{i:03d}", "t": now} for i in range(1, count + 1)],
            )
    finally:
        engine.dispose()


def children(pid: int) -> list[int]:
    """The processes ``pid`` started and that still run."""
    tasks = Path(f"/proc/{pid}/task").glob("*/children")
    return [int(child) for task in tasks for child in task.read_text().split()]


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="the finishing process is Linux's")
def test_the_finishing_process_dies_with_a_killed_beat_and_is_optional(server_env: Env) -> None:
    """Beat on PostgreSQL or MariaDB forks one finishing process as it starts, which dies at
    once when beat is SIGKILLed (it must not outlive beat holding a connection); with
    ``bridge_finishing_process`` false beat starts none and still fires."""
    env = server_env
    env.cli("add", "tick", "--task", "workers.app.quick", "--timer", "every 1s")
    beat = env.start("beat")
    beat.wait_log("fired", timeout=30)
    (finishing,) = children(beat.popen.pid)
    beat.popen.kill()
    beat.popen.wait(5)
    wait_for(lambda: not alive(finishing), 2, what="the finishing process to die with beat")

    alone = env.start("beat", BRIDGE_FINISHING_PROCESS="false")
    alone.wait_log("fired", timeout=30)
    assert children(alone.popen.pid) == []


@pytest.mark.skipif(sys.platform != "linux", reason="the finishing process is Linux's")
def test_a_finishing_process_killed_mid_burst_leaves_a_thread_and_no_run_lost(
    server_env: Env,
) -> None:
    """Kill the finishing process while full batches go out every second: its batch fails
    and is resumed, a thread finishes from then on, and every row sent is advanced."""
    env = server_env
    add_every_second(env, "k", 400)
    beat = env.start("beat")
    beat.wait_log("/bridge-finish] bridge: fired", timeout=30)
    (finishing,) = children(beat.popen.pid)
    os.kill(finishing, signal.SIGKILL)
    beat.wait_log("a thread finishes batches from now on", timeout=30)
    sent = len(rows(env.database_url, "SELECT id FROM task_execution"))
    wait_for(
        lambda: len(rows(env.database_url, "SELECT id FROM task_execution")) > sent + 800,
        30,
        what="two more seconds of the burst",
    )
    assert beat.popen.poll() is None
    beat.signal(signal.SIGTERM)
    assert beat.popen.wait(20) == 0
    assert rows(env.database_url, "SELECT name FROM periodic_task WHERE worker IS NOT NULL") == []
    assert rows(env.database_url, "SELECT id FROM task_execution WHERE status = 'PENDING'") == []
    doubled = rows(
        env.database_url,
        "SELECT periodic_task_id, plan_time FROM task_execution"
        " GROUP BY periodic_task_id, plan_time HAVING count(*) > 1",
    )
    assert doubled == []


#: A note the batch's advance writes back as it was: the whole batch goes to the server as
#: arrays (PostgreSQL) or one JSON text (MariaDB), quotes, escapes and astral characters too.
AWKWARD_NOTE = 'd\u00e9j\u00e0 \U0001f600 "quoted" \\ back\\slash\nnew line \t\' %s %(x)s'


def test_each_run_of_a_batch_keeps_its_own_expiry(server_env: Env) -> None:
    env = server_env
    # Rows due at one instant, fired in one tick in the order of their ids; their run ids
    # (the plan time, then a hash) sort otherwise. Their expiries lie far apart.
    now = datetime.now(UTC).replace(microsecond=0)
    expiries = {f"e{index:02}": (30 - index) * 600 for index in range(30)}
    for name, seconds in expiries.items():
        execute(
            env.database_url,
            "INSERT INTO periodic_task (name, task, args, kwargs, options, timer, timezone,"
            " anchor, enabled, nextrun, overlap, expires, source, broken, created_at,"
            " updated_at, total_run_count, skipped_count, missed_count, note) VALUES (:n,"
            " 'workers.app.quick', '[]', '{}', '{}', 'every 1h', 'UTC', :t, true, :t, 'allow',"
            " :e, 'api', false, :t, :t, 0, 0, 0, :note)",
            n=name,
            t=now,
            e=f"{seconds}s",
            note=AWKWARD_NOTE,
        )
    beat = env.start("beat")
    sent = wait_for(
        lambda: (
            found
            if len(
                found := rows(
                    env.database_url,
                    "SELECT p.name, e.queued_at, e.expires_at FROM task_execution e"
                    " JOIN periodic_task p ON p.id = e.periodic_task_id"
                    " WHERE e.status = 'SENT'",
                )
            )
            == len(expiries)
            else None
        ),
        30,
        what="every run sent",
    )
    for name, queued_at, expires_at in sent:
        # Reckoned as the message went, a moment before the run was marked sent.
        left = (expires_at - queued_at).total_seconds()
        assert expiries[name] - 5 < left <= expiries[name], (name, left)
    advanced = wait_for(
        lambda: (
            found
            if len(
                found := rows(
                    env.database_url,
                    "SELECT name, note, nextrun, total_run_count, worker FROM periodic_task"
                    " WHERE worker IS NULL AND total_run_count = 1",
                )
            )
            == len(expiries)
            else None
        ),
        30,
        what="every row advanced",
    )
    for name, note, nextrun, _, _ in advanced:
        assert note == AWKWARD_NOTE, name
        # Aware on PostgreSQL (in the session's zone), naive UTC on MariaDB.
        moved = nextrun.astimezone(UTC) if nextrun.tzinfo else nextrun.replace(tzinfo=UTC)
        assert moved == now + timedelta(hours=1)
    beat.signal(signal.SIGTERM)
    assert beat.popen.wait(20) == 0


@pytest.mark.parametrize(
    "options",
    [
        ["-B", "--scheduler", "bridge"],
        # The worker's -S is --statedb; the app's beat_scheduler names the bridge.
        ["-B", "-S", "bridge"],
    ],
)
def test_worker_with_embedded_beat(pg_env: Env, options: list[str]) -> None:
    env = pg_env
    env.cli("add", "embedded", "--task", "workers.app.quick", "--timer", "every 1s")
    worker = env.start("worker", *options)
    wait_for(
        lambda: sum(r["status"] == "SUCCESS" for r in history(env, "embedded")) >= 3,
        60,
        what="runs fired by the embedded beat",
    )
    assert "bridge: fired 'embedded'" in worker.log


def test_worker_with_embedded_beat_on_the_embedded_default(embedded_env: Env) -> None:
    """SQLite and the folder broker: the beat a worker forks opens the store afresh."""
    env = embedded_env
    env.cli("add", "embedded", "--task", "workers.app.quick", "--timer", "every 1s")
    worker = env.start("worker", "-B", "--scheduler", "bridge")
    wait_for(
        lambda: sum(r["status"] == "SUCCESS" for r in history(env, "embedded")) >= 3,
        60,
        what="runs fired by the embedded beat",
    )
    assert "bridge: fired 'embedded'" in worker.log
    assert "database unreachable" not in worker.log


def test_recorder_survives_an_unreachable_database(pg_env: Env) -> None:
    """A worker that cannot write records still runs the task, holds them, and logs why."""
    env = pg_env
    worker = env.start(
        "worker",
        BRIDGE_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/nowhere",
        BRIDGE_RECORDER_RETRIES="2",
    )
    worker.wait_log("ready", timeout=60)
    send = (
        "from workers.app import app;"
        "app.send_task('workers.app.quick', kwargs={'x': 1, 'y': 1}, task_id='hiccup-run',"
        " headers={'bridge_schedule_id': 1, 'bridge_schedule': 'x'})"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", send], env=env.environ(), cwd=env.workdir, check=True)
    worker.wait_log("Task workers.app.quick[hiccup-run] succeeded", timeout=60)
    # Records are written by a thread after the task ends: wait for the line.
    worker.wait_log("could not record STARTED of run hiccup-run", timeout=15)
    assert "holding run records until it is back" in worker.log
    assert worker.stop() == 0
    # Still unreachable at shutdown: the held STARTED and SUCCESS are given up, loudly.
    assert "2 run record(s) could not be written and are lost" in worker.log


def test_broker_outage_keeps_beat_up_and_the_occurrence_is_sent_later(pg_env: Env) -> None:
    env = pg_env
    # No worker: overlap allow lets later occurrences fire while earlier ones wait in the queue,
    # and messages that never expire keep their runs SENT (the default expiry, at the next
    # occurrence, has them ended REVOKED a few seconds later).
    env.cli(
        "add",
        "patient",
        "--task",
        "workers.app.quick",
        "--timer",
        "every 1s",
        "--overlap",
        "allow",
        "--expires",
        "never",
    )
    down = env.start("beat", CELERY_BROKER_URL="redis://127.0.0.1:1/0")
    down.wait_log("bridge: broker unreachable", timeout=60)
    time.sleep(3)
    assert down.popen.poll() is None, "beat must survive a broker outage"
    assert down.log.count("broker unreachable") == 1, "the outage is logged once"
    pending = history(env, "patient")
    assert [r["status"] for r in pending] == ["PENDING"], pending
    # SIGTERM is heard during the outage.
    down.signal(signal.SIGTERM)
    assert down.popen.wait(20) == 0

    up = env.start("beat")
    wait_for(lambda: len(history(env, "patient")) >= 3, 30, what="runs after the broker is back")
    runs = history(env, "patient")
    # The occurrence recorded during the outage was sent under its own id, once.
    resumed = next(r for r in runs if r["id"] == pending[0]["id"])
    assert resumed["status"] == "SENT"
    assert f"task id {pending[0]['id']}" in up.log
    assert len({r["plan_time"] for r in runs}) == len(runs)


def test_status_shows_live_instances_due_rows_and_lateness(embedded_env: Env) -> None:
    env = embedded_env
    env.cli("add", "late", "--task", "workers.app.quick", "--timer", "every 1h")
    overdue = datetime.now(UTC) - timedelta(minutes=5)
    execute(
        env.database_url,
        "UPDATE periodic_task SET nextrun = :t, next_occurrence = :t",
        t=overdue.replace(tzinfo=None),
    )
    execute(
        env.database_url,
        "INSERT INTO beat_instance (id, host, pid, started_at, last_tick, sent)"
        " VALUES ('gone:1:abc', 'gone', 1, :t, :t, 7)",
        t=(datetime.now(UTC) - timedelta(hours=1)).replace(tzinfo=None),
    )
    before = json.loads(env.cli("status", "--json").stdout)
    assert before["due_unclaimed"] == 1
    assert before["worst_lateness"] >= 300
    assert [i["id"] for i in before["instances"]] == ["gone:1:abc"]

    beat = env.start("beat")

    def live() -> list[dict[str, object]]:
        report = json.loads(env.cli("status", "--json").stdout)
        return [i for i in report["instances"] if i["pid"] == beat.popen.pid]

    wait_for(lambda: live() and live()[0]["sent"] >= 1, 30, what="beat's heartbeat")
    after = json.loads(env.cli("status", "--json").stdout)
    assert [i["pid"] for i in after["instances"]] == [beat.popen.pid]  # the stale one is gone
    assert after["due_unclaimed"] == 0 and after["worst_lateness"] is None
    assert "due and unclaimed: 0" in env.cli("status").stdout

    beat.stop()
    assert json.loads(env.cli("status", "--json").stdout)["instances"] == []
    assert "no beat instance is ticking" in env.cli("status").stdout
