"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against a real
``bridge serve`` with a real beat and worker on PostgreSQL and Redis.

The pages are checked as a person would use them: signing in, reading the
list in two time zones, watching a schedule fire and another break,
pausing, resuming, running and cancelling from the page, a refused cron
shown beside its field, and a read-only session that offers no action.
Screenshots of the main pages are taken on the way; with
``BRIDGE_UPDATE_SCREENSHOTS=1`` they replace those under ``docs/screenshots``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import (
    REPO,
    Env,
    free_port,
    postgres_database,
    redis_broker,
    unavailable,
    wait_for,
)

pytestmark = pytest.mark.e2e

ADMIN = "dashboard-admin-token-0123456789"
READ = "dashboard-read-token-0123456789"
CHROMIUM = os.environ.get("BRIDGE_TEST_CHROMIUM", "/usr/bin/chromium")
#: What the probe that checked this machine used: no sandbox as root, no network chatter.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "docs" / "screenshots"


class Site:
    """The module's server, beat and worker, and the browser that visits them."""

    def __init__(self, env: Env, url: str, browser: Any, shots: Path) -> None:
        self.env = env
        self.url = url
        self.browser = browser
        self.shots = shots
        self.api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        )

    def page(self, token: str = ADMIN, zone: str = "Europe/Berlin", width: int = 1280) -> Any:
        """A signed-in page in a browser of its own, in time zone ``zone``."""
        context = self.browser.new_context(
            timezone_id=zone, locale="en-US", viewport={"width": width, "height": 900}
        )
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(self.url + "/")
        page.get_by_label("API token (admin or read-only)").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(self.url + "/")
        return page

    def add(self, name: str, **fields: Any) -> None:
        body = {"name": name, "task": "workers.app.quick", "timer": "every 1h", **fields}
        response = self.api.post("/api/v1/schedules", json=body)
        assert response.status_code == 201, response.text

    def runs(self, name: str) -> list[dict[str, Any]]:
        return list(self.api.get(f"/api/v1/schedules/{name}/runs").json()["items"])

    def shoot(self, page: Any, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if not Path(CHROMIUM).exists():
        unavailable("Chromium", f"no browser at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    workdir = tmp_path_factory.mktemp("dashboard")
    shots = tmp_path_factory.mktemp("screenshots")
    with postgres_database() as database_url, sync_playwright() as playwright:
        env = Env(workdir, database_url, redis_broker())
        env.cli("migrate")
        port = free_port()
        settings = {
            "BRIDGE_API_ADMIN_TOKEN": ADMIN,
            "BRIDGE_API_READ_TOKEN": READ,
            "BRIDGE_FLOWER_URL": "http://flower.example:5555",
        }
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            env.serve(port, **settings)
            env.start("worker", "-P", "prefork", **settings)
            env.start("beat", **settings)
            yield Site(env, f"http://127.0.0.1:{port}", browser, shots)
        finally:
            browser.close()
            env.stop_all()
    if os.environ.get("BRIDGE_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(exist_ok=True)
        for shot in shots.glob("*.png"):
            shutil.copy(shot, SCREENSHOTS / shot.name)


def test_signing_in_sets_a_secure_http_only_session(site: Site) -> None:
    context = site.browser.new_context()
    page = context.new_page()
    page.goto(site.url + "/schedules")
    assert page.url.startswith(site.url + "/login")
    page.get_by_label("API token (admin or read-only)").fill("not-a-token-of-this-server")
    page.get_by_role("button", name="Sign in").click()
    assert "That token is not one this server accepts." in page.content()
    page.get_by_label("API token (admin or read-only)").fill(ADMIN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(site.url + "/schedules")
    [cookie] = context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (
        "bridge_session",
        True,
        True,
        "Strict",
    )
    assert ADMIN not in cookie["value"]
    context.close()


def test_the_list_shows_next_runs_in_the_browsers_zone(site: Site) -> None:
    site.add("noon-utc", timer="0 12 * * *", timezone="UTC", labels=["reports"])
    noon = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    if noon <= datetime.now(UTC):
        noon += timedelta(days=1)
    shown = {}
    for zone, expected in (
        ("Europe/Berlin", "01:00:00 PM GMT+1"),
        ("Asia/Tokyo", "09:00:00 PM GMT+9"),
    ):
        page = site.page(zone=zone)
        page.goto(site.url + "/schedules?q=noon")
        row = page.locator("tr[data-schedule='noon-utc']")
        cell = row.locator("td").nth(2)
        shown[zone] = cell.inner_text()
        assert expected in shown[zone]
        assert "every day at 12:00 (UTC)" in row.inner_text()
        assert "reports" in row.inner_text()
        page.context.close()
    assert shown["Europe/Berlin"] != shown["Asia/Tokyo"]


def test_a_firing_schedule_shows_its_runs_without_a_reload(site: Site) -> None:
    page = site.page()
    site.add("firing", timer="every 1s", overlap="allow")
    page.goto(site.url + "/schedules?q=firing")
    row = page.locator("tr[data-schedule='firing']")
    # The list refreshes itself every 10 s: the runs appear without navigating.
    success = row.locator(".tick.status-success").first
    success.wait_for(timeout=40_000)
    # What hovering the tick says (the row's last status may already be a newer run's).
    assert (success.get_attribute("title") or "").endswith(" UTC: SUCCESS")
    assert page.url == site.url + "/schedules?q=firing"
    site.api.post("/api/v1/schedules/firing/pause")
    page.goto(site.url + "/schedules")
    site.shoot(page, "schedules")


def test_a_failing_schedule_turns_broken_and_shows_why(site: Site) -> None:
    site.add("breaks", task="workers.app.fail", timer="every 1s", max_failures=2, overlap="allow")
    wait_for(
        lambda: site.api.get("/api/v1/schedules/breaks").json()["broken"],
        60,
        what="the breaker to trip",
    )
    page = site.page()
    page.goto(site.url + "/schedules?state=broken")
    row = page.locator("tr[data-schedule='breaks']")
    assert row.locator(".badge.health-broken").first.inner_text() == "broken"
    assert "2 consecutive failed runs; last error: RuntimeError: this task always fails" in (
        row.inner_text()
    )
    page.goto(site.url + "/schedules/breaks")
    assert "RuntimeError: this task always fails" in page.locator("table.runs").inner_text()
    page.get_by_text("Traceback").first.click()
    assert "Traceback (most recent call last)" in page.locator("table.runs pre").first.inner_text()
    assert (
        page.locator("a", has_text="Flower")
        .first.get_attribute("href", timeout=5000)
        .startswith("http://flower.example:5555/task/")
    )
    site.shoot(page, "schedule")
    page.goto(site.url + "/")
    assert page.locator(".count.health-broken .number").inner_text() != "0"
    site.shoot(page, "overview")


def test_pause_resume_run_and_cancel_from_the_page(site: Site) -> None:
    site.add("steered", task="workers.app.slow", kwargs={"seconds": 60})
    page = site.page()
    page.goto(site.url + "/schedules/steered")
    page.get_by_label("Note").fill("holiday")
    page.get_by_role("button", name="Pause").click()
    assert "paused" in page.locator(".flash.ok").inner_text()
    schedule = site.api.get("/api/v1/schedules/steered").json()
    assert (schedule["enabled"], schedule["note"]) == (False, "holiday")
    page.get_by_role("button", name="Resume").click()
    assert site.api.get("/api/v1/schedules/steered").json()["enabled"] is True
    page.get_by_role("button", name="Run now").click()
    run = wait_for(
        lambda: next((r for r in site.runs("steered") if r["status"] == "STARTED"), None),
        30,
        what="the run sent from the page to start",
    )
    assert run["trigger"] == "manual"
    page.goto(site.url + "/schedules/steered")
    row = page.locator(f"tr[data-run='{run['id']}']")
    row.get_by_label("terminate").check()
    row.get_by_role("button", name="Cancel").click()
    ended = site.api.get(f"/api/v1/runs/{run['id']}").json()
    assert ended["status"] == "REVOKED"
    assert ended["error"].startswith("cancelled by http:admin@127.0.0.1 (dashboard)")
    trail = site.api.get("/api/v1/schedules/steered/audit").json()["items"]
    assert [entry["action"] for entry in trail][:4] == [
        "cancel (terminate)",
        "run",
        "resume",
        "pause",
    ]


def test_a_bad_cron_is_shown_beside_its_field_and_nothing_is_written(site: Site) -> None:
    page = site.page()
    page.goto(site.url + "/new")
    page.get_by_label("name", exact=True).fill("typo")
    page.get_by_label("task", exact=True).fill("workers.app.quick")
    page.get_by_label("timer", exact=True).fill("*/5 * * *")
    page.get_by_role("button", name="Create").click()
    error = page.locator("#e-timer")
    assert error.inner_text() == (
        "timer: got '*/5 * * *', expected a 5-field cron expression, '@hourly'..'@yearly', "
        "'every <n><s|m|h|d>...' (optionally followed by 'after completion') or "
        "'at <ISO-8601 time>' (a cron expression has 5 fields, this one has 4)"
    )
    assert page.get_by_label("timer", exact=True).get_attribute("aria-invalid") == "true"
    assert site.api.get("/api/v1/schedules/typo").status_code == 404
    page.get_by_label("timer", exact=True).fill("*/5 * * * *")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(site.url + "/schedules/typo?done=created+typo")
    assert site.api.get("/api/v1/schedules/typo").json()["timer"] == "*/5 * * * *"


def test_a_read_only_session_sees_no_action_and_is_refused_one(site: Site) -> None:
    site.add("look-only")
    page = site.page(token=READ)
    page.goto(site.url + "/schedules/look-only")
    assert page.get_by_role("button", name="Pause").count() == 0
    assert page.get_by_role("link", name="New schedule").count() == 0
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    refused = httpx.post(
        site.url + "/schedules/look-only/pause", data={"note": "x"}, cookies=cookies
    )
    assert refused.status_code == 403
    assert site.api.get("/api/v1/schedules/look-only").json()["enabled"] is True


def test_a_form_from_another_site_is_refused(site: Site) -> None:
    site.add("guarded")
    page = site.page()
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    forged = httpx.post(
        site.url + "/schedules/guarded/delete",
        data={"csrf": "guessed"},
        cookies=cookies,
        headers={"Origin": "http://evil.example"},
    )
    assert forged.status_code == 403
    assert site.api.get("/api/v1/schedules/guarded").status_code == 200


def test_keyboard_labels_phone_width_and_weight(site: Site) -> None:
    page = site.page(width=390)
    page.goto(site.url + "/schedules")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for label in ("Name starts with", "State", "Label", "Task", "Sort"):
        assert page.get_by_label(label).count() == 1, label
    # Status is told in words, not only by colour.
    assert all(text.strip() for text in page.locator(".badge").all_inner_texts())
    page_width = page.evaluate("document.documentElement.scrollWidth")
    assert page_width <= 390
    assets = [httpx.get(f"{site.url}/static/bridge.{kind}").content for kind in ("css", "js")]
    assert len(page.content().encode()) + sum(map(len, assets)) < 300_000
    site.shoot(page, "schedules-phone")
