"""Flower sees the runs the bridge sends: beat → Redis → worker, watched by a real Flower.

The reference app turns on task events (``worker_send_task_events``) and sent
events (``task_send_sent_event``) so that the compose stack's Flower shows each
run under the same task id the bridge records; this test holds it to that.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support import CELERY, CeleryProcess, Env, wait_for

pytestmark = pytest.mark.e2e

TASK = "workers.app.quick"


def free_port() -> int:
    """A port nothing listens on now; Flower binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    """The decoded body of a GET, or None while Flower is not up or answers with an error."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def successful_runs(env: Env, name: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(env.cli("history", name, "--json").stdout)
    return [run for run in runs if run["status"] == "SUCCESS"]


def start_flower(env: Env, port: int) -> CeleryProcess:
    """Flower on the test broker, logged beside the worker and beat of ``env``.

    Flower 2.x refuses its HTTP API without authentication unless told otherwise.
    """
    command = [*CELERY, "flower", f"--port={port}", "--address=127.0.0.1"]
    flower = CeleryProcess(
        "flower", command, env.workdir, env.environ(FLOWER_UNAUTHENTICATED_API="true")
    )
    # Registered with the env so that a failing test's report carries its log too.
    env.processes.append(flower)
    return flower


def test_flower_shows_the_runs_beat_sends(pg_env: Env) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = pg_env.start("worker")
    flower = start_flower(pg_env, port)
    try:
        worker.wait_log("ready", timeout=60)
        # Flower only knows the events it receives, so it listens before beat sends.
        wait_for(lambda: get_json(f"{base}/api/tasks") is not None, 60, what="Flower's API")

        pg_env.cli("add", "flower-check", "--task", TASK, "--timer", "every 1s")
        pg_env.start("beat")
        wait_for(
            lambda: successful_runs(pg_env, "flower-check"),
            60,
            what="a successful run recorded by the bridge",
        )

        def seen_by_flower() -> dict[str, Any] | None:
            tasks = get_json(f"{base}/api/tasks") or {}
            for run in successful_runs(pg_env, "flower-check"):
                task = tasks.get(run["id"])
                if task and task.get("name") == TASK and task.get("state") == "SUCCESS":
                    return {"run": run, "task": task}
            return None

        found = wait_for(
            seen_by_flower,
            60,
            interval=0.5,
            what="a recorded run in Flower's /api/tasks as SUCCESS",
        )
        run_id = found["run"]["id"]
        assert found["task"]["uuid"] == run_id

        info = wait_for(
            lambda: get_json(f"{base}/api/task/info/{run_id}"),
            30,
            what=f"Flower's /api/task/info/{run_id}",
        )
        assert info["uuid"] == run_id, info
        assert info["name"] == TASK
        assert info["state"] == "SUCCESS"
        # The worker Flower saw run it is the one the bridge recorded.
        assert info["worker"] == found["run"]["worker"]
        assert info["result"] == found["run"]["result"] == "3"
    finally:
        flower.stop()
