"""The watchdog with real processes: each incident alerted once and recovered once.

Two beats and two workers on PostgreSQL, then MariaDB, and Redis, every beat running its
watchdog each second. The alert task is the reference app's, which posts
each alert as JSON to ``ALERT_WEBHOOK_URL``: here a small HTTP server of
the test's own, which keeps what it receives. Schedules go late (their runs
go to a queue no worker reads), overrun (a run sleeps past its max
runtime), fail and break; then both beats are killed, so that no beat
ticks. Each incident must reach the webhook exactly once when it opens and
once when it recovers, although two beats and two workers could each send
it.
"""

from __future__ import annotations

import email
import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import Env, free_port, rows, wait_for

pytestmark = pytest.mark.e2e

#: Settings of every process: a fast watchdog, workers that beat each second.
SETTINGS = {
    "BRIDGE_ALERT_TASK": "workers.app.alert",
    "BRIDGE_WATCHDOG_INTERVAL": "1",
    "BRIDGE_NO_BEAT_ALERT": "6",
    "BRIDGE_WORKER_TIMEOUT": "3",
}


class Webhook:
    """An HTTP server that keeps the JSON bodies posted to it."""

    def __init__(self, port: int | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port or free_port()), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, schedule: str | None, kind: str | None = None) -> list[str]:
        """The events alerted for ``schedule`` (and ``kind``) in the order the watchdog sent
        them: the workers may run two alert tasks sent a moment apart the other way round."""
        alerts = sorted(self.received, key=lambda alert: str(alert["sent_at"]))
        return [
            alert["event"]
            for alert in alerts
            if alert["schedule"] == schedule and (kind is None or alert["kind"] == kind)
        ]

    def wait(self, schedule: str | None, kind: str, events: list[str], timeout: float) -> None:
        wait_for(
            lambda: self.events(schedule, kind) == events,
            timeout,
            what=f"{events} of {kind} for {schedule}; all: {self.received}",
        )


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    try:
        yield hook
    finally:
        hook.server.shutdown()


def test_each_incident_is_alerted_once_and_recovers_once(
    server_env: Env, webhook: Webhook, tmp_path: Path
) -> None:
    extra = {**SETTINGS, "ALERT_WEBHOOK_URL": webhook.url}
    # The beats first: a worker that meets no beat within BRIDGE_NO_BEAT_ALERT of its
    # start opens no_beat, as it should, and a loaded machine can take that long to
    # start a beat after the workers.
    beats = [server_env.start("beat", **extra) for _ in range(2)]
    for beat in beats:
        beat.wait_log("bridge: beat instance", timeout=60)
    workers = [server_env.start("worker", "-c", "2", **extra) for _ in range(2)]
    for worker in workers:
        worker.wait_log("ready", timeout=60)
    cli = server_env.cli
    # Late: its runs go to a queue no worker reads, and start within no grace of 3 s.
    cli("add", "late-one", "--task", "workers.app.quick", "--timer", "every 2s",
        "--queue", "nobody-reads-this", "--grace", "3s", "--overlap", "allow")  # fmt: skip
    # Overrun: a run sleeps 20 s against a max runtime of 2 s, long enough to be seen
    # overrunning after the waits below, which a loaded machine can stretch past 8 s.
    cli("add", "overrun-one", "--task", "workers.app.slow", "--timer", "every 1h",
        "--kwargs", '{"seconds": 20}', "--max-runtime", "2s")  # fmt: skip
    cli("run", "overrun-one")
    # Terminated: the watchdog ends a run that overruns, as its schedule says.
    cli("add", "terminated-one", "--task", "workers.app.slow", "--timer", "every 1h",
        "--kwargs", '{"seconds": 60}', "--max-runtime", "2s",
        "--on-overrun", "terminate")  # fmt: skip
    ended = cli("run", "terminated-one").stdout.split()[-1]
    # Failing, with no breaker: a schedule the breaker stops within three seconds can be
    # broken before a pass of the watchdog on a loaded machine has seen it failing.
    cli("add", "failing-one", "--task", "workers.app.fail", "--timer", "every 1s",
        "--overlap", "allow")  # fmt: skip
    # Broken by the breaker after three failures.
    cli("add", "broken-one", "--task", "workers.app.fail", "--timer", "every 1s",
        "--max-failures", "3", "--overlap", "allow")  # fmt: skip
    # Pruned by the watchdog to its last 3 runs (the latest SUCCESS is always kept).
    cli("add", "pruned-one", "--task", "workers.app.quick", "--timer", "every 1s",
        "--keep-runs", "3", "--overlap", "allow")  # fmt: skip

    def terminated() -> dict[str, Any] | None:
        run = json.loads(cli("history", "terminated-one", "--json").stdout)[0]
        return run if run["id"] == ended and run["status"] == "REVOKED" else None

    revoked = wait_for(terminated, 60, what="the watchdog to terminate the run")
    assert revoked["error"] == "overran its max runtime of 2s; terminated by the watchdog"
    webhook.wait("late-one", "late", ["opened"], 60)
    webhook.wait("overrun-one", "overrun", ["opened"], 60)
    webhook.wait("failing-one", "failing", ["opened"], 60)
    webhook.wait("broken-one", "broken", ["opened"], 60)
    shown = json.loads(cli("ls", "--json").stdout)
    health = {schedule["name"]: schedule["health"] for schedule in shown}
    assert health["late-one"] == "late"
    assert health["failing-one"] == "failing"
    assert health["broken-one"] == "broken"

    # The troubles end: paused, the run over, fixed and resumed.
    cli("pause", "late-one", "--note", "seen")
    cli("edit", "failing-one", "--task", "workers.app.quick")
    cli("edit", "broken-one", "--task", "workers.app.quick")
    cli("resume", "broken-one")
    webhook.wait("late-one", "late", ["opened", "recovered"], 60)
    webhook.wait("overrun-one", "overrun", ["opened", "recovered"], 60)
    webhook.wait("failing-one", "failing", ["opened", "recovered"], 60)
    webhook.wait("broken-one", "broken", ["opened", "recovered"], 60)
    # The terminated run's overrun is told, though it ended at once.
    webhook.wait("terminated-one", "overrun", ["opened", "recovered"], 60)

    # A loaded machine may also make beat miss one of its occurrences: that is another
    # incident, of another kind.
    opened = next(
        a
        for a in webhook.received
        if a["schedule"] == "late-one" and a["kind"] == "late" and a["event"] == "opened"
    )
    assert opened["message"].startswith("Schedule 'late-one' is late: a run sent ")
    assert opened["runs"] and opened["text"] == opened["message"]

    def pruned() -> bool:
        history = json.loads(cli("history", "pruned-one", "--limit", "100", "--json").stdout)
        return (
            len(history) <= 4
            and json.loads(cli("show", "pruned-one", "--json").stdout)["total_run_count"] >= 8
        )

    wait_for(pruned, 60, what="the watchdog to prune pruned-one to its last runs")

    # No beat: both killed; the workers raise the alarm, the first beat back ends it.
    for beat in beats:
        beat.signal(signal.SIGKILL)
    webhook.wait(None, "no_beat", ["opened"], 60)
    server_env.start("beat", **extra)
    webhook.wait(None, "no_beat", ["opened", "recovered"], 60)

    # A few more passes of the watchdogs: nothing is sent twice.
    time.sleep(4)
    for schedule, kind in (
        ("late-one", "late"),
        ("overrun-one", "overrun"),
        ("failing-one", "failing"),
        ("broken-one", "broken"),
        (None, "no_beat"),
    ):
        assert webhook.events(schedule, kind) == ["opened", "recovered"], (schedule, kind)
    kinds = rows(server_env.database_url, "SELECT kind, alerts FROM incident ORDER BY id")
    assert all(alerts == 1 for _, alerts in kinds), kinds
    incidents = json.loads(cli("incidents", "--all", "--json").stdout)
    assert {i["kind"] for i in incidents} >= {"late", "overrun", "failing", "broken", "no_beat"}
    assert not [i for i in incidents if i["open"]]


def test_the_embedded_default_alerts_too(embedded_env: Env, webhook: Webhook) -> None:
    """SQLite and the filesystem broker: a failing schedule is an incident, alerted once."""
    extra = {**SETTINGS, "ALERT_WEBHOOK_URL": webhook.url}
    embedded_env.start("worker", **extra).wait_log("ready", timeout=60)
    embedded_env.start("beat", **extra)
    embedded_env.cli("add", "fails", "--task", "workers.app.fail", "--timer", "every 2s")
    webhook.wait("fails", "failing", ["opened"], 60)
    # A loaded machine may also make beat miss one of its occurrences: that is another
    # incident, of another kind.
    listed = json.loads(embedded_env.cli("incidents", "--json").stdout)
    failing = [i for i in listed if i["kind"] == "failing"]
    assert [(i["kind"], i["schedule_name"], i["alerts"]) for i in failing] == [
        ("failing", "fails", 1)
    ]
    embedded_env.cli("ack", str(failing[0]["id"]))
    embedded_env.cli("edit", "fails", "--task", "workers.app.quick")
    webhook.wait("fails", "failing", ["opened", "recovered"], 60)


def test_beat_refuses_an_alert_task_the_app_does_not_register(embedded_env: Env) -> None:
    beat = embedded_env.start("beat", BRIDGE_ALERT_TASK="workers.app.nope")
    assert beat.popen.wait(60) == 1
    assert (
        "Error: bridge_alert_task: got 'workers.app.nope', expected a task registered in the app"
        in beat.log
    )
    assert "Traceback" not in beat.log


def test_a_clean_stop_or_restart_of_beat_pages_nobody(pg_env: Env, webhook: Webhook) -> None:
    """The workers count the scheduler's silence from the last tick any beat made, which
    a beat's clean stop keeps: a worker up for longer than ``bridge_no_beat_alert``
    opens nothing while beats restart within it, and once none comes back, the
    incident's ``since`` is the last tick."""
    # Longer than a beat takes to start on a loaded machine; catch-up all, so that the
    # restarts miss no occurrence (a missed one is an incident of its own).
    extra = {**SETTINGS, "BRIDGE_NO_BEAT_ALERT": "15", "ALERT_WEBHOOK_URL": webhook.url}
    pg_env.start("worker", **extra).wait_log("ready", timeout=60)
    pg_env.cli("add", "ticking", "--task", "workers.app.quick", "--timer", "every 1s",
               "--catchup", "all", "--overlap", "allow")  # fmt: skip
    first = pg_env.start("beat", **extra)
    first.wait_log("fired", timeout=30)
    time.sleep(16)  # the worker has now been up for longer than the setting

    # A rolling restart of two beats, then a restart of the only one.
    second = pg_env.start("beat", **extra)
    # Ticking beside the first (which may win every claim of the one schedule).
    live = "SELECT count(*) FROM beat_instance WHERE stopped_at IS NULL"
    wait_for(lambda: rows(pg_env.database_url, live) == [(2,)], 30, what="two beats ticking")
    assert first.stop() == 0
    assert second.stop() == 0
    third = pg_env.start("beat", **extra)
    third.wait_log("fired", timeout=30)
    time.sleep(4)  # several heartbeats of the worker, each watching beat
    assert rows(pg_env.database_url, "SELECT kind, since, opened_at FROM incident") == []
    assert webhook.received == []

    # No beat comes back: the incident opens after the setting, since the last tick.
    assert third.stop() == 0
    [(last_tick,)] = rows(pg_env.database_url, "SELECT max(last_tick) FROM beat_instance")
    webhook.wait(None, "no_beat", ["opened"], 60)
    [(since, opened_at)] = rows(
        pg_env.database_url, "SELECT since, opened_at FROM incident WHERE kind = 'no_beat'"
    )
    assert since == last_tick
    assert (opened_at - since).total_seconds() >= 15
    status = json.loads(pg_env.cli("status", "--json").stdout)
    assert status["instances"] == []  # stopped beats are not listed as ticking


def test_a_flapping_schedule_pages_once_under_its_thresholds(
    pg_env: Env, webhook: Webhook, tmp_path: Path
) -> None:
    """The app's ``alert_after`` of 3 and the schedule's own ``recover_after`` of 2: a task
    that fails now and then opens nothing; its third failure in a row opens the failing
    incident (since that failure), a single success does not close it, two in a row do.
    One alert, one recovery."""
    extra = {**SETTINGS, "BRIDGE_DEFAULT_ALERT_AFTER": "3", "ALERT_WEBHOOK_URL": webhook.url}
    script = tmp_path / "outcomes"
    #                      3rd F in a row: opens; S, F, S: still failing; S S: recovers
    script.write_text("FSFSFFSFFFSFSS")
    refused = pg_env.cli("add", "flapping", "--task", "workers.app.scripted",
                         "--timer", "every 1s", "--alert-after", "0", check=False)  # fmt: skip
    assert refused.returncode != 0 and "alert_after: got '0'" in refused.stderr
    pg_env.cli("add", "flapping", "--task", "workers.app.scripted", "--timer", "every 1s",
               "--kwargs", json.dumps({"path": str(script)}), "--recover-after", "2")  # fmt: skip
    pg_env.start("worker", "-c", "1", **extra).wait_log("ready", timeout=60)
    pg_env.start("beat", **extra)
    webhook.wait("flapping", "failing", ["opened"], 90)
    shown = json.loads(pg_env.cli("show", "flapping", "--json").stdout)
    assert shown["health"] == "failing" and shown["recover_after"] == 2
    wait_for(lambda: script.read_text() == "", 90, what="the script to be played out")
    webhook.wait("flapping", "failing", ["opened", "recovered"], 60)
    time.sleep(3)  # more successes, more watchdog passes: nothing more is sent
    assert webhook.events("flapping", "failing") == ["opened", "recovered"]
    failures = rows(
        pg_env.database_url,
        "SELECT finished_at FROM task_execution WHERE status = 'FAILURE' ORDER BY finished_at",
    )
    [(since,)] = rows(pg_env.database_url, "SELECT since FROM incident WHERE kind = 'failing'")
    assert since == failures[6][0]  # the script's seventh failure: its third in a row
    history = json.loads(pg_env.cli("history", "flapping", "--limit", "100", "--json").stdout)
    played = "".join("F" if run["status"] == "FAILURE" else "S" for run in reversed(history))
    assert played.startswith("FSFSFFSFFFSFSS")
    shown = json.loads(pg_env.cli("show", "flapping", "--json").stdout)
    assert (shown["health"], shown["failing_since"], shown["success_streak"]) == ("ok", None, 0)


class Mailbox:
    """A local SMTP server that keeps the subject of each message it receives."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.subjects: list[str] = []
        subjects = self.subjects

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                message = email.message_from_bytes(envelope.content)
                subjects.append(str(message["Subject"]))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()


def titled(hook: Webhook, title: str) -> int:
    """How many of the JSON bodies Apprise posted to ``hook`` have ``title``."""
    return sum(1 for body in hook.received if body.get("title") == title)


def test_alert_urls_get_each_alert_once_and_one_refusing_gets_it_later(
    pg_env: Env, webhook: Webhook
) -> None:
    """Alerts through bridge_alert_urls alone (no alert task): a webhook, an SMTP server and
    a webhook that is down at first. The two that are up get the opened alert once; the
    incident says which URL refused it, and that one gets it once it is up, while beat
    fires on; then every URL gets the recovery once."""
    mailbox = Mailbox()
    down_port = free_port()
    urls = [
        f"json://127.0.0.1:{webhook.port}/hook",
        f"mailto://127.0.0.1:{mailbox.port}?from=bridge@example.com&to=oncall@example.com",
        f"json://127.0.0.1:{down_port}/hook",
    ]
    extra = {key: value for key, value in SETTINGS.items() if key != "BRIDGE_ALERT_TASK"}
    extra["BRIDGE_ALERT_URLS"] = ", ".join(urls)
    pg_env.start("worker", **extra).wait_log("ready", timeout=60)
    beat = pg_env.start("beat", **extra)
    cli = pg_env.cli
    cli("add", "fails", "--task", "workers.app.fail", "--timer", "every 1s", "--overlap", "allow")
    opened, recovered = "bridge: failing opened: fails", "bridge: failing recovered: fails"
    wait_for(lambda: titled(webhook, opened), 60, what="the opened alert at the webhook")
    wait_for(lambda: opened in mailbox.subjects, 30, what="the opened alert by e-mail")

    def refused() -> dict[str, Any] | None:
        listed = json.loads(cli("incidents", "--json").stdout)
        return next((i for i in listed if i["kind"] == "failing" and i["alert_error"]), None)

    incident = wait_for(refused, 30, what="the refusal on the incident")
    assert incident["alert_error"] == "URL 3 (json) refused the opened alert"
    assert incident["alert_attempts"] >= 1
    assert f":{down_port}/" not in beat.log and f":{mailbox.port}" not in beat.log

    def sent() -> int:
        return int(json.loads(cli("show", "fails", "--json").stdout)["total_run_count"])

    runs_while_refused = sent()

    late = Webhook(port=down_port)
    try:
        wait_for(lambda: titled(late, opened), 60, what="the opened alert once the URL is up")
        listed = json.loads(cli("incidents", "--json").stdout)
        failing = [i for i in listed if i["kind"] == "failing"]
        assert [(i["alert_error"], i["alert_attempts"]) for i in failing] == [(None, 0)]
        assert sent() > runs_while_refused  # beat fired on meanwhile
        cli("edit", "fails", "--task", "workers.app.quick")
        wait_for(lambda: titled(late, recovered), 60, what="the recovery at every URL")
        wait_for(lambda: recovered in mailbox.subjects, 30, what="the recovery by e-mail")
        wait_for(lambda: titled(webhook, recovered), 30, what="the recovery at the webhook")
        time.sleep(2)  # a few more passes of the watchdog: nothing is sent twice
        for hook in (webhook, late):
            assert (titled(hook, opened), titled(hook, recovered)) == (1, 1)
        assert (mailbox.subjects.count(opened), mailbox.subjects.count(recovered)) == (1, 1)
    finally:
        late.server.shutdown()
        mailbox.controller.stop()
