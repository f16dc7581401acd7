"""The dashboard's pages on a database of 1,000,000 schedules and 10,000,000 run records:
how long the server takes to answer each, and what a page weighs in the browser.

1. Seeds a PostgreSQL database of its own as ``bench/web.py`` does (or reuses
   one an earlier ``--keep`` run of either left), and starts ``celery -A
   bench.beat_app bridge serve`` with an admin and a read token.
2. Signs in on ``/login`` with the read token, as a browser would, and keeps
   the session cookie.
3. One client, one request at a time (the time a person waits for a page),
   ``--requests`` of each page after a short warm-up:

   * ``list``: ``/schedules``, the first 100 rows by name;
   * ``list-walk``: the next pages, following each page's "Next page" link
     from a random name prefix;
   * ``list-by-next``: the 100 rows due first (``sort=next``);
   * ``list-failing``: the failing ones (``state=failing``);
   * ``refresh``: the rows alone, as the page's auto-refresh fetches them;
   * ``overview``: ``/``, the counts by health and what needs attention;
   * ``schedule``: the page of one schedule with hundreds of runs;
   Before each request of a page, the baseline: the API's page of the same rows
   (``GET /api/v1/schedules?limit=100`` with the list's prefix, state, sort and
   cursor) with the read token; for the overview and a schedule's page, the
   list's first 100 rows. Each page's ratio is to the baseline requests asked
   beside its own (the machine's pace drifts over minutes; requests side by side
   share it): for a list, the cost of its HTML.

It prints p50, p99 and max of each, the p50 of the baseline beside it and the
ratio of the two, and the weight of the list page with its stylesheet and script
against the issue's targets: the 100-row list in under 200 ms on the
server, a page under 300 KB.

    .venv/bin/python -m bench.dashboard
    .venv/bin/python -m bench.dashboard --schedules 10000 --runs 100000

Exit status: 0 when every request was answered 200; 2 when one was not, or
the run could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import html
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

from bench import SetupError
from bench.harness import DEFAULT_PG_URL, exit_status, percentile, table, workdir
from bench.web import READ_TOKEN, Shape, seeded_database, start_server

#: The issue's targets.
TARGET_LIST = 0.200
TARGET_WEIGHT = 300 * 1024
#: The API's page of the 100 rows the list shows first: the baseline of pages that are no list.
BASELINE_PATH = "/api/v1/schedules?limit=100"
NEXT_PAGE = re.compile(r'<a href="(/schedules\?[^"]*)" rel="next">')
ASSETS = re.compile(r'(?:href|src)="(/static/[^"]+)"')


@dataclass
class Page:
    """One kind of page: its name, the path of its next request, and whether the API's
    request for the same rows is its baseline (a list), or the list's first page is."""

    name: str
    path: Callable[[], str]
    lists: bool = True


def api_twin(path: str) -> str:
    """The API's request for the rows the dashboard's list at ``path`` shows: its prefix,
    state, sort and cursor, 100 rows."""
    query = dict(parse_qsl(urlsplit(path).query))
    query.pop("fragment", None)
    if "q" in query:
        query["prefix"] = query.pop("q")
    state = query.pop("state", None)
    if state:
        query[state] = "true"
    return "/api/v1/schedules?" + urlencode({**query, "limit": "100"})


@dataclass
class Timing:
    name: str
    seconds: list[float]
    size: int
    #: The API page's time asked just before each of these requests (empty: this is it).
    baseline: list[float] = field(default_factory=list)

    def row(self) -> list[str]:
        p50 = percentile(self.seconds, 0.5)
        base = percentile(self.baseline, 0.5) if self.baseline else p50
        return [
            self.name,
            f"{p50 * 1000:.1f}",
            f"{percentile(self.seconds, 0.99) * 1000:.1f}",
            f"{max(self.seconds) * 1000:.1f}",
            f"{base * 1000:.1f}",
            f"{p50 / base:.2f}x",
            f"{self.size / 1024:.1f}",
        ]


def sign_in(http: httpx.Client) -> None:
    """The read token through the sign-in form; the session cookie sent from then on.

    The cookie is ``Secure``, which a client keeps to HTTPS; the bench speaks
    plain HTTP on loopback, so it carries the cookie itself."""
    answer = http.post("/login", data={"token": READ_TOKEN, "next": "/"})
    cookie = answer.cookies.get("bridge_session")
    if answer.status_code != 303 or not cookie:
        raise SetupError(f"sign-in refused: {answer.status_code} {answer.text[:200]}")
    http.headers["Cookie"] = f"bridge_session={cookie}"


class Walk:
    """Pages of the list one after another from a random name prefix, as a person pages."""

    def __init__(self, http: httpx.Client, rng: random.Random, shape: Shape) -> None:
        self.http, self.rng, self.shape = http, rng, shape
        self.following: str | None = None

    def path(self) -> str:
        if self.following is None:
            digits = len(str(self.shape.schedules - 1))
            start = self.rng.randrange(self.shape.schedules)
            # A prefix two digits short of a name: a few hundred to a few thousand match.
            return f"/schedules?q=job-{start:0{digits}d}"[:-2]
        path, self.following = self.following, None
        return path

    def saw(self, body: str) -> None:
        found = NEXT_PAGE.search(body)
        self.following = html.unescape(found.group(1)) if found else None


def busy_schedule(shape: Shape) -> str:
    """A schedule with hundreds of runs: every 100th one is busy in the seed."""
    digits = len(str(shape.schedules - 1))
    return f"/schedules/job-{0:0{digits}d}"


def timed_get(http: httpx.Client, name: str, path: str) -> tuple[float, httpx.Response]:
    began = time.perf_counter()
    answer = http.get(path)
    spent = time.perf_counter() - began
    if answer.status_code != 200:
        raise SetupError(f"{name}: GET {path} answered {answer.status_code}")
    return spent, answer


def time_page(
    http: httpx.Client,
    page: Page,
    requests: int,
    warmup: int,
    seen: Callable[[str], None],
    api: httpx.Client | None = None,
) -> Timing:
    """``requests`` of the page after ``warmup``; each after one of the API's page of the
    same rows when ``api`` is given. The machine's pace drifts by a third over minutes:
    a ratio to a baseline measured minutes apart said as much about the drift as about
    the page, one to a baseline asked alongside each request does not."""
    timing = Timing(page.name, [], 0)
    for index in range(warmup + requests):
        path = page.path()
        if api is not None:
            twin = api_twin(path) if page.lists else BASELINE_PATH
            spent, _ = timed_get(api, "api-baseline", twin)
            if index >= warmup:
                timing.baseline.append(spent)
        spent, answer = timed_get(http, page.name, path)
        seen(answer.text)
        if index >= warmup:
            timing.seconds.append(spent)
            timing.size = max(timing.size, len(answer.content))
    return timing


def ignore(body: str) -> None:
    """What a page that leads nowhere does with its body."""


def page_weight(http: httpx.Client) -> tuple[int, dict[str, int]]:
    """What a browser fetches for the list: its HTML, then each stylesheet and script."""
    body = http.get("/schedules").content
    parts = {"/schedules": len(body)}
    for asset in ASSETS.findall(body.decode()):
        answer = http.get(asset)
        if answer.status_code != 200:
            raise SetupError(f"GET {asset} answered {answer.status_code}")
        parts[asset.split("?")[0]] = len(answer.content)
    return sum(parts.values()), parts


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dashboard",
        description="The dashboard's pages: server time and weight, one client.",
    )
    parser.add_argument("--schedules", type=int, default=1_000_000, help="schedules (1000000)")
    parser.add_argument("--runs", type=int, default=10_000_000, help="run records (10000000)")
    parser.add_argument("--requests", type=int, default=100, help="requests of each page (100)")
    parser.add_argument("--warmup", type=int, default=5, help="requests before measuring (5)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the walks (random)")
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="admin URL of the PostgreSQL server; the run creates and drops a database of its own",
    )
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    parser.add_argument("--reuse", metavar="URL", help="measure on a kept database, unseeded")
    options = parser.parse_args(argv)
    if options.schedules < 1000 or options.runs < options.schedules:
        parser.error("--schedules must be at least 1000, and --runs at least --schedules")
    if options.requests < 1 or options.warmup < 0:
        parser.error("--requests must be positive and --warmup not negative")
    if options.seed is None:
        options.seed = random.randrange(2**32)
    return options


def run(options: argparse.Namespace) -> int:
    rng = random.Random(options.seed)
    print(f"dashboard: {options.requests} requests of each page, one client, seed {options.seed}")
    with workdir("dashboard") as folder, seeded_database(options, folder) as (url, shape):
        server, base, ready = start_server(url, folder, 1)
        try:
            print(f"server: /healthz answered after {ready:.1f}s", flush=True)
            with httpx.Client(base_url=base, timeout=30) as http:
                sign_in(http)
                walk = Walk(http, rng, shape)
                pages = [
                    (Page("list", lambda: "/schedules"), None),
                    (Page("list-walk", walk.path), walk.saw),
                    (Page("list-by-next", lambda: "/schedules?sort=next"), None),
                    (Page("list-failing", lambda: "/schedules?state=failing"), None),
                    (Page("refresh", lambda: "/schedules?fragment=1"), None),
                    (Page("overview", lambda: "/", lists=False), None),
                    (Page("schedule", lambda: busy_schedule(shape), lists=False), None),
                ]
                api = httpx.Client(
                    base_url=base, timeout=30, headers={"Authorization": f"Bearer {READ_TOKEN}"}
                )
                with api:
                    timings = [
                        time_page(http, page, options.requests, options.warmup, seen or ignore, api)
                        for page, seen in pages
                    ]
                    baseline = Timing("api-baseline", [], 0)
                    for timing in timings:
                        baseline.seconds.extend(timing.baseline)
                    baseline.size = len(api.get(BASELINE_PATH).content)
                weight, parts = page_weight(http)
        finally:
            server.stop()
    return report(timings, baseline, weight, parts)


def report(timings: list[Timing], baseline: Timing, weight: int, parts: dict[str, int]) -> int:
    print()
    print(
        table(
            ["page", "p50 ms", "p99 ms", "max ms", "API p50 ms", "/ API p50", "KB"],
            [t.row() for t in [*timings, baseline]],
        )
    )
    listed = timings[0]
    p99 = percentile(listed.seconds, 0.99)
    print()
    print(
        f"the 100-row list: p99 {p99 * 1000:.1f} ms (target under {TARGET_LIST * 1000:.0f} ms):"
        f" {'met' if p99 < TARGET_LIST else 'NOT met'}"
    )
    pieces = ", ".join(f"{name} {size / 1024:.1f} KB" for name, size in parts.items())
    print(
        f"the list page weighs {weight / 1024:.1f} KB ({pieces}; target under"
        f" {TARGET_WEIGHT // 1024} KB): {'met' if weight < TARGET_WEIGHT else 'NOT met'}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    return exit_status(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
