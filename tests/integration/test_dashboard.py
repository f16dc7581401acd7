"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against a real
``bridge serve`` with a real beat and worker on PostgreSQL and Redis.

The pages are checked as a person would use them: signing in, reading the
list in two time zones, watching a schedule fire and another break,
pausing, resuming, running and cancelling from the page, a refused cron
shown beside its field, and a read-only session that offers no action.
Screenshots of the main pages are taken on the way; with
``UPDATE_SCREENSHOTS=1`` they replace those under ``docs/screenshots``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.support import (
    REPO,
    Env,
    free_port,
    http_client,
    mysql_database,
    postgres_database,
    redis_broker,
    unavailable,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

#: The stores the site runs on. The tests of each share the site (a server, a worker and a
#: beat), so they run in one group, one group a store: the two run side by side.
ON_POSTGRES = pytest.param("postgres", marks=pytest.mark.xdist_group("test_dashboard_postgres"))
ON_MARIADB = pytest.param("mariadb", marks=pytest.mark.xdist_group("test_dashboard_mariadb"))
#: For a test of what the browser does whatever the store (scripts, forms, headers, layout):
#: on PostgreSQL alone. What reads or writes the store runs on both.
BROWSER_ONLY = pytest.mark.parametrize("site", [ON_POSTGRES], indirect=True)

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

    def __init__(
        self, env: Env, url: str, browser: Any, shots: Path, settings: dict[str, str]
    ) -> None:
        self.env = env
        #: The settings its processes run with.
        self.settings = settings
        self.url = url
        self.browser = browser
        self.shots = shots
        self.api = http_client(url, ADMIN)
        #: The browser contexts the running test opened, closed when it ends: a page left
        #: open keeps refreshing itself every ten seconds for the rest of the module.
        self.contexts: list[Any] = []

    def new_context(self, **options: Any) -> Any:
        """A browser context of the running test's, closed after it."""
        context = self.browser.new_context(**options)
        self.contexts.append(context)
        return context

    def close_contexts(self) -> None:
        while self.contexts:
            self.contexts.pop().close()

    def page(
        self,
        token: str = ADMIN,
        zone: str = "Europe/Berlin",
        width: int = 1280,
        scheme: str = "light",
        url: str | None = None,
    ) -> Any:
        """A signed-in page in a browser of its own, in time zone ``zone`` and colour scheme
        ``scheme``, of this site's server or the one at ``url``."""
        url = url or self.url
        context = self.new_context(
            timezone_id=zone,
            locale="en-US",
            viewport={"width": width, "height": 900},
            color_scheme=scheme,
        )
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(url + "/")
        page.get_by_label("API token (admin or read-only)").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(url + "/")
        return page

    def add(self, name: str, **fields: Any) -> None:
        body = {"name": name, "task": "workers.app.quick", "timer": "every 1h", **fields}
        response = self.api.post("/api/v1/schedules", json=body)
        assert response.status_code == 201, response.text

    def runs(self, name: str) -> list[dict[str, Any]]:
        return list(self.api.get(f"/api/v1/schedules/{name}/runs").json()["items"])

    def shoot(self, page: Any, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=False)


@pytest.fixture(scope="module", params=[ON_POSTGRES, ON_MARIADB])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """The dashboard of a server with a worker and a beat, on PostgreSQL and on MariaDB."""
    if not Path(CHROMIUM).exists():
        unavailable("Chromium", f"no browser at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    workdir = tmp_path_factory.mktemp("dashboard")
    shots = tmp_path_factory.mktemp("screenshots")
    fresh = postgres_database if request.param == "postgres" else mysql_database
    with fresh() as database_url, sync_playwright() as playwright:
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
            yield Site(env, f"http://127.0.0.1:{port}", browser, shots, settings)
        finally:
            browser.close()
            env.kill_all()
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(exist_ok=True)
        for shot in shots.glob("*.png"):
            shutil.copy(shot, SCREENSHOTS / shot.name)


@pytest.fixture(autouse=True)
def _pages_closed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's pages are closed when it ends."""
    yield
    site = request.node.funcargs.get("site")
    if isinstance(site, Site):
        site.close_contexts()


def test_signing_in_sets_a_secure_http_only_session(site: Site) -> None:
    context = site.new_context()
    page = context.new_page()
    page.goto(site.url + "/schedules")
    assert page.url.startswith(site.url + "/login")
    page.get_by_label("API token (admin or read-only)").fill("not-a-token-of-this-server")
    page.get_by_role("button", name="Sign in").click()
    assert "That token is not one this server accepts." in page.content()
    site.shoot(page, "sign-in")
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
    # Signing out posts the page's CSRF token with it, and ends the session.
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(site.url + "/login")
    page.goto(site.url + "/schedules")
    assert page.url.startswith(site.url + "/login")
    context.close()


def test_the_list_shows_next_runs_in_the_browsers_zone(site: Site) -> None:
    site.add("noon-utc", timer="0 12 * * *", timezone="UTC", labels=["reports"])
    noon = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    if noon <= datetime.now(UTC):
        noon += timedelta(days=1)
    shown = {}
    for zone in ("Europe/Berlin", "Asia/Tokyo"):
        # The next noon in that zone, as the browser words it: Berlin's offset is +1 or +2
        # by the season of that noon.
        local = noon.astimezone(ZoneInfo(zone))
        offset = local.utcoffset() or timedelta(0)
        expected = f"{local:%I:%M:%S %p} GMT+{offset // timedelta(hours=1)}"
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


#: What a page's script shows of each time: ``<time>`` elements, the hover text of the
#: strips' and charts' marks and of the timeline's bars, and the timeline's hours.
SHOWN_TIMES = """() => {
  const hover = (node) => {
    const title = node.querySelector("title");
    return title ? title.textContent : node.getAttribute("title");
  };
  const all = (selector, attribute, read) =>
    [...document.querySelectorAll(selector)].map((n) => [n.getAttribute(attribute), read(n)]);
  const text = (node) => node.textContent;
  return {
    times: all("time[datetime]", "datetime", text),
    marks: all("[data-at]", "data-at", hover),
    clocks: all("[data-clock]", "data-clock", text),
    titles: [...document.querySelectorAll("title, [title]")].map(
      (n) => n.tagName.toLowerCase() === "title" ? n.textContent : n.getAttribute("title")),
  };
}"""


@BROWSER_ONLY
@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Tokyo"])
def test_every_page_shows_its_times_in_the_browsers_zone(site: Site, zone: str) -> None:
    """Each page opened in a browser in ``zone``: every time it shows, and every time its
    marks say on hover, is that instant in the browser's zone as the browser words it, and
    none is left in UTC."""
    name = f"zoned-{zone.split('/')[1].lower()}"
    site.add(name, timer="every 1s", overlap="allow", labels=["zoned"])
    wait_for(
        lambda: any(run["status"] == "SUCCESS" for run in site.runs(name)),
        60,
        what="a run of the schedule to succeed",
    )
    site.api.post(f"/api/v1/schedules/{name}/pause")

    def words(at: str) -> str:
        local = datetime.fromisoformat(at).astimezone(ZoneInfo(zone))
        hours = (local.utcoffset() or timedelta(0)) // timedelta(hours=1)
        return f"{local:%m/%d/%Y, %I:%M:%S %p} GMT+{hours}"

    page = site.page(zone=zone)
    seen: dict[str, dict[str, int]] = {}
    for path in ("/", "/schedules", f"/schedules/{name}", "/calendars", "/new"):
        page.goto(site.url + path)
        shown = page.evaluate(SHOWN_TIMES)
        for at, text in shown["times"]:
            assert text.startswith(words(at)), (path, at, text)
        for at, text in shown["marks"]:
            assert text.startswith(words(at) + ": "), (path, at, text)
        for at, text in shown["clocks"]:
            local = datetime.fromisoformat(at).astimezone(ZoneInfo(zone))
            assert text == f"{local:%I:%M %p}", (path, at, text)
        left = [title for title in shown["titles"] if re.search(r"\+00:00|\bUTC:", title or "")]
        assert left == [], (path, left)
        seen[path] = {kind: len(shown[kind]) for kind in ("times", "marks", "clocks")}
    # Each kind of time was there to be checked.
    assert seen["/"]["clocks"] and seen["/"]["marks"]
    assert seen["/schedules"]["times"] and seen["/schedules"]["marks"]
    assert seen[f"/schedules/{name}"]["times"] and seen[f"/schedules/{name}"]["marks"] >= 2


@BROWSER_ONLY
def test_a_firing_schedule_shows_its_runs_without_a_reload(site: Site) -> None:
    page = site.page()
    site.add("firing", timer="every 1s", overlap="allow")
    page.goto(site.url + "/schedules?q=firing")
    row = page.locator("tr[data-schedule='firing']")
    # The list refreshes itself every 10 s: the runs appear without navigating.
    success = row.locator(".tick.status-success").first
    success.wait_for(timeout=40_000)
    # What hovering the tick says (the row's last status may already be a newer run's): the
    # time in the browser's zone (Berlin's), as every time of the page.
    assert re.search(r" GMT\+[12]: SUCCESS$", success.get_attribute("title") or "")
    assert success.inner_text() == "✓"
    # Every status has a mark of its own, and the legend says which.
    legend = page.locator("#strip-legend .entry").all_inner_texts()
    marks = [entry.split()[0] for entry in legend]
    assert [entry.split()[1] for entry in legend] == [
        "PENDING",
        "SENT",
        "RECEIVED",
        "STARTED",
        "RETRY",
        "SUCCESS",
        "FAILURE",
        "REVOKED",
        "LOST",
    ]
    assert len(set(marks)) == len(marks) == 9
    assert page.url == site.url + "/schedules?q=firing"
    # The schedule's run log and the overview refresh themselves too, and say when.
    page.goto(site.url + "/schedules/firing")
    log = page.locator("#runs")
    first = log.locator(".refreshed time").get_attribute("datetime")
    before = log.locator("tr[data-run]").count()
    page.wait_for_function(
        "([n, at]) => document.querySelectorAll('#runs tr[data-run]').length > n"
        " && document.querySelector('#runs .refreshed time').getAttribute('datetime') !== at",
        arg=[before, first],
        timeout=30_000,
    )
    assert log.locator(".refreshed").inner_text().startswith("Updated ")
    assert page.url == site.url + "/schedules/firing"
    page.goto(site.url + "/")
    shown = page.locator("#overview .refreshed time").get_attribute("datetime")
    page.wait_for_function(
        "at => document.querySelector('#overview .refreshed time').getAttribute('datetime') !== at",
        arg=shown,
        timeout=30_000,
    )
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
    assert "broken: " not in row.inner_text()  # the badge says it once
    # The schedule's runs drawn: each failed run a red mark, with what it was on hover.
    page.goto(site.url + "/schedules/breaks")
    chart = page.locator("svg.durations")
    failures = chart.locator("circle.failure")
    assert failures.count() >= 2 and chart.locator("circle.run").count() == 0
    assert ": FAILURE, ran " in (failures.first.locator("title").text_content() or "")
    assert "started" in (failures.first.locator("title").text_content() or "")
    assert page.locator("#chart-caption").inner_text().startswith("Duration of each of the last")
    page.goto(site.url + "/schedules/breaks")
    # Why it broke, said once above its definition (and in the heading badge's tooltip).
    said = "2 consecutive failed runs; last error: RuntimeError: this task always fails"
    assert page.locator("main").inner_text().count(said) == 1
    assert page.locator("main p.flash.bad").inner_text() == f"broken {said}"
    assert page.locator("#upcoming + p").inner_text() == "None: it is broken until it is resumed."
    assert "RuntimeError: this task always fails" in page.locator("table.runs").inner_text()
    site.shoot(page, "schedule")  # before the traceback, which names this machine's paths
    page.get_by_text("Traceback").first.click()
    assert "Traceback (most recent call last)" in page.locator("table.runs pre").first.inner_text()
    assert (
        page.locator("a", has_text="Flower")
        .first.get_attribute("href", timeout=5000)
        .startswith("http://flower.example:5555/task/")
    )
    page.goto(site.url + "/")
    assert page.locator(".count.health-broken .number").inner_text() != "0"
    # Named under "Needs attention" whether or not the watchdog has opened its incident yet.
    attention = page.locator("section[aria-labelledby='attention']")
    assert "Nothing is wrong" not in attention.inner_text()
    if not re.search(r"No incident is open yet, but \d+ broken", attention.inner_text()):
        # Other incidents are open, so the table is shown: breaks' own is in it once the
        # watchdog's next pass has opened it.
        def opened() -> bool:
            found = site.api.get("/api/v1/incidents", params={"open": "true"}).json()["items"]
            return any(incident["schedule_name"] == "breaks" for incident in found)

        wait_for(opened, 30, what="the incident of the broken schedule")
        page.reload()
        assert "breaks" in attention.inner_text()
    site.shoot(page, "overview")


def test_the_pictures_of_the_next_day_the_weeks_labels_and_a_schedules_occurrences(
    site: Site,
) -> None:
    """A schedule whose runs outlast its interval skips occurrences: its page's strip shows
    the skips beside the runs, each with a mark of its own in the legend. The overview draws
    the next day's fires, a lane per timer with how many schedules share it, and each
    label's success rate over the week."""
    site.add(
        "skips",
        task="workers.app.slow",
        kwargs={"seconds": 3},
        timer="every 1s",
        overlap="skip",
        labels=["team:busy"],
    )
    for index in range(3):
        site.add(f"nightly-{index}", timer="0 3 * * *", timezone="UTC", labels=["team:night"])

    def counted() -> bool:
        found = site.api.get("/api/v1/schedules/skips").json()
        # Two runs that ended, so that the picture of their durations draws a line.
        return bool(found["skipped_count"] >= 3 and found["success_count"] >= 2)

    wait_for(counted, 60, what="skipped occurrences and runs that succeeded")
    # A server of its own: the overview's pictures are read once a minute.
    port = free_port()
    site.env.serve(port, **site.settings)
    url = f"http://127.0.0.1:{port}"
    page = site.page(zone="America/New_York", url=url)
    page.goto(url + "/schedules/skips")
    strip = page.locator("#occurrences")
    skipped = strip.locator(".tick.status-skipped")
    assert skipped.count() >= 1 and strip.locator(".tick.status-success").count() >= 1
    assert skipped.first.inner_text() == "»"
    # In the browser's zone, with how many were skipped in that hour.
    said = skipped.first.get_attribute("title") or ""
    assert re.search(r" [EC][SD]T: \d+ skipped in the hour from then$", said), said
    legend = page.locator("#occurrence-legend").inner_text()
    assert "» SKIPPED" in legend and "○ MISSED" in legend and "✓ SUCCESS" in legend
    page.goto(url + "/")
    timeline = page.locator("svg.timeline")
    lanes = timeline.locator("g.lane")
    labels = lanes.locator("text.label").all_text_contents()
    assert "every day at 03:00 (UTC) (3)" in labels, labels
    nightly = lanes.filter(has_text="every day at 03:00 (UTC) (3)")
    assert "0 3 * * * (UTC): 3 schedule(s)" in (nightly.locator("title").first.text_content() or "")
    assert nightly.locator("line.fire").count() == 1  # once within the next 24 hours
    assert timeline.locator("rect.bar").count() >= 1
    # The hours in New York's clock: 03:00 UTC is 22:00 or 23:00 there, the axis every 3 h.
    clocks = timeline.locator("text.clock").all_text_contents()
    assert len(clocks) == 8 and all(re.fullmatch(r"\d\d:00( [AP]M)?", c) for c in clocks), clocks
    rate = page.locator("table.rates tr[data-label='team:busy']")
    assert "100.0%" in rate.inner_text() and "SUCCESS" in rate.inner_text()
    assert page.locator("table.rates tr[data-label='team:night']").count() == 0  # no run yet
    page.locator("#timeline").evaluate("node => node.scrollIntoView()")
    site.shoot(page, "overview-pictures")
    page.goto(url + "/schedules/skips")
    page.locator("#figures").evaluate("node => node.scrollIntoView()")
    site.shoot(page, "schedule-pictures")
    # Its slow runs would keep the site's worker busy for the tests after this one.
    site.api.post("/api/v1/schedules/skips/pause")


@BROWSER_ONLY
def test_a_resume_that_catches_up_shows_what_it_missed_and_delete_asks_first(site: Site) -> None:
    """Paused for a few seconds, then resumed from where it stopped under catch-up
    ``latest``: the latest occurrence missed runs, the others are counted missed, and the
    schedule's strip shows them with the missed mark. Deleted from its page, it is gone."""
    site.add("catching", timer="every 1s", overlap="allow")
    wait_for(lambda: site.runs("catching"), 30, what="a first run")
    page = site.page()
    page.goto(site.url + "/schedules/catching")
    page.get_by_label("Note", exact=True).fill("maintenance")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/catching?done=")))
    paused_at = datetime.now(UTC)
    wait_for(lambda: datetime.now(UTC) - paused_at > timedelta(seconds=4), 10, what="4 s")
    page.locator("select[name=from]").select_option("catchup")
    page.get_by_role("button", name="Resume").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/catching?done=")))
    wait_for(
        lambda: site.api.get("/api/v1/schedules/catching").json()["missed_count"] >= 2,
        30,
        what="the occurrences passed over to be counted",
    )
    page.reload()
    missed = page.locator("#occurrences .tick.status-missed")
    assert missed.count() >= 1 and missed.first.inner_text() == "○"
    said = missed.first.get_attribute("title") or ""
    assert re.search(r" GMT\+[12]: \d+ missed in the hour from then$", said), said
    page.get_by_role("button", name="Delete").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules?done=")))
    assert site.api.get("/api/v1/schedules/catching").status_code == 404


@BROWSER_ONLY
def test_a_backfill_fills_the_run_log_which_pages_and_the_list_filters_and_sorts(
    site: Site,
) -> None:
    """A backfill of half an hour of an every-minute schedule, from its page: thirty runs
    sent, the run log paged 25 at a time. The list found by label and by task, sorted by next
    run; an unknown schedule's page says so."""
    # Paused: no run of its own joins the log while it is read.
    site.add("filled", timer="every 1m", labels=["paged"], task="workers.app.quick", enabled=False)
    page = site.page()
    page.goto(site.url + "/schedules/filled")
    now = datetime.now(UTC).replace(microsecond=0)
    page.locator("input[name=from]").fill((now - timedelta(minutes=40)).isoformat())
    page.locator("input[name=to]").fill((now - timedelta(minutes=10, seconds=1)).isoformat())
    page.get_by_role("button", name="Backfill").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/filled?done=")))
    # Every minute on the grid of its creation: 29 or 30 of them in the range.
    sent = re.fullmatch(
        r"backfill: (\d+) runs sent, 0 already recorded", page.locator(".flash.ok").inner_text()
    )
    assert sent is not None and int(sent.group(1)) in (29, 30)
    assert len(site.api.get("/api/v1/schedules/filled/runs?limit=100").json()["items"]) == int(
        sent.group(1)
    )
    assert page.locator("table.runs tbody tr").count() == 25
    total = len(site.api.get("/api/v1/schedules/filled/runs?limit=100").json()["items"])
    page.get_by_role("link", name="Older runs").click()
    page.wait_for_url(re.compile(r"/schedules/filled\?runs="))
    page.wait_for_load_state()
    assert page.locator("table.runs tbody tr").count() == total - 25
    page.goto(site.url + "/schedules")
    page.get_by_label("Label", exact=True).fill("paged")
    page.get_by_role("button", name="Show").click()
    assert page.locator("tbody tr[data-schedule]").evaluate_all(
        "rows => rows.map(row => row.dataset.schedule)"
    ) == ["filled"]
    page.get_by_label("Label", exact=True).fill("")
    page.get_by_label("Task", exact=True).fill("workers.app.quick")
    page.get_by_role("button", name="Show").click()
    assert "task=workers.app.quick" in page.url
    assert page.locator("tr[data-schedule='filled']").count() == 1
    # Sorted by next run: the enabled ones, each row's next run (as the page was read)
    # soonest first.
    site.add("sorted-late", timer="every 2h")
    site.add("sorted-soon", timer="every 20m")
    page.get_by_label("Task", exact=True).fill("")
    page.get_by_label(re.compile("^Sort")).select_option("next")
    page.get_by_role("button", name="Show").click()
    assert "sort=next" in page.url
    following = page.locator("tbody tr[data-schedule] td:nth-child(3) time").evaluate_all(
        "times => times.map(time => time.getAttribute('datetime'))"
    )
    times = [datetime.fromisoformat(at) for at in following]
    assert len(times) >= 3 and times == sorted(times)
    missing = page.goto(site.url + "/schedules/no-such-schedule")
    assert missing is not None and missing.status == 404
    assert "no-such-schedule" in page.locator("main").inner_text()


@BROWSER_ONLY
def test_the_list_does_not_refresh_while_a_field_is_being_typed_in(site: Site) -> None:
    """The list refreshes itself every 10 s, but not while a field has the focus: what is
    being typed would be lost. The page's clock is moved on rather than waited for."""
    page = site.page()
    page.clock.install()
    page.goto(site.url + "/schedules")
    asked: list[str] = []
    page.on(
        "request", lambda request: asked.append(request.url) if "fragment" in request.url else None
    )
    page.get_by_label("Name starts with").focus()
    page.clock.run_for("00:25")
    page.wait_for_timeout(500)
    assert asked == []
    page.get_by_label("Name starts with").blur()
    with page.expect_request(lambda request: "fragment" in request.url, timeout=10_000):
        page.clock.run_for("00:11")


@BROWSER_ONLY
def test_the_dark_colour_scheme_keeps_the_words_readable(site: Site) -> None:
    """Asked for a dark scheme, the pages draw light words on a dark ground, their fields
    and tables included."""
    site.add("in the dark")
    page = site.page(scheme="dark")
    for path in ("/", "/schedules", "/schedules/in%20the%20dark", "/calendars", "/new"):
        page.goto(site.url + path)
        for selector in ("body", "main input:not([type=checkbox]):not([type=hidden])", "th"):
            if page.locator(selector).count() == 0:
                continue
            background, colour = page.locator(selector).first.evaluate(
                "node => [getComputedStyle(node).backgroundColor, getComputedStyle(node).color]"
            )
            if selector != "body" and background == "rgba(0, 0, 0, 0)":
                background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert luminance(background) < 0.1 < 0.6 < luminance(colour), (path, selector)
    page.goto(site.url + "/schedules")
    site.shoot(page, "schedules-dark")


def luminance(css: str) -> float:
    """The relative luminance of a CSS ``rgb(...)`` colour, from 0 (black) to 1 (white)."""
    channels = [int(part) / 255 for part in re.findall(r"\d+", css)[:3]]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


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


def test_a_retry_is_listed_first_and_offered_on_the_latest_attempt_only(site: Site) -> None:
    site.add("retried", task="workers.app.fail")
    failed = site.api.post("/api/v1/schedules/retried/run").json()
    wait_for(
        lambda: site.api.get(f"/api/v1/runs/{failed['id']}").json()["status"] == "FAILURE",
        30,
        what="the run to fail",
    )
    page = site.page()
    page.goto(site.url + "/schedules/retried")
    page.locator(f"tr[data-run='{failed['id']}']").get_by_role("button", name="Retry").click()
    retry = wait_for(
        lambda: next((r for r in site.runs("retried") if r["attempt"] == 2), None),
        30,
        what="the retry sent from the page",
    )
    assert site.runs("retried")[0]["id"] == retry["id"]
    assert retry["plan_time"] == failed["plan_time"]
    wait_for(
        lambda: site.api.get(f"/api/v1/runs/{retry['id']}").json()["status"] == "FAILURE",
        30,
        what="the retry to fail",
    )
    page.goto(site.url + "/schedules/retried")
    assert page.locator("tr[data-run]").evaluate_all(
        "rows => rows.map(row => row.dataset.run)"
    ) == [retry["id"], failed["id"]]
    replaced = page.locator(f"tr[data-run='{failed['id']}']")
    assert replaced.get_by_role("button", name="Retry").count() == 0
    latest = page.locator(f"tr[data-run='{retry['id']}']")
    assert latest.get_by_role("button", name="Retry").count() == 1


def test_a_one_shot_that_ran_shows_finished_not_paused(site: Site) -> None:
    at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    site.add("one-time", timer=f"at {at.isoformat()}")
    wait_for(
        lambda: site.api.get("/api/v1/schedules/one-time").json()["health"] == "finished",
        60,
        what="the one-shot to finish",
    )
    page = site.page()
    page.goto(site.url + "/schedules?state=finished")
    row = page.locator("tr[data-schedule='one-time']")
    assert row.locator(".badge.health-finished").first.inner_text() == "finished"
    assert row.locator(".badge.health-paused").count() == 0
    page.goto(site.url + "/schedules/one-time")
    assert "paused" not in page.locator("main").inner_text()
    page.goto(site.url + "/")
    assert page.locator(".count.health-finished .number").inner_text() != "0"


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
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/typo?done=created+typo&sig=")))
    assert page.locator(".flash.ok").inner_text() == "created typo"
    assert site.api.get("/api/v1/schedules/typo").json()["timer"] == "*/5 * * * *"


def test_a_policy_emptied_on_the_edit_form_goes_back_to_its_default(site: Site) -> None:
    site.add("tuned", catchup="all", overlap="allow", backoff="30s,2m", max_attempts=3)
    page = site.page()
    page.goto(site.url + "/schedules/tuned/edit")
    assert page.get_by_label("catchup", exact=True).input_value() == "all"
    for name in ("catchup", "overlap"):  # choices, with the default first
        page.get_by_label(name, exact=True).select_option("")
    page.get_by_label("backoff", exact=True).fill("")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/tuned?done=")))
    body = site.api.get("/api/v1/schedules/tuned").json()
    # catch-up back to `latest`, not to `none` (which runs no missed occurrence)
    assert (body["catchup"], body["overlap"], body["backoff"]) == ("latest", "skip", None)
    assert body["max_attempts"] == 3


@BROWSER_ONLY
def test_the_form_offers_each_policys_words_and_the_apps_tasks(site: Site) -> None:
    page = site.page()
    page.goto(site.url + "/new")
    overlap = page.get_by_label("overlap", exact=True)
    assert overlap.locator("option").all_inner_texts() == [
        "the default",
        "skip: no new run is sent while one is open",
        "allow: a new run is sent beside the open one",
        "buffer_one: one new run waits, and starts when the open one ends",
        "buffer_all: every new run waits its turn, each starting when the one before ends",
        "replace: the open run is revoked and the new one sent",
    ]
    offered = [option.get_attribute("value") for option in page.locator("#l-task option").all()]
    assert "workers.app.quick" in offered and offered == sorted(offered)
    assert page.get_by_label("task", exact=True).get_attribute("list") == "l-task"
    # The expiry takes a duration too: its usual values are offered, each saying what it does.
    expiries = page.locator("#l-expires option").all()
    assert [option.get_attribute("label") for option in expiries][:2] == [
        "a run not started by the following occurrence expires then",
        "a run waits for a worker however long it takes",
    ]
    page.get_by_label("name", exact=True).fill("chosen")
    page.get_by_label("task", exact=True).fill("workers.app.quick")
    page.get_by_label("timer", exact=True).fill("every 1h")
    overlap.select_option("buffer_one")
    page.get_by_label("on_overrun", exact=True).select_option("revoke")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/chosen?done=")))
    body = site.api.get("/api/v1/schedules/chosen").json()
    assert (body["overlap"], body["catchup"], body["on_overrun"]) == (
        "buffer_one",
        "latest",
        "revoke",
    )
    page.goto(site.url + "/schedules/chosen/edit")
    assert page.get_by_label("overlap", exact=True).input_value() == "buffer_one"


@BROWSER_ONLY
def test_the_form_previews_the_next_runs_and_checks_json_before_sending(site: Site) -> None:
    page = site.page(zone="Europe/Berlin")
    page.goto(site.url + "/new")
    page.get_by_label("timer", exact=True).fill("0 9 * * *")
    page.get_by_label("timezone", exact=True).fill("Asia/Tokyo")
    region = page.locator("[data-preview]")
    # The timer's own preview (in UTC) may be shown first, when the zone is typed more than
    # the form's pause after it: the one to read names the zone.
    region.get_by_text("the schedule's (Asia/Tokyo)").wait_for()
    region.locator("li").nth(4).wait_for()
    runs = region.locator("li").all_inner_texts()
    assert len(runs) == 5, runs
    for run in runs:
        mine, theirs = run.split(" \u2014 ")
        assert "09:00:00" in theirs, run  # 09:00 in Tokyo
        assert "01:00:00" in mine or "02:00:00" in mine, run  # 00:00 UTC, in Berlin
    assert "Asia/Tokyo" in region.inner_text() and "Europe/Berlin" in region.inner_text()
    region.scroll_into_view_if_needed()
    site.shoot(page, "form")
    page.get_by_label("timer", exact=True).fill("0 9 * *")
    region.locator(".error").wait_for()
    assert region.locator(".error").inner_text().startswith("timer: got '0 9 * *', expected")
    page.get_by_label("timer", exact=True).fill("every 1h")
    page.get_by_label("name", exact=True).fill("json-checked")
    page.get_by_label("task", exact=True).fill("workers.app.quick")
    page.get_by_label("kwargs", exact=True).fill('{"n": 1')
    page.get_by_role("button", name="Create").click()
    assert page.locator(".json-error").inner_text().startswith("kwargs: not JSON")
    assert page.url == site.url + "/new"
    assert site.api.get("/api/v1/schedules/json-checked").status_code == 404
    page.get_by_label("kwargs", exact=True).fill('{"n": 1}')
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/json-checked?done=")))
    assert site.api.get("/api/v1/schedules/json-checked").json()["kwargs"] == {"n": 1}
    # The preview's answers are the server's: the session's, refused as the API refuses.
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    refused = httpx.get(
        site.url + "/forecast.json", params={"timer": "every", "timezone": "Mars/Base"},
        cookies=cookies,
    )  # fmt: skip
    assert refused.status_code == 422 and refused.json()["field"] == "timezone"
    assert httpx.get(site.url + "/forecast.json", params={"timer": "@daily"}).status_code == 303


def ask_every_match(site: Site, page: Any, action: str, label: str = "") -> str:
    """Ask for a bulk action (with its ``label``) on every schedule the list's filter
    ``bulk-`` matches: the heading of the page that asks again."""
    page.goto(site.url + "/schedules?q=bulk-")
    page.get_by_label("With the ticked schedules").select_option(action)
    if label:
        page.get_by_label("label to add or remove").fill(label)
    page.get_by_label("every schedule this filter matches").check()
    page.get_by_role("button", name="Apply…").click()
    return str(page.locator("h1").inner_text())


def confirm(site: Site, page: Any, button: str) -> str:
    """Confirm a bulk action with its ``button``: the message the list then shows."""
    page.get_by_role("button", name=button).click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules?done=")))
    return str(page.locator(".flash.ok").inner_text())


def every_match(site: Site, page: Any, action: str, button: str) -> str:
    """A bulk action on every schedule the list's filter ``bulk-`` matches, confirmed with
    its ``button``: the message the list then shows."""
    ask_every_match(site, page, action)
    return confirm(site, page, button)


def test_bulk_actions_say_how_many_and_change_each_schedule_on_its_own(site: Site) -> None:
    for name in ("bulk-a", "bulk-b", "bulk-c"):
        site.add(name)
    page = site.page()
    page.goto(site.url + "/schedules?q=bulk-")
    for name in ("bulk-a", "bulk-b"):
        page.get_by_label(f"tick {name}").check()
    page.get_by_label("With the ticked schedules").select_option("pause")
    page.get_by_role("button", name="Apply…").click()
    assert page.locator("h1").inner_text() == "Pause: 2 schedules?"
    assert site.api.get("/api/v1/schedules/bulk-a").json()["enabled"] is True  # not yet
    page.get_by_role("button", name="Pause 2").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules?done=")))
    assert page.locator(".flash.ok").inner_text() == "pause: 2 of 2 schedule(s)"
    enabled = {
        name: site.api.get(f"/api/v1/schedules/{name}").json()["enabled"]
        for name in ("bulk-a", "bulk-b", "bulk-c")
    }
    assert enabled == {"bulk-a": False, "bulk-b": False, "bulk-c": True}
    trail = site.api.get("/api/v1/audit", params={"limit": 50}).json()["items"]
    paused = [e for e in trail if e["action"] == "pause" and e["schedule_name"].startswith("bulk-")]
    assert sorted(e["schedule_name"] for e in paused) == ["bulk-a", "bulk-b"]
    assert all(e["actor"].endswith("(dashboard)") for e in paused)
    # Every match of the filter, whatever is ticked: the page says how many.
    asked = ask_every_match(site, page, "add label", "swept")
    assert asked == "Add label “swept”: 3 schedules?"
    confirm(site, page, "Add label 3")
    listed = site.api.get("/api/v1/schedules?label=swept").json()["items"]
    assert [item["name"] for item in listed] == ["bulk-a", "bulk-b", "bulk-c"]
    # Resuming all three: the one not paused is left as it is, and said.
    told = every_match(site, page, "resume", "Resume 3")
    assert told.startswith("resume: 2 of 3 schedule(s); 1 left as they were (the first: bulk-c:")
    # The label taken off every match again; the page that asks is the one pictured.
    asked = ask_every_match(site, page, "remove label", "swept")
    assert asked == "Remove label “swept”: 3 schedules?"
    site.shoot(page, "bulk")
    confirm(site, page, "Remove label 3")
    assert site.api.get("/api/v1/schedules?label=swept").json()["items"] == []
    # A run of the one ticked, sent now.
    page.goto(site.url + "/schedules?q=bulk-")
    page.get_by_label("tick bulk-c").check()
    page.get_by_label("With the ticked schedules").select_option("run")
    page.get_by_role("button", name="Apply…").click()
    assert page.locator("h1").inner_text() == "Run: 1 schedule?"
    confirm(site, page, "Run 1")
    assert "manual" in [run["trigger"] for run in site.runs("bulk-c")]
    assert "manual" not in [run["trigger"] for run in site.runs("bulk-a")]
    # A forged form ticking thousands: refused whole as a form of too many fields.
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    names = [f"bulk-{i}" for i in range(2000)]
    forged = httpx.post(
        site.url + "/schedules/bulk",
        data={"csrf": csrf or "", "action": "delete", "names": names},
        cookies=cookies,
    )
    assert forged.status_code == 400
    assert len(site.api.get("/api/v1/schedules?prefix=bulk-").json()["items"]) == 3
    # Nothing ticked: refused, nothing asked.
    page.goto(site.url + "/schedules?q=bulk-")
    page.get_by_role("button", name="Apply…").click()
    assert "names: got '', expected a schedule ticked" in page.locator(".flash.bad").inner_text()
    every_match(site, page, "delete", "Delete 3")
    assert site.api.get("/api/v1/schedules?prefix=bulk-").json()["items"] == []


def test_duplicate_opens_the_new_form_with_a_copy_under_a_name_of_its_own(site: Site) -> None:
    site.add(
        "team/original", timer="15 4 * * mon", timezone="Asia/Tokyo", kwargs={"n": 3},
        catchup="all", overlap="allow", labels=["copied"],
    )  # fmt: skip
    site.api.post("/api/v1/schedules/team/original/pause", json={"note": "held"})
    page = site.page()
    page.goto(site.url + "/schedules/team/original")
    page.get_by_role("link", name="Duplicate").click()
    page.wait_for_url(site.url + "/new?from=team%2Foriginal")
    assert page.get_by_label("name", exact=True).input_value() == "team/original-copy"
    assert page.get_by_label("timer", exact=True).input_value() == "15 4 * * mon"
    assert page.get_by_label("catchup", exact=True).input_value() == "all"
    # The copy of a paused schedule is not enabled unless the box is ticked: it would fire
    # beside the original.
    assert not page.get_by_label("enabled (fires as soon as it is due)").is_checked()
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/team%2Foriginal-copy?done=")))
    original = site.api.get("/api/v1/schedules/team/original").json()
    copy = site.api.get("/api/v1/schedules/team/original-copy").json()
    compared = ("task", "timer", "timezone", "args", "kwargs", "catchup", "overlap", "labels")
    assert {key: copy[key] for key in compared} == {key: original[key] for key in compared}
    assert copy["enabled"] is False
    # Again: the name is taken, which the form says beside it, and nothing is written.
    page.goto(site.url + "/new?from=team%2Foriginal")
    page.get_by_role("button", name="Create").click()
    assert "a name no other schedule has" in page.locator("#e-name").inner_text()
    assert not page.get_by_label("enabled (fires as soon as it is due)").is_checked()
    names = [
        item["name"] for item in site.api.get("/api/v1/schedules?prefix=team/").json()["items"]
    ]
    assert names == ["team/original", "team/original-copy"]
    assert page.goto(site.url + "/new?from=nothing-of-that-name").status == 404


#: For each checkbox of a page: the gap from its box to its label's words, and whether
#: the two share a line.
CHECKBOX_GAPS = """() => [...document.querySelectorAll("label input[type=checkbox]")].map(box => {
  const words = document.createRange();
  words.selectNodeContents(box.closest("label"));
  words.setStartAfter(box);
  const own = box.getBoundingClientRect(), text = words.getBoundingClientRect();
  return [box.name, text.left - own.right, own.top < text.bottom && text.top < own.bottom];
})"""


@BROWSER_ONLY
def test_each_checkbox_sits_by_its_words(site: Site) -> None:
    site.add("boxed")
    page = site.page()
    for path, names in (
        ("/new", ["allow_unknown_task", "enabled"]),
        ("/schedules/boxed/edit", ["allow_unknown_task"]),
    ):
        page.goto(site.url + path)
        gaps = page.evaluate(CHECKBOX_GAPS)
        assert [name for name, _, _ in gaps] == names, path
        for name, gap, same_line in gaps:
            assert 0 <= gap <= 12 and same_line, (path, name, gap)


@BROWSER_ONLY
def test_a_link_cannot_put_words_in_the_pages_messages(site: Site) -> None:
    site.add("flashed")
    page = site.page()
    for path in (
        "/?error=Your+token+expired%2C+sign+in+at+evil.example",
        "/schedules/flashed?done=ok&sig=0",
    ):
        page.goto(site.url + path)
        assert page.locator(".flash.bad, .flash.ok").count() == 0, path
        assert "evil.example" not in page.content()
    # What the server says after an action is still shown: a refusal in red.
    page.goto(site.url + "/schedules/flashed")
    page.get_by_label("From", exact=True).fill("yesterday")
    page.get_by_label("To", exact=True).fill("2026-11-02T00:00:00+00:00")
    page.get_by_role("button", name="Backfill").click()
    assert page.locator(".flash.bad").inner_text().startswith("from: got 'yesterday'")


def test_a_read_only_session_sees_no_action_and_is_refused_one(site: Site) -> None:
    site.add("look-only")
    page = site.page(token=READ)
    page.goto(site.url + "/schedules/look-only")
    assert page.get_by_role("button", name="Pause").count() == 0
    assert page.get_by_role("link", name="New schedule").count() == 0
    assert page.get_by_role("link", name="Edit").count() == 0
    # No page shows it a form it could not submit, nor a run action.
    for path in ("/new", "/schedules/look-only/edit"):
        response = page.goto(site.url + path)
        assert response is not None and response.status == 403, path
        assert page.locator("main form").count() == 0, path
        assert "needs the admin token" in page.locator("main").inner_text(), path
    for path in ("/", "/schedules", "/calendars", "/schedules/look-only"):
        page.goto(site.url + path)
        assert page.locator("main form[method=post]").count() == 0, path
        assert page.locator("main input[type=checkbox]").count() == 0, path
    site.shoot(page, "schedule-read-only")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    refused = httpx.post(
        site.url + "/schedules/look-only/pause", data={"note": "x"}, cookies=cookies
    )
    assert refused.status_code == 403
    assert site.api.get("/api/v1/schedules/look-only").json()["enabled"] is True


@BROWSER_ONLY
def test_a_field_no_form_has_is_refused_naming_it(site: Site) -> None:
    site.add("strict-form")
    page = site.page()
    page.goto(site.url + "/schedules/strict-form")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    posted = httpx.post(
        site.url + "/schedules/strict-form/pause",
        data={"csrf": csrf, "note": "x", "nte": "typo"},
        cookies=cookies,
    )
    assert posted.status_code == 303
    page.goto(site.url + posted.headers["location"])
    assert page.locator(".flash.bad").inner_text().startswith("nte: got 'typo', expected a field")
    assert site.api.get("/api/v1/schedules/strict-form").json()["enabled"] is True
    created = httpx.post(
        site.url + "/new",
        data={"csrf": csrf, "name": "n", "task": "workers.app.quick", "timer": "@daily", "x": "1"},
        cookies=cookies,
    )
    assert created.status_code == 422
    assert "x: got &#39;1&#39;, expected a field of this form" in created.text
    assert site.api.get("/api/v1/schedules/n").status_code == 404


@BROWSER_ONLY
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


@BROWSER_ONLY
def test_keyboard_labels_phone_width_and_weight(site: Site) -> None:
    page = site.page(width=390)
    page.goto(site.url + "/schedules")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for label in ("Name starts with", "State", "Label", "Task", "Sort"):
        assert page.get_by_label(re.compile("^" + re.escape(label))).count() == 1, label
    # Status is told in words, not only by colour.
    assert all(text.strip() for text in page.locator(".badge").all_inner_texts())
    page_width = page.evaluate("document.documentElement.scrollWidth")
    assert page_width <= 390
    assets = [httpx.get(f"{site.url}/static/bridge.{kind}").content for kind in ("css", "js")]
    assert len(page.content().encode()) + sum(map(len, assets)) < 300_000
    page.evaluate("document.activeElement.blur()")  # the skip link, shown while focused
    site.shoot(page, "schedules-phone")


def watched(site: Site, zone: str = "Europe/Berlin") -> tuple[Any, list[str], list[str]]:
    """A new page whose console messages and requested addresses are kept, before any
    navigation."""
    context = site.new_context(timezone_id=zone, locale="en-US")
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    console: list[str] = []
    requested: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("request", lambda request: requested.append(request.url))
    return page, console, requested


@BROWSER_ONLY
def test_the_api_page_renders_every_operation_from_this_server_only(site: Site) -> None:
    """Swagger UI 5 reads the OpenAPI 3.1 document, under the server's CSP, and asks no
    other host for anything."""
    document = site.api.get("/openapi.json").json()
    operations = sum(len(methods) for methods in document["paths"].values())
    page, console, requested = watched(site)
    page.goto(site.url + "/docs")
    page.locator(".opblock").first.wait_for()
    assert page.locator(".opblock").count() == operations
    assert "Unable to render" not in page.content()
    create = page.locator(".opblock-post", has_text="/api/v1/schedules").first
    create.locator(".opblock-summary").click()
    # Opened by a script after the click: waited for, as a reader would see it appear.
    create.locator(".responses-table").first.wait_for(state="visible")
    for status in ("201", "400", "409", "422"):
        assert create.locator(f"tr.response[data-code='{status}']").count() == 1, status
    site.shoot(page, "api-docs")
    assert not [message for message in console if message.startswith("error")], console
    elsewhere = [url for url in requested if not url.startswith((site.url, "data:"))]
    assert not elsewhere


@BROWSER_ONLY
def test_the_dashboard_works_under_its_content_security_policy(site: Site) -> None:
    """No page needs an inline script: the browser reports no violation of the policy while
    a person reads every page and acts on a schedule, and no other site can frame a page."""
    site.add("policed")
    page, console, _ = watched(site)
    page.goto(site.url + "/")
    page.get_by_label("API token (admin or read-only)").fill(ADMIN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(site.url + "/")
    for path in ("/", "/schedules", "/new", "/schedules/policed", "/schedules/policed/edit"):
        page.goto(site.url + path)
        # The script ran: times and the zone are the browser's own.
        assert page.locator("[data-zone]").first.inner_text() == "Europe/Berlin", path
    page.goto(site.url + "/schedules/policed")
    page.get_by_role("button", name="Pause").click()  # through the script's confirmation
    assert "paused" in page.locator(".flash.ok").inner_text()
    assert not [m for m in console if "Content Security Policy" in m or m.startswith("error")]
    # A page of another origin that frames the dashboard gets nothing.
    framing, framing_console, _ = watched(site)
    framing.set_content(f'<iframe src="{site.url}/login"></iframe>')
    frame = framing.frames[-1]
    wait_for(
        lambda: (
            any("frame-ancestors" in message for message in framing_console)
            or frame.url == "chrome-error://chromewebdata/"
        ),
        30,
        what="the browser to refuse the frame",
    )
    assert frame.url != f"{site.url}/login" or frame.locator("form").count() == 0


def test_the_calendars_page_lists_each_calendar_and_who_skips_it(site: Site) -> None:
    made = site.api.post(
        "/api/v1/calendars",
        json={
            "name": "shut-days",
            "dates": ["2026-12-24", "2026-12-25", "2026-12-26", "2027-01-01"],
        },
    )
    assert made.status_code == 201, made.text
    site.add("skips shut days", skip_calendars=["shut-days"])
    page = site.page()
    page.get_by_role("link", name="Calendars").click()
    row = page.locator('tr[data-calendar="shut-days"]')
    assert row.locator("td").nth(1).inner_text() == "dates"
    assert "2026-12-24, 2026-12-25, 2026-12-26 and 1 more" in row.inner_text()
    site.shoot(page, "calendars")
    row.get_by_role("link", name="skips shut days").click()
    page.wait_for_url(site.url + "/schedules/skips%20shut%20days")


def test_a_calendar_is_made_refused_and_removed_on_its_page(site: Site) -> None:
    """The calendars page makes a calendar from its form, shows a refusal naming the field
    with the form as it was sent, and removes a calendar no schedule skips."""
    page = site.page()
    page.goto(site.url + "/calendars")
    page.get_by_label("name", exact=True).fill("freeze")
    page.get_by_label("kind", exact=True).select_option("ranges")
    page.get_by_label("entries", exact=True).fill("2026-12-20/2027-01-06, 2027-03-31")
    page.get_by_label("timezone", exact=True).fill("Europe/Berlin")
    page.get_by_role("button", name="Save calendar").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/calendars?done=saved+calendar+freeze")))
    made = site.api.get("/api/v1/calendars/freeze").json()
    assert (made["kind"], made["ranges"], made["timezone"]) == (
        "ranges",
        ["2026-12-20/2027-01-06", "2027-03-31/2027-03-31"],
        "Europe/Berlin",
    )
    page.get_by_label("name", exact=True).fill("typo")
    page.get_by_label("kind", exact=True).select_option("dates")
    page.get_by_label("entries", exact=True).fill("2026-02-30")
    page.get_by_role("button", name="Save calendar").click()
    assert "Nothing was saved: dates: got '2026-02-30'" in page.locator(".flash.bad").inner_text()
    assert page.get_by_label("entries", exact=True).input_value() == "2026-02-30"
    assert site.api.get("/api/v1/calendars/typo").status_code == 404
    page.goto(site.url + "/calendars")
    page.get_by_role("button", name="Remove freeze").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/calendars?done=removed+calendar+freeze")))
    assert site.api.get("/api/v1/calendars/freeze").status_code == 404


def test_a_schedule_page_says_buffer_all_and_the_calendars_it_skips(site: Site) -> None:
    made = site.api.post("/api/v1/calendars", json={"name": "quiet", "cron": "* 0-5 * * *"})
    assert made.status_code == 201, made.text
    site.add("queued", overlap="buffer_all", skip_calendars=["quiet"])
    page = site.page()
    page.goto(site.url + "/schedules/queued")
    said = page.get_by_role("heading", name="Policies").locator("xpath=following-sibling::ul[1]")
    assert "Every occurrence due while a run is open waits its turn" in said.inner_text()
    assert "No occurrence on the calendar(s) quiet (each counted as excluded)." in (
        said.inner_text()
    )


def test_a_canvas_is_made_on_the_form_and_shown_on_its_page(site: Site) -> None:
    """The form takes a canvas in place of a task, refusing a bad one beside its field;
    the schedule's page shows it in a line."""
    quick = {"task": "workers.app.quick", "immutable": True}
    chord = {"subtask_type": "chord", "kwargs": {"header": [quick, quick], "body": quick}}
    page = site.page()
    page.goto(site.url + "/new")
    page.get_by_label("name", exact=True).fill("fan-in")
    page.get_by_label("timer", exact=True).fill("every 1h")
    signature = page.get_by_label("signature", exact=True)
    signature.fill(json.dumps({"subtask_type": "group", "kwargs": {"tasks": []}}))
    page.get_by_role("button", name="Create").click()
    assert (
        page.locator("#e-signature")
        .inner_text()
        .startswith("signature.tasks: got [], expected a list of one or more signatures")
    )
    assert site.api.get("/api/v1/schedules/fan-in").status_code == 404
    page.get_by_label("signature", exact=True).fill(json.dumps(chord))
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(re.escape(site.url + "/schedules/fan-in?done=created")))
    canvas = page.locator("dt", has_text="Canvas").locator("xpath=following-sibling::dd[1]")
    assert canvas.inner_text() == (
        "chord([workers.app.quick, workers.app.quick], workers.app.quick)"
    )
    assert site.api.get("/api/v1/schedules/fan-in").json()["task"] == "workers.app.quick"
