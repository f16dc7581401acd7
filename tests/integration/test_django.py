"""``bridge.contrib.django`` in a Django project served by Django's own server, its admin
driven over HTTP as a browser's forms drive it, on PostgreSQL and MariaDB: every change
made there goes through the Bridge (checks, audit actor ``django:USERNAME``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from bridge import Bridge
from bridge.rules.policy import POLICY_NAMES
from bridge.storage.database import database_for
from tests.support import (
    REPO,
    free_port,
    mysql_database,
    postgres_database,
    redis_broker,
    rows,
    wait_for,
)

pytestmark = pytest.mark.e2e

ENGINES = {"postgresql": "django.db.backends.postgresql", "mysql": "django.db.backends.mysql"}
PASSWORD = "correct horse battery staple"


class Site:
    """The project's server and a signed-in admin's client."""

    def __init__(
        self,
        url: str,
        database_url: str,
        client: httpx.Client,
        environ: dict[str, str],
        workdir: Path,
    ) -> None:
        self.url = url
        self.database_url = database_url
        self.client = client
        self.environ = environ
        self.workdir = workdir

    def celery(self, *args: str) -> subprocess.Popen[bytes]:
        """``celery -A tests.django_site ARGS``: the project's own Celery app."""
        log = (self.workdir / f"{args[0]}.log").open("w")
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.django_site", *args],
            env=self.environ,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def csrf(self, path: str) -> str:
        page = self.client.get(path)
        assert page.status_code == 200, page.text[-2000:]
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert found, page.text[-2000:]
        return found.group(1)

    def post(self, path: str, data: dict[str, str | list[str]]) -> httpx.Response:
        token = self.csrf(path)
        return self.client.post(path, data={**data, "csrfmiddlewaretoken": token})

    def bridge(self) -> Bridge:
        return Bridge(database_url=self.database_url)


@pytest.fixture(params=["postgres", "mariadb"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    fresh = postgres_database if request.param == "postgres" else mysql_database
    with fresh() as database_url:
        url = make_url(database_url)
        environ = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "DJANGO_SETTINGS_MODULE": "tests.django_site.settings",
            "SITE_DB_ENGINE": ENGINES[url.get_backend_name()],
            "SITE_DB_NAME": str(url.database),
            "SITE_DB_USER": url.username or "",
            "SITE_DB_PASSWORD": url.password or "",
            "SITE_DB_HOST": url.host or "",
            "SITE_DB_PORT": str(url.port or ""),
            "SITE_BROKER_URL": redis_broker(),
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
        }
        database_for(database_url).migrate()  # the bridge's tables, as `bridge migrate` makes them
        django = [sys.executable, "-m", "django"]

        def run(*args: str) -> None:
            done = subprocess.run(
                [*django, *args], env=environ, cwd=tmp_path, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout + done.stderr

        run("migrate", "--noinput")
        run("createsuperuser", "--noinput", "--username", "admin", "--email", "a@example.com")
        port = free_port()
        log = (tmp_path / "server.log").open("w")
        server = subprocess.Popen(
            [*django, "runserver", f"127.0.0.1:{port}", "--noreload"],
            env=environ,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=30) as client:

                def up() -> bool:
                    try:
                        return client.get("/admin/login/").status_code == 200
                    except httpx.TransportError:
                        return False

                wait_for(up, 60, what="Django's server")
                site = Site(base, database_url, client, environ, tmp_path)
                signed_in = site.post(
                    "/admin/login/?next=/admin/",
                    {"username": "admin", "password": PASSWORD, "next": "/admin/"},
                )
                assert signed_in.status_code == 302, signed_in.text[-2000:]
                yield site
        finally:
            server.terminate()
            server.wait(20)
            log.close()
            database_for(database_url).dispose()


ADD = "/admin/bridge/schedule/add/"
LIST = "/admin/bridge/schedule/"


#: The policy fields as the add form shows them: the choices at their defaults, the rest empty.
POLICIES = {
    **dict.fromkeys(POLICY_NAMES, ""),
    "overlap": "skip",
    "catchup": "latest",
    "on_overrun": "none",
}


def form(**fields: str) -> dict[str, str | list[str]]:
    """What a browser submits: every field of the form, these ones as given."""
    return {
        "name": "nightly",
        "task": "django_site.ping",
        "timer": "every 1h",
        "timezone": "UTC",
        "args": "[]",
        "kwargs": "{}",
        "labels": "",
        "queue": "",
        **POLICIES,
        **fields,
    }


def test_the_admin_changes_schedules_through_the_bridge(site: Site) -> None:
    bridge = site.bridge()

    # Added: the Bridge's checks, its next run, its audit entry naming the Django user.
    added = site.post(ADD, form(labels="reports, nightly", kwargs='{"x": 1}'))
    assert added.status_code == 302, added.text[-3000:]
    schedule = bridge.get("nightly")
    assert (schedule.task, schedule.timer, schedule.labels) == (
        "django_site.ping",
        "every 1h",
        ("nightly", "reports"),
    )
    assert schedule.nextrun is not None
    [entry] = bridge.audit().items
    assert (entry.actor, entry.action) == ("django:admin", "create")

    # Refused: the field the Bridge names carries its words; nothing is written.
    refused = site.post(ADD, form(name="broken-one", timer="every banana"))
    assert refused.status_code == 200
    assert "timer: got &#x27;every banana&#x27;, expected" in refused.text, refused.text[-3000:]
    unknown = site.post(ADD, form(name="unknown-one", task="nowhere.nothing"))
    assert "task: got &#x27;nowhere.nothing&#x27;" in unknown.text, unknown.text[-3000:]
    assert [s.name for s in bridge.list()] == ["nightly"]

    # Edited: a new timer moves the next run. The page shows the next runs.
    edit = f"/admin/bridge/schedule/{schedule.id}/change/"
    page = site.client.get(edit).text
    upcoming = bridge.forecast("nightly", 5).runs
    assert f"{upcoming[0].fire_at:%Y-%m-%d %H:%M:%S} UTC; " in page, page[-3000:]
    changed = site.post(edit, form(timer="every 2h", labels="reports"))
    assert changed.status_code == 302, changed.text[-3000:]
    edited = bridge.get("nightly")
    assert (edited.timer, edited.labels) == ("every 2h", ("reports",))

    # The policies: chosen or typed as the CLI takes them, shown again on the page, refused
    # beside the field, and set back to their default when emptied.
    policies = {
        "overlap": "allow",
        "catchup": "all",
        "catchup_window": "2h",
        "max_attempts": "3",
        "backoff": "30s,2m",
        "expires": "10m",
        "grace": "5m",
        "on_overrun": "revoke",
        "max_runtime": "1h",
    }
    assert site.post(edit, form(timer="every 2h", labels="reports", **policies)).status_code == 302
    tuned = bridge.get("nightly")
    assert (tuned.overlap, tuned.catchup, tuned.catchup_window) == ("allow", "all", 7200.0)
    assert (tuned.max_attempts, tuned.backoff, tuned.expires) == (3, "30s,2m", "10m")
    assert (tuned.grace, tuned.on_overrun, tuned.max_runtime) == (300.0, "revoke", 3600.0)
    page = site.client.get(edit).text
    assert re.search(r'name="backoff"[^>]*value="30s,2m"', page), page[-3000:]
    assert re.search(r'<option value="allow" selected>', page), page[-3000:]
    banana = {**policies, "jitter": "banana"}
    refused = site.post(edit, form(timer="every 2h", labels="reports", **banana))
    assert refused.status_code == 200
    assert "jitter: got &#x27;banana&#x27;, expected" in refused.text, refused.text[-3000:]
    assert bridge.get("nightly").jitter == 0
    emptied = {**policies, "catchup_window": "", "backoff": "", "max_attempts": ""}
    assert site.post(edit, form(timer="every 2h", labels="reports", **emptied)).status_code == 302
    cleared = bridge.get("nightly")
    assert (cleared.catchup_window, cleared.backoff, cleared.max_attempts) == (None, None, 1)
    assert cleared.overlap == "allow"

    # Listed, searched and filtered, with the health the Bridge judges.
    listed = site.client.get(LIST, params={"q": "night"})
    assert "nightly" in listed.text and ">new<" in listed.text, listed.text[-3000:]
    assert "nightly" in site.client.get(LIST, params={"label": "reports"}).text
    assert "nightly" not in site.client.get(LIST, params={"label": "other"}).text

    # The actions: pause, the health filter, run now, resume.
    def act(action: str) -> httpx.Response:
        done = site.post(
            LIST, {"action": action, "_selected_action": [str(schedule.id)], "index": "0"}
        )
        assert done.status_code == 302, done.text[-3000:]
        return site.client.get(LIST)

    act("pause")
    assert bridge.get("nightly").enabled is False
    assert "nightly" in site.client.get(LIST, params={"health": "paused"}).text
    assert "nightly" not in site.client.get(LIST, params={"health": "failing"}).text
    act("resume")
    assert bridge.get("nightly").enabled is True
    sent = act("run_now")
    [run] = bridge.history("nightly")
    assert (run.trigger, run.status) == ("manual", "SENT")
    assert run.id in sent.text  # the message names the run sent
    assert run.id in site.client.get("/admin/bridge/run/").text

    actions = [(e.actor, e.action) for e in reversed(bridge.audit().items)]
    assert actions[:6] == [
        ("django:admin", "create"),
        ("django:admin", "edit"),
        ("django:admin", "edit"),
        ("django:admin", "edit"),
        ("django:admin", "pause"),
        ("django:admin", "resume"),
    ]
    assert "django:admin" in site.client.get("/admin/bridge/auditentry/").text
    assert site.client.get("/admin/bridge/incident/").status_code == 200

    # The project's own Celery app finds the store in the Django settings: its CLI lists
    # what the admin added, its beat fires it and its worker records the run.
    listed_json = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.django_site", "bridge", "ls", "--json"],
        env=site.environ,
        cwd=site.workdir,
        capture_output=True,
        text=True,
    )
    assert [s["name"] for s in json.loads(listed_json.stdout)] == ["nightly"], listed_json
    assert site.post(ADD, form(name="every-second", timer="every 1s")).status_code == 302
    processes = [site.celery("worker", "-c", "1"), site.celery("beat", "-S", "bridge")]
    try:
        wait_for(
            lambda: any(r.status == "SUCCESS" for r in bridge.history("every-second")),
            90,
            what="a run of every-second recorded by the project's worker",
        )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    site.post(
        LIST,
        {
            "action": "delete_selected",
            "_selected_action": [str(bridge.get("every-second").id)],
            "post": "yes",
        },
    )

    # Removed through the Bridge: its runs go with it, the audit log keeps the removal.
    schedule_id = str(schedule.id)
    deleted = site.post(f"/admin/bridge/schedule/{schedule_id}/delete/", {"post": "yes"})
    assert deleted.status_code == 302, deleted.text[-3000:]
    assert bridge.list() == []
    assert rows(site.database_url, "SELECT count(*) FROM task_execution") == [(0,)]
    assert bridge.audit().items[0].action == "delete"
