"""A reference Celery app with example tasks: quick, slow, failing and flaky.

Configuration comes from the environment so that the same module serves the
embedded quick start and a PostgreSQL + Redis deployment:

* ``CELERY_BROKER_URL``: the broker; by default a folder on disk
  (``filesystem://``), which needs no server.
* ``BRIDGE_DATABASE_URL``: the schedule store (read by the bridge itself);
  by default ``sqlite:///bridge.db``.
* ``CELERY_RESULT_BACKEND``: where results are kept; none by default. A
  schedule that sends a chord needs one, and the chord's tasks results kept
  (``"ignore_result": false`` in their options).
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

from celery import Celery

import bridge.folder_broker
import bridge.recorder
from bridge.celery.task import BridgeTask

app = Celery("workers")
app.conf.update(
    timezone=os.environ.get("CELERY_TIMEZONE", "UTC"),
    task_ignore_result=True,
    result_backend=os.environ.get("CELERY_RESULT_BACKEND"),
    # Flower shows the runs the bridge sends: sent events from beat and the
    # CLI, task events from the workers.
    task_send_sent_event=True,
    worker_send_task_events=True,
    worker_hijack_root_logger=True,
    broker_connection_retry_on_startup=True,
    # The default scheduler of `celery beat` and of `celery worker -B`. The
    # worker has no -S for the scheduler (its -S is --statedb), so this is how
    # `worker -B -S bridge` ends up on the bridge too; `--scheduler bridge` is
    # the explicit form.
    beat_scheduler="bridge",
    beat_schedule={
        # Synced into periodic_task when beat starts, next to the schedules
        # added through the CLI.
        "config-heartbeat": {
            "task": "workers.app.quick",
            "schedule": 30.0,
            "kwargs": {"x": 0, "y": 0},
        },
    },
)


def use_broker(target: Celery, environ: Mapping[str, str]) -> None:
    """Point ``target`` at the broker ``environ`` names: ``CELERY_BROKER_URL``, or by default
    the folder ``BRIDGE_BROKER_DIR`` (``.broker``)."""
    url = environ.get("CELERY_BROKER_URL", "filesystem://")
    if url.startswith("filesystem://"):
        bridge.folder_broker.use(target, environ.get("BRIDGE_BROKER_DIR", ".broker"))
    else:
        target.conf.broker_url = url
        target.conf.broker_transport = None
        target.conf.broker_transport_options = {}


use_broker(app, os.environ)

# The one line that makes workers write execution records.
bridge.recorder.install(app)


@app.task
def quick(x: int = 1, y: int = 2) -> int:
    """Returns at once."""
    return x + y


@app.task
def slow(seconds: float = 20.0) -> str:
    """Takes a while: long enough for the next occurrence to find it still running."""
    time.sleep(seconds)
    return f"slept {seconds}s"


@app.task(bind=True, max_retries=3, default_retry_delay=1)
def flaky(self: Any, failures: int = 1) -> str:
    """Fails ``failures`` times, asking Celery to retry, then succeeds."""
    if self.request.retries < failures:
        raise self.retry(exc=RuntimeError(f"attempt {self.request.retries + 1} failed"))
    return f"succeeded after {failures} retries"


@app.task(base=BridgeTask)
def once(path: str, seconds: float = 0.0) -> str:
    """Appends a line to ``path``: its body runs once per run, however often it is delivered."""
    with open(path, "a") as journal:
        journal.write("ran\n")
    time.sleep(seconds)
    return "ran once"


@app.task(bind=True)
def delivery(self: Any) -> dict[str, Any]:
    """Returns how its message reached the worker: exchange, routing key and priority."""
    info = self.request.delivery_info or {}
    return {key: info.get(key) for key in ("exchange", "routing_key", "priority")}


@app.task
def scripted(path: str) -> str:
    """Succeeds or fails as the next letter of the file at ``path`` says (``S`` or ``F``),
    taking it off the file; succeeds once the letters run out. Sequential runs of one
    worker process play a history of outcomes out, one per run."""
    with open(path, encoding="utf-8") as script:
        letters = script.read().strip()
    with open(path, "w", encoding="utf-8") as script:
        script.write(letters[1:])
    if letters.startswith("F"):
        raise RuntimeError(f"scripted failure, {len(letters) - 1} letter(s) left")
    return f"scripted success, {max(len(letters) - 1, 0)} letter(s) left"


@app.task
def fail(message: str = "this task always fails") -> Any:
    """Raises, so that a run ends in FAILURE with its error and traceback recorded."""
    raise RuntimeError(message)


logger = logging.getLogger("workers.alerts")


@app.task(ignore_result=True)
def alert(payload: dict[str, Any]) -> str:
    """The bridge's alert task (``bridge_alert_task = "workers.app.alert"``): logs each
    alert and, when ``ALERT_WEBHOOK_URL`` is set, posts it there as JSON, with the sentence
    under ``text`` as Slack's and Mattermost's incoming webhooks expect."""
    logger.warning("bridge alert: %s", payload["message"])
    url = os.environ.get("ALERT_WEBHOOK_URL")
    if not url:
        return "logged"
    body = json.dumps({"text": payload["message"], **payload}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return f"posted: {response.status}"
