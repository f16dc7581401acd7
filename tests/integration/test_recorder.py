"""Execution records written by a real worker: retries, revocation, routing, opt-in, bursts."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery

from bridge.celery.recorder import Recorder
from bridge.config import Settings
from bridge.storage.database import database_for
from tests.support import REDIS_URL, Env, rows, wait_for

pytestmark = pytest.mark.e2e


def history(env: Env, name: str) -> list[dict[str, object]]:
    return list(json.loads(env.cli("history", name, "--json").stdout))


def send(env: Env, code: str) -> None:
    script = f"from workers.app import app\n{code}"
    subprocess.run([sys.executable, "-c", script], env=env.environ(), cwd=env.workdir, check=True)


RUN_STATUS = "SELECT status FROM task_execution WHERE id = :i"


def test_retry_then_success_and_revoked(pg_env: Env) -> None:
    env = pg_env
    env.cli(
        "add",
        "flaky",
        "--task",
        "workers.app.flaky",
        "--timer",
        "@yearly",
        "--kwargs",
        '{"failures": 1}',
    )
    env.cli(
        "add",
        "long",
        "--task",
        "workers.app.slow",
        "--timer",
        "@yearly",
        "--kwargs",
        '{"seconds": 60}',
    )
    worker = env.start("worker")
    worker.wait_log("ready", timeout=60)

    run_id = env.cli("run", "flaky").stdout.split()[-1]
    wait_for(lambda: worker.log.count(f"[{run_id}] retry") >= 1, 30, what="a retry")
    # The worker writes what it logged within its gathering delay, not at once.
    wait_for(
        lambda: (
            [status for (status,) in rows(env.database_url, RUN_STATUS, i=run_id)]
            in (["RETRY"], ["RECEIVED"], ["STARTED"], ["SUCCESS"])
        ),
        10,
        what="the worker's record of the run",
    )
    wait_for(lambda: history(env, "flaky")[0]["status"] == "SUCCESS", 30, what="success")
    run = history(env, "flaky")[0]
    assert run["result"] == "succeeded after 1 retries"
    assert "Retry in 1s: RuntimeError('attempt 1 failed')" in str(run["error"])

    long_id = env.cli("run", "long").stdout.split()[-1]
    wait_for(lambda: history(env, "long")[0]["status"] == "STARTED", 30, what="a started run")
    send(env, f"app.control.revoke({long_id!r}, terminate=True)")
    wait_for(lambda: history(env, "long")[0]["status"] == "REVOKED", 30, what="revocation")
    assert history(env, "long")[0]["error"] == "terminated"
    assert env.cli("show", "long", "--json").stdout.count('"last_status": "REVOKED"') == 1


def test_queue_option_routes_the_message(pg_env: Env) -> None:
    env = pg_env
    env.cli(
        "add", "routed", "--task", "workers.app.quick", "--timer", "every 1s", "--queue", "reports"
    )
    env.start("beat")
    wait_for(lambda: history(env, "routed"), 30, what="a run of the routed schedule")
    client = redis.Redis.from_url(REDIS_URL)
    wait_for(lambda: client.llen("reports") >= 1, 10, what="a message in the reports queue")
    message = json.loads(client.lindex("reports", 0) or b"{}")
    headers = message["headers"]
    assert headers["task"] == "workers.app.quick"
    assert headers["bridge_schedule"] == "routed"
    assert headers["id"] == history(env, "routed")[-1]["id"]
    assert headers["bridge_plan_time"] == history(env, "routed")[-1]["plan_time"]


@pytest.mark.parametrize("record_all", [False, True])
def test_tasks_not_sent_by_the_bridge_are_recorded_only_on_opt_in(
    pg_env: Env, record_all: bool
) -> None:
    env = pg_env
    flag = {"BRIDGE_RECORD_ALL_TASKS": "true"} if record_all else {}
    worker = env.start("worker", **flag)
    worker.wait_log("ready", timeout=60)
    send(env, "app.send_task('workers.app.quick', task_id='plain-task')")
    worker.wait_log("Task workers.app.quick[plain-task] succeeded", timeout=30)
    found = wait_for(
        lambda: (
            rows(
                env.database_url,
                "SELECT status, trigger, worker, periodic_task_id FROM task_execution"
                " WHERE id = 'plain-task' AND status NOT IN ('RECEIVED', 'STARTED')",
            )
            or not record_all
        ),
        15,
        what="the opted-in record to end",
    )
    if record_all:
        assert found[0][:2] == ("SUCCESS", "external")
        assert found[0][3] is None
    else:
        assert rows(env.database_url, "SELECT id FROM task_execution") == []


def test_bridge_task_runs_a_run_delivered_three_times_once(broker_env: Env) -> None:
    """Guarantee 3: duplicate deliveries of one run (while it runs, after it ended) are dropped,
    on Redis and on RabbitMQ."""
    env = broker_env
    journal = env.workdir / "journal.txt"
    # Long enough for the duplicate, sent by a process of its own, to arrive while it runs
    # on a loaded machine.
    kwargs = {"path": str(journal), "seconds": 10}
    env.cli(
        "add",
        "once",
        "--task",
        "workers.app.once",
        "--timer",
        "@yearly",
        "--kwargs",
        json.dumps(kwargs),
    )
    worker = env.start("worker")
    worker.wait_log("ready", timeout=60)
    run_id = env.cli("run", "once").stdout.split()[-1]
    schedule_id = json.loads(env.cli("show", "once", "--json").stdout)["id"]
    again = (
        "from datetime import UTC, datetime\n"
        "from bridge.celery.broker import Publisher\n"
        "from bridge.rules.runs import Envelope, Payload\n"
        "from bridge.rules.kinds import Trigger\n"
        f"payload = Payload('workers.app.once', [], {kwargs!r}, {{}})\n"
        f"envelope = Envelope({run_id!r}, {schedule_id}, 'once', datetime.now(UTC),"
        " Trigger.MANUAL)\n"
        "Publisher(app).publish(payload, envelope, datetime.now(UTC))\n"
    )
    # The body's first line, read from the file rather than through a CLI call, which
    # could take longer than the run on a loaded machine.
    wait_for(lambda: journal.exists() and journal.read_text(), 30, what="the run to start")
    send(env, again)  # delivered while the first delivery runs
    wait_for(lambda: history(env, "once")[0]["status"] == "SUCCESS", 60, what="the run to end")
    send(env, again)  # delivered after it ended
    dropped = f"duplicate delivery of run {run_id} of workers.app.once dropped"
    wait_for(lambda: worker.log.count(dropped) == 2, 30, what="both duplicates dropped")

    assert journal.read_text() == "ran\n"
    [run] = history(env, "once")
    assert run["id"] == run_id
    assert run["status"] == "SUCCESS"
    assert run["result"] == "ran once"
    assert isinstance(run["runtime"], float) and run["runtime"] >= 10


def test_a_burst_of_runs_on_a_threads_worker_is_recorded_in_full(pg_env: Env) -> None:
    """Runs that end together are written together: every record and schedule still complete."""
    env = pg_env
    for name, task in (("burst-a", "quick"), ("burst-b", "quick"), ("burst-fail", "fail")):
        env.cli("add", name, "--task", f"workers.app.{task}", "--timer", "every 1s")
    worker = env.start("worker", "--pool", "threads", "-c", "8")
    worker.wait_log("ready", timeout=60)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    sent = 0
    for name, seconds in (("burst-a", 100), ("burst-b", 100), ("burst-fail", 20)):
        start = (end - timedelta(seconds=seconds)).isoformat()
        done = env.cli("backfill", name, "--from", start, "--to", end.isoformat()).stdout
        sent += int(done.split(": ", 1)[1].split()[0])  # "backfilled x: 99 runs sent, ..."
    last = env.cli("run", "burst-a").stdout.split()[-1]  # named the schedule's last run

    def records() -> list[Any]:
        return rows(
            env.database_url,
            "SELECT p.name, e.id, e.status, e.queued_at, e.started_at, e.finished_at,"
            " e.runtime, e.worker, e.result, e.error, e.traceback FROM task_execution e"
            " JOIN periodic_task p ON p.id = e.periodic_task_id",
        )

    def ended() -> bool:
        found = records()
        return len(found) == sent + 1 and all(r.status in ("SUCCESS", "FAILURE") for r in found)

    wait_for(ended, 90, what="every run of the burst to end")
    for run in records():
        assert run.queued_at and run.started_at <= run.finished_at, run
        assert run.runtime is not None and run.worker.startswith("worker-0@"), run
        if run.name == "burst-fail":
            assert run.status == "FAILURE", run
            assert run.error == "RuntimeError: this task always fails", run
            assert "RuntimeError" in run.traceback, run
        else:
            assert (run.status, run.result, run.error) == ("SUCCESS", "3", None), run
    shown = rows(
        env.database_url,
        "SELECT last_run_id, last_status FROM periodic_task WHERE name = 'burst-a'",
    )
    assert [tuple(r) for r in shown] == [(last, "SUCCESS")]
    assert "bridge: recording" not in worker.log
    assert "bridge: could not record" not in worker.log


def test_bridge_task_copies_delivered_together_run_once(pg_env: Env) -> None:
    """Copies of one run started at the same moment on one worker: one compare-and-set wins."""
    env = pg_env
    journal = env.workdir / "journal.txt"
    kwargs = {"path": str(journal), "seconds": 1}
    schedule = ["--task", "workers.app.once", "--timer", "@yearly", "--kwargs", json.dumps(kwargs)]
    env.cli("add", "together", *schedule)
    worker = env.start("worker", "--pool", "threads", "-c", "4")
    worker.wait_log("ready", timeout=60)
    send(
        env,
        "from bridge import Bridge\n"
        "from bridge.celery.broker import Publisher\n"
        "from bridge.rules.runs import Envelope, Payload\n"
        "from bridge.rules.kinds import Trigger\n"
        "bridge = Bridge(app)\n"
        "run, schedule = bridge.run('together'), bridge.get('together')\n"
        f"payload = Payload('workers.app.once', [], {kwargs!r}, {{}})\n"
        "envelope = Envelope(run.id, schedule.id, 'together', run.plan_time, Trigger.MANUAL)\n"
        "for _ in range(3):\n"
        "    Publisher(app).publish(payload, envelope, run.plan_time)\n",
    )
    [run] = history(env, "together")
    dropped = f"duplicate delivery of run {run['id']} of workers.app.once dropped"
    wait_for(lambda: worker.log.count(dropped) == 3, 30, what="three copies dropped")
    wait_for(lambda: history(env, "together")[0]["status"] == "SUCCESS", 30, what="the run")
    assert journal.read_text() == "ran\n"


def test_an_opted_in_task_is_recorded_when_its_end_is_written_before_its_receipt(
    pg_url: str,
) -> None:
    """A pool child's ``STARTED`` and ``SUCCESS`` can reach the database before the main
    process's ``RECEIVED`` creates the record; the record is then created by the first."""
    database_for(pg_url).migrate()
    app = Celery("plain", set_as_current=False)

    @app.task(name="plain.add", shared=False)
    def add() -> int:
        return 3

    recorder = Recorder(app, Settings(database_url=pg_url, record_all_tasks=True))
    # A plain message carries no headers of its own: Celery's request shows none.
    add.push_request(id="plain-run", hostname="worker-1", headers=None)
    try:
        recorder.on_prerun("plain-run", add)
        recorder.on_success(add, result=3)
    finally:
        add.pop_request()
    recorder.backlog.flush(10)
    found = rows(pg_url, "SELECT status, trigger, task, result FROM task_execution")
    assert found == [("SUCCESS", "external", "plain.add", "3")]
    receipt = SimpleNamespace(
        id="plain-run",
        task_name="plain.add",
        request_dict={"id": "plain-run", "task": "plain.add"},
        hostname="worker-1",
    )
    recorder.on_received(receipt)
    recorder.backlog.flush(10)
    assert rows(pg_url, "SELECT status FROM task_execution") == [("SUCCESS",)]
    recorder.store.database.dispose()
