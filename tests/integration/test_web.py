"""The HTTP API, metrics and health checks, against a real ``celery bridge serve`` process.

One server, one beat and one worker run for the whole module on a
PostgreSQL database of its own with Redis; each test names its schedules
apart. The server has an admin and a read token, so that every request is
authorised as a deployment's would be. The client is httpx, from outside.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import (
    Env,
    execute,
    free_port,
    http_client,
    mysql_database,
    postgres_database,
    redis_broker,
    rows,
    stored_time,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_web")]

ADMIN = "admin-token-0123456789abcdef"
READ = "read-token-0123456789abcdef"
QUICK = "workers.app.quick"


class Deployment:
    """The module's server, beat and worker, and HTTP clients for each kind of caller."""

    def __init__(self, env: Env, url: str, beat_metrics: str) -> None:
        self.env = env
        self.url = url
        #: Where the beat serves its own metrics.
        self.beat_metrics = beat_metrics
        self.admin = http_client(url, ADMIN)
        self.reader = http_client(url, READ)
        self.anonymous = http_client(url)

    def create(self, name: str, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "task": QUICK, "timer": "every 1h", **fields}
        response = self.admin.post("/api/v1/schedules", json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def runs(self, name: str, **params: Any) -> list[dict[str, Any]]:
        response = self.reader.get(f"/api/v1/schedules/{name}/runs", params=params)
        assert response.status_code == 200, response.text
        return list(response.json()["items"])

    def run_status(self, run_id: str) -> str:
        return str(self.reader.get(f"/api/v1/runs/{run_id}").json()["status"])

    def change(
        self, path: str, expected: int, method: str = "POST", **request: Any
    ) -> httpx.Response:
        """``method path`` as the admin, sent again while the server answers that the
        database ended it in a conflict (a documented 503: on MariaDB a change may meet
        the workers' and beat's writes in a deadlock); its answer, which must be
        ``expected``."""

        def answered() -> httpx.Response | None:
            answer = self.admin.request(method, path, **request)
            if answer.status_code == 503 and "conflict" in answer.json()["message"]:
                return None
            assert answer.status_code == expected, answer.text
            return answer

        return wait_for(answered, 30, what=f"an answer to {method} {path}")


@pytest.fixture(scope="module", params=["postgres", "mariadb"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A server, a worker and a beat on PostgreSQL, and again on MariaDB."""
    workdir = tmp_path_factory.mktemp("web")
    fresh = postgres_database if request.param == "postgres" else mysql_database
    with fresh() as database_url:
        env = Env(workdir, database_url, redis_broker())
        env.cli("migrate")
        tokens = {"BRIDGE_API_ADMIN_TOKEN": ADMIN, "BRIDGE_API_READ_TOKEN": READ}
        port, beat_port = free_port(), free_port()
        try:
            env.serve(port, **tokens)
            env.start("worker", "-P", "prefork")
            env.start("beat", BRIDGE_BEAT_METRICS_PORT=str(beat_port))
            # Beat writes the app's beat_schedule as it starts, with its own audit entry:
            # the tests begin once it has, so that no entry of theirs is followed by it.
            wait_for(
                lambda: rows(
                    database_url, "SELECT id FROM periodic_task WHERE name = 'config-heartbeat'"
                ),
                90,
                what="beat to sync the app's beat_schedule",
            )
            yield Deployment(
                env, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{beat_port}/metrics"
            )
        finally:
            env.kill_all()


# -- authorisation -------------------------------------------------------------------------


def test_reads_need_a_token_and_changes_the_admin_token(deployment: Deployment) -> None:
    deployment.create("auth-probe")
    anonymous = deployment.anonymous.get("/api/v1/schedules")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    wrong = deployment.anonymous.get(
        "/api/v1/schedules", headers={"Authorization": "Bearer not-the-token-at-all"}
    )
    assert wrong.status_code == 401
    assert deployment.reader.get("/api/v1/schedules/auth-probe").status_code == 200
    refused = deployment.reader.post("/api/v1/schedules/auth-probe/pause", json={"note": "x"})
    assert refused.status_code == 403
    assert deployment.reader.delete("/api/v1/schedules/auth-probe").status_code == 403
    assert deployment.anonymous.get("/metrics").status_code == 401
    # Refused requests wrote nothing: the schedule is still enabled and still there.
    assert deployment.reader.get("/api/v1/schedules/auth-probe").json()["enabled"] is True
    # Probes need no token.
    assert deployment.anonymous.get("/healthz").text == "ok\n"
    assert deployment.anonymous.get("/readyz").json()["ready"] is True
    # As load balancers probe them: HEAD, the same status and no body.
    for probe in ("/healthz", "/readyz"):
        head = deployment.anonymous.head(probe)
        assert (head.status_code, head.content) == (200, b""), probe


def test_the_token_is_checked_before_anything_else_of_the_request(
    deployment: Deployment,
) -> None:
    """On every operation of the API, a caller the token does not allow is told so (401, or
    403 for the read token on a change) before its query or body is judged: it learns
    nothing of the parameters the operation takes. A caller allowed is told of them."""
    deployment.create("auth-first")
    unauthorized = {"error": "unauthorized", "message": "a valid bearer token is required"}
    stand_ins = {
        "{name}": "auth-first",
        "{label}": "none",
        "{run_id}": "none",
        "{incident_id}": "1",
    }
    document = deployment.reader.get("/openapi.json").json()
    operations = [
        (method, path, "requestBody" in operation)
        for path, by_method in document["paths"].items()
        if path.startswith("/api/v1/")
        for method, operation in by_method.items()
    ]
    assert len(operations) >= 26
    for method, path, has_body in operations:
        where = path
        for template, value in stand_ins.items():
            where = where.replace(template, value)
        request = {"params": {"verbose": "1"}, "json": {"bogus": 1} if has_body else None}
        anonymous = deployment.anonymous.request(method, where, **request)
        assert (anonymous.status_code, anonymous.json()) == (401, unauthorized), (method, path)
        wrong = deployment.anonymous.request(
            method, where, headers={"Authorization": "Bearer not-the-token-at-all"}, **request
        )
        assert wrong.status_code == 401, (method, path, wrong.text)
        if method == "get":
            allowed = deployment.reader
        else:
            refused = deployment.reader.request(method, where, **request)
            assert refused.status_code == 403, (method, path, refused.text)
            assert refused.json()["error"] == "forbidden", (method, path)
            allowed = deployment.admin
        told = allowed.request(method, where, **request)
        assert told.status_code == 422, (method, path, told.text)
        assert (told.json()["field"], told.json()["value"]) == ("verbose", "1"), (method, path)
    # Nothing was changed by any of them.
    assert deployment.reader.get("/api/v1/schedules/auth-first").json()["enabled"] is True
    # /metrics is not an operation of the API: a scraper's own parameters are left alone.
    assert deployment.anonymous.get("/metrics", params={"verbose": "1"}).status_code == 401
    assert deployment.reader.get("/metrics", params={"verbose": "1"}).status_code == 200


def test_without_a_token_only_loopback_is_served(tmp_path: Path, pg_url: str) -> None:
    env = Env(tmp_path, pg_url, redis_broker())
    env.cli("migrate")
    refused = env.cli("serve", "--host", "0.0.0.0", "--port", str(free_port()), check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "Error: host: got '0.0.0.0', expected a loopback address (127.0.0.1, ::1, localhost) "
        "while no API token is set; set bridge_api_admin_token (BRIDGE_API_ADMIN_TOKEN) "
        "and/or bridge_api_read_token to serve other hosts"
    ]
    port = free_port()
    try:
        env.serve(port)
        base = f"http://127.0.0.1:{port}"
        local = httpx.post(
            f"{base}/api/v1/schedules",
            json={"name": "local", "task": QUICK, "timer": "every 1h"},
        )
        assert local.status_code == 201
        # Another site's page that resolves its name to 127.0.0.1 gets nothing.
        rebound = httpx.get(f"{base}/api/v1/schedules", headers={"Host": "evil.example"})
        assert rebound.status_code == 403
        # A browser sending a change from another site is refused, and nothing is sent.
        forged = httpx.post(
            f"{base}/api/v1/schedules/local/run", headers={"Origin": "https://evil.example"}
        )
        assert forged.status_code == 403
        assert httpx.get(f"{base}/api/v1/schedules/local/runs").json()["items"] == []
    finally:
        env.kill_all()


def test_a_short_token_is_refused_without_repeating_it(tmp_path: Path, pg_url: str) -> None:
    env = Env(tmp_path, pg_url, redis_broker())
    result = env.cli("serve", "--port", "1", check=False, BRIDGE_API_ADMIN_TOKEN="hunter2")
    assert result.returncode == 1
    assert "hunter2" not in result.stderr + result.stdout
    assert "bridge_api_admin_token: got '<hidden>', expected a token of at least 16" in (
        result.stderr
    )


# -- schedules -----------------------------------------------------------------------------


def test_create_read_edit_and_delete(deployment: Deployment) -> None:
    created = deployment.create("crud", timer="0 9 * * *", timezone="Europe/Paris", labels="a,b")
    assert (created["timer"], created["timezone"], created["labels"]) == (
        "0 9 * * *",
        "Europe/Paris",
        ["a", "b"],
    )
    next_run = datetime.fromisoformat(created["nextrun"]).astimezone(
        datetime.now(UTC).astimezone().tzinfo
    )
    assert next_run > datetime.now(UTC)
    edited = deployment.admin.patch(
        "/api/v1/schedules/crud", json={"timer": "30 9 * * *", "overlap": "allow", "labels": []}
    )
    assert edited.status_code == 200, edited.text
    assert (edited.json()["timer"], edited.json()["overlap"], edited.json()["labels"]) == (
        "30 9 * * *",
        "allow",
        [],
    )
    assert deployment.admin.delete("/api/v1/schedules/crud").status_code == 204
    gone = deployment.reader.get("/api/v1/schedules/crud")
    assert gone.status_code == 404
    assert gone.json() == {"error": "not_found", "message": "name: no schedule named 'crud'"}


@pytest.mark.parametrize(
    ("body", "field", "value"),
    [
        ({"timer": "*/5 * * *"}, "timer", "*/5 * * *"),
        ({"remaining": -1}, "remaining", -1),
        ({"remaining": 99999999999999999999999}, "remaining", 99999999999999999999999),
        ({"max_attempts": "many"}, "max_attempts", "many"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        # Yes-or-no fields take JSON's true or false, and nothing Python finds true.
        ({"allow_unknown_task": "yes"}, "allow_unknown_task", "yes"),
        ({"allow_unknown_task": 1}, "allow_unknown_task", 1),
        ({"enabled": "no"}, "enabled", "no"),
        *(
            ({"timezone": zone}, "timezone", zone)
            for zone in ("", "localtime", "Factory", "posix/Europe/Paris", "right/UTC")
        ),
        ({"task": "workers.app.nope"}, "task", "workers.app.nope"),
        ({"labels": ["has space"]}, "labels", ["has space"]),
        ({"kwargs": "[1, 2]"}, "kwargs", "[1, 2]"),
        ({"timr": "every 1h"}, "timr", "every 1h"),
        ({"name": " padded"}, "name", " padded"),
        ({"signature": {"task": "workers.app.nope"}}, "signature", "workers.app.nope"),
        ({"signature": {"subtask_type": "group", "kwargs": {"tasks": []}}}, "signature.tasks", []),
        ({"signature": {"task": QUICK}, "args": [1]}, "args", [1]),
    ],
)
def test_a_bad_value_is_refused_naming_it_and_nothing_is_written(
    deployment: Deployment, body: dict[str, Any], field: str, value: Any
) -> None:
    before = deployment.reader.get("/api/v1/audit", params={"limit": 1}).json()["items"]
    fields = {"name": "refused", "task": QUICK, "timer": "every 1h", **body}
    response = deployment.admin.post("/api/v1/schedules", json=fields)
    assert response.status_code == 422, response.text
    refusal = response.json()
    assert (refusal["error"], refusal["field"], refusal["value"]) == ("invalid", field, value)
    assert refusal["expected"]
    assert refusal["message"].startswith(f"{field}: got ")
    assert deployment.reader.get("/api/v1/schedules/refused").status_code == 404
    after = deployment.reader.get("/api/v1/audit", params={"limit": 1}).json()["items"]
    assert after == before


def test_malformed_bodies_and_queries_are_refused_in_one_shape(deployment: Deployment) -> None:
    not_json = deployment.admin.post(
        "/api/v1/schedules", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400
    assert set(not_json.json()) == {"error", "field", "expected", "message"}
    assert (not_json.json()["error"], not_json.json()["field"]) == ("malformed", "body")
    # Only to a caller the token allows: the others learn nothing of what a body should be.
    for client, status in ((deployment.anonymous, 401), (deployment.reader, 403)):
        refused = client.post(
            "/api/v1/schedules", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert refused.status_code == status, refused.text
        assert refused.json()["error"] in {"unauthorized", "forbidden"}
    # A JSON body under another Content-Type, or none at all: malformed, said in words.
    body = b'{"name": "typed", "task": "workers.app.quick", "timer": "every 1h"}'
    for content, kind in ((body, "text/plain"), (body, None), (b"", None)):
        headers = {} if kind is None else {"content-type": kind}
        sent = deployment.admin.post("/api/v1/schedules", content=content, headers=headers)
        answer = sent.json()
        assert (sent.status_code, answer["error"], answer["field"]) == (400, "malformed", "body")
        assert "application/json" in answer["message"] and "b'" not in answer["message"]
    assert deployment.reader.get("/api/v1/schedules/typed").status_code == 404
    bad_limit = deployment.reader.get("/api/v1/schedules", params={"limit": "lots"})
    assert bad_limit.status_code == 422
    assert bad_limit.json()["field"] == "limit"
    # A parameter the operation does not take is refused like a field a body does not know,
    # rather than dropped (the list would come back unfiltered).
    for path, params in (
        ("/api/v1/schedules", {"pasued": "true"}),
        ("/api/v1/runs", {"limit": "5", "staus": "FAILURE"}),
        ("/api/v1/schedules/auth-probe", {"verbose": "1"}),
    ):
        unknown = deployment.reader.get(path, params=params)
        assert unknown.status_code == 422, (path, unknown.text)
        refusal = unknown.json()
        name = next(key for key in params if key != "limit")
        assert (refusal["error"], refusal["field"], refusal["value"]) == (
            "invalid",
            name,
            params[name],
        )
        assert refusal["message"].startswith(f"{name}: got ")
    # Yes-or-no filters are true or false, as in a body.
    loose = deployment.reader.get("/api/v1/schedules", params={"paused": "yes"})
    assert (loose.status_code, loose.json()["field"]) == (422, "paused")
    bad_cursor = deployment.reader.get("/api/v1/schedules", params={"cursor": "%%%"})
    assert (bad_cursor.status_code, bad_cursor.json()["field"]) == (422, "cursor")
    bad_flag = deployment.reader.get("/api/v1/schedules", params={"paused": "maybe"})
    assert (bad_flag.status_code, bad_flag.json()["field"]) == (422, "paused")
    empty_edit = deployment.admin.patch("/api/v1/schedules/nothing-here", json={})
    assert empty_edit.status_code == 422


def test_a_canvas_is_created_run_and_read_over_http(deployment: Deployment) -> None:
    """A schedule sending a chain, made with no task: its task is the chain's first, and a
    run of it is one run that ends with the chain's last task."""
    chain = {
        "subtask_type": "chain",
        "kwargs": {"tasks": [
            {"task": QUICK, "kwargs": {"x": 1, "y": 1}, "immutable": True},
            {"task": QUICK, "kwargs": {"x": 2, "y": 3}, "immutable": True},
        ]},
    }  # fmt: skip
    body = {"name": "chained", "timer": "every 1h", "signature": chain}
    made = deployment.admin.post("/api/v1/schedules", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["task"] == QUICK
    assert [t["kwargs"] for t in made.json()["signature"]["kwargs"]["tasks"]] == [
        {"x": 1, "y": 1},
        {"x": 2, "y": 3},
    ]
    sent = deployment.admin.post("/api/v1/schedules/chained/run", json={})
    assert sent.status_code in (200, 201, 202), sent.text

    def ended() -> dict[str, Any] | None:
        runs = deployment.runs("chained")
        return runs[0] if runs and runs[0]["status"] == "SUCCESS" else None

    run = wait_for(ended, 60, what="the chain's run to succeed")
    assert run["id"] == sent.json()["id"] and run["result"] == "5"
    assert len(deployment.runs("chained")) == 1


def test_a_taken_name_is_a_conflict(deployment: Deployment) -> None:
    deployment.create("taken")
    again = deployment.admin.post(
        "/api/v1/schedules", json={"name": "taken", "task": QUICK, "timer": "every 5m"}
    )
    assert again.status_code == 409
    assert again.json()["field"] == "name"
    assert deployment.reader.get("/api/v1/schedules/taken").json()["timer"] == "every 1h"


def test_a_body_over_the_limit_is_refused(deployment: Deployment) -> None:
    huge = {"name": "huge", "task": QUICK, "timer": "every 1h", "kwargs": {"x": "y" * 2_000_000}}
    response = deployment.admin.post("/api/v1/schedules", json=huge)
    assert response.status_code == 413
    text = json.dumps(huge).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body streams in
        for start in range(0, len(text), 65536):
            yield text[start : start + 65536]

    streamed = deployment.admin.post(
        "/api/v1/schedules", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert deployment.reader.get("/api/v1/schedules/huge").status_code == 404
    small = json.dumps({"name": "streamed", "task": QUICK, "timer": "every 1h"}).encode()
    fits = deployment.admin.post(
        "/api/v1/schedules",
        content=iter([small[:10], small[10:]]),
        headers={"Content-Type": "application/json"},
    )
    assert fits.status_code == 201


def test_notes_are_checked_like_every_value(deployment: Deployment) -> None:
    deployment.create("noted")
    bad = deployment.admin.post("/api/v1/schedules/noted/pause", json={"note": {"x": 1}})
    assert (bad.status_code, bad.json()["field"]) == (422, "note")
    reserved = deployment.admin.post(
        "/api/v1/schedules", json={"name": "team/runs", "task": QUICK, "timer": "every 1h"}
    )
    assert (reserved.status_code, reserved.json()["field"]) == (422, "name")


def test_pages_filters_and_sorting(deployment: Deployment) -> None:
    for index in range(25):
        labels = ["paging", "even"] if index % 2 == 0 else ["paging"]
        deployment.create(f"page-{index:02d}", labels=labels, timer=f"{index} 3 * * *")
    names: list[str] = []
    cursor = None
    while True:
        params = {"prefix": "page-", "limit": 10, **({"cursor": cursor} if cursor else {})}
        page = deployment.reader.get("/api/v1/schedules", params=params).json()
        names += [item["name"] for item in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert names == [f"page-{index:02d}" for index in range(25)]
    even = deployment.reader.get("/api/v1/schedules", params={"label": "even", "limit": 100}).json()
    assert [item["name"] for item in even["items"]] == [f"page-{i:02d}" for i in range(0, 25, 2)]
    by_next = deployment.reader.get(
        "/api/v1/schedules", params={"prefix": "page-", "sort": "next", "limit": 3}
    ).json()
    times = [item["nextrun"] for item in by_next["items"]]
    assert times == sorted(times)
    assert by_next["next"] is not None
    paused = deployment.admin.post("/api/v1/labels/even/pause", json={"note": "maintenance"})
    assert sorted(paused.json()["schedules"]) == [f"page-{i:02d}" for i in range(0, 25, 2)]
    listed = deployment.reader.get(
        "/api/v1/schedules", params={"prefix": "page-", "paused": "true", "limit": 100}
    ).json()
    assert {item["name"] for item in listed["items"]} == set(paused.json()["schedules"])
    assert {item["note"] for item in listed["items"]} == {"maintenance"}
    resumed = deployment.admin.post("/api/v1/labels/even/resume", json={"from": "now"})
    assert sorted(resumed.json()["schedules"]) == sorted(paused.json()["schedules"])


def test_pause_resume_and_next_fire_times(deployment: Deployment) -> None:
    deployment.create("paused-one", timer="0 12 * * *", timezone="UTC")
    paused = deployment.admin.post("/api/v1/schedules/paused-one/pause", json={"note": "deploy"})
    assert (paused.json()["enabled"], paused.json()["note"]) == (False, "deploy")
    again = deployment.admin.post("/api/v1/schedules/paused-one/pause")
    assert again.status_code == 409
    upcoming = deployment.reader.get("/api/v1/schedules/paused-one/next").json()
    assert upcoming == {"runs": [], "end": "paused: deploy"}
    bad_from = deployment.admin.post("/api/v1/schedules/paused-one/resume", json={"from": "then"})
    assert (bad_from.status_code, bad_from.json()["field"]) == (422, "from")
    resumed = deployment.admin.post("/api/v1/schedules/paused-one/resume", json={"from": "catchup"})
    assert resumed.json()["enabled"] is True
    upcoming = deployment.reader.get(
        "/api/v1/schedules/paused-one/next", params={"count": 3}
    ).json()
    fire_times = [datetime.fromisoformat(run["fire_at"]) for run in upcoming["runs"]]
    assert [moment.hour for moment in fire_times] == [12, 12, 12]
    assert [b - a for a, b in pairwise(fire_times)] == [timedelta(days=1)] * 2


# -- runs, with the real beat and worker -------------------------------------------------------


def test_beat_fires_and_the_runs_are_listed_newest_first(deployment: Deployment) -> None:
    deployment.create("fired", timer="every 1s", overlap="allow")
    wait_for(
        lambda: len([r for r in deployment.runs("fired") if r["status"] == "SUCCESS"]) >= 3,
        60,
        what="three successful runs",
    )
    runs = deployment.runs("fired", status="SUCCESS")
    plans = [run["plan_time"] for run in runs]
    assert plans == sorted(plans, reverse=True)
    assert {run["schedule"] for run in runs} == {"fired"}
    assert all(run["worker"] for run in runs)
    page = deployment.reader.get(
        "/api/v1/runs", params={"schedule": "fired", "limit": 2, "trigger": "scheduled"}
    ).json()
    assert len(page["items"]) == 2 and page["next"]
    following = deployment.reader.get(
        "/api/v1/runs", params={"schedule": "fired", "limit": 2, "cursor": page["next"]}
    ).json()
    assert following["items"][0]["plan_time"] < page["items"][-1]["plan_time"]
    since = page["items"][0]["plan_time"]
    recent = deployment.reader.get("/api/v1/runs", params={"since": since}).json()["items"]
    assert all(run["plan_time"] >= since for run in recent)
    deployment.admin.post("/api/v1/schedules/fired/pause")
    stats = deployment.reader.get("/api/v1/schedules/fired/stats", params={"window": "1h"}).json()
    assert stats["counts"]["SUCCESS"] >= 3
    assert stats["success_rate"] == 1.0
    assert stats["duration"]["p50"] is not None and stats["duration"]["max"] >= 0
    assert stats["totals"]["SUCCESS"] >= 3


def test_run_now_cancel_and_retry(deployment: Deployment) -> None:
    deployment.create("slow-one", task="workers.app.slow", kwargs={"seconds": 30})
    run = deployment.admin.post("/api/v1/schedules/slow-one/run").json()
    assert (run["trigger"], run["schedule"]) == ("manual", "slow-one")
    wait_for(lambda: deployment.run_status(run["id"]) == "STARTED", 30, what="the run to start")
    skipped = deployment.admin.post("/api/v1/schedules/slow-one/run", json={"overlap": "skip"})
    assert skipped.status_code == 409
    assert skipped.json()["run"] == run["id"]
    cancelled = deployment.admin.post(
        f"/api/v1/runs/{run['id']}/cancel",
        json={"terminate": True, "note": "stuck"},
        headers={"X-Bridge-Actor": "Älice ✓".encode()},  # sent as UTF-8
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "REVOKED"
    assert cancelled.json()["error"] == "cancelled by http:admin@127.0.0.1 (Älice ✓): stuck"
    again = deployment.admin.post(f"/api/v1/runs/{run['id']}/cancel")
    assert again.status_code == 409
    # The worker ended the task: the slot is free well before its 30 s.
    probe = deployment.admin.post("/api/v1/schedules/slow-one/run", json={"overlap": "skip"})
    assert probe.status_code == 201
    deployment.admin.post(f"/api/v1/runs/{probe.json()['id']}/cancel", json={"terminate": True})

    deployment.create("failing", task="workers.app.fail")
    failed = deployment.admin.post("/api/v1/schedules/failing/run").json()
    wait_for(lambda: deployment.run_status(failed["id"]) == "FAILURE", 30, what="a failure")
    detail = deployment.reader.get(f"/api/v1/runs/{failed['id']}").json()
    assert "RuntimeError: this task always fails" in detail["error"]
    assert "Traceback" in detail["traceback"]
    retried = deployment.admin.post(f"/api/v1/runs/{failed['id']}/retry")
    assert retried.status_code == 201, retried.text
    retry = retried.json()
    assert (retry["attempt"], retry["plan_time"]) == (2, failed["plan_time"])
    twice = deployment.admin.post(f"/api/v1/runs/{failed['id']}/retry")
    assert twice.status_code == 409
    wait_for(lambda: deployment.run_status(retry["id"]) == "FAILURE", 30, what="the retry to end")
    # The retry is listed above the attempt it replaced, on every listing of runs.
    everyone = deployment.reader.get("/api/v1/runs", params={"schedule": "failing"}).json()
    for listed in (deployment.runs("failing"), everyone["items"]):
        assert [run["id"] for run in listed] == [retry["id"], failed["id"]]
    history = deployment.env.cli("history", "failing", "--json")
    assert [run["id"] for run in json.loads(history.stdout)] == [retry["id"], failed["id"]]
    # A page that ends between the two attempts goes on with the replaced one.
    first = deployment.reader.get("/api/v1/schedules/failing/runs", params={"limit": 1}).json()
    rest = deployment.reader.get(
        "/api/v1/schedules/failing/runs", params={"limit": 1, "cursor": first["next"]}
    ).json()
    assert [first["items"][0]["id"], rest["items"][0]["id"]] == [retry["id"], failed["id"]]
    unknown = deployment.reader.get("/api/v1/runs/no-such-run")
    assert unknown.status_code == 404


def test_backfill_sends_each_occurrence_once(deployment: Deployment) -> None:
    deployment.create("backfilled", timer="*/10 * * * *")
    now = datetime.now(UTC)
    end = now.replace(minute=now.minute // 10 * 10, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(minutes=40)
    body = {"from": start.isoformat(), "to": end.isoformat()}
    path = "/api/v1/schedules/backfilled/backfill"
    first = deployment.change(path, 201, json=body).json()
    assert (len(first["created"]), first["existing"]) == (5, 0)
    assert {run["schedule"] for run in first["created"]} == {"backfilled"}
    second = deployment.change(path, 201, json=body).json()
    assert (len(second["created"]), second["existing"]) == (0, 5)
    wait_for(
        lambda: len(deployment.runs("backfilled", status="SUCCESS", trigger="backfill")) == 5,
        60,
        what="the backfilled runs",
    )


def test_calendars_are_made_read_and_skipped_over_http(deployment: Deployment) -> None:
    """A calendar made, refused when bad or taken, skipped by a schedule (its ``next`` and
    a backfill leave the calendar's days out) and removed once no schedule skips it."""
    calendars = "/api/v1/calendars"
    dates = ["2026-03-02", "2026-03-04"]  # a Monday and a Wednesday
    made = deployment.admin.post(calendars, json={"name": "closed", "dates": dates})
    assert made.status_code == 201, made.text
    assert made.json() | {"created_at": None, "updated_at": None} == {
        "name": "closed",
        "kind": "dates",
        "dates": dates,
        "timezone": "UTC",
        "schedules": [],
        "created_at": None,
        "updated_at": None,
    }
    taken = deployment.admin.post(calendars, json={"name": "closed", "cron": "* * * * *"})
    assert (taken.status_code, taken.json()["error"], taken.json()["field"]) == (
        409, "conflict", "name",
    )  # fmt: skip
    for body, field in (
        ({"name": "bad", "dates": ["2026-02-30"]}, "dates"),
        ({"name": "bad", "ranges": "2026-03-02T04:00/2026-03-02T02:00"}, "ranges"),
        ({"name": "bad", "cron": "every 1h"}, "cron"),
        ({"name": "bad"}, "dates"),
        ({"name": "bad,name", "dates": dates}, "name"),
        ({"name": "bad", "dates": dates, "timezone": "Mars/Base"}, "timezone"),
    ):
        refused = deployment.admin.post(calendars, json=body)
        assert (refused.status_code, refused.json()["field"]) == (422, field), refused.text
    assert deployment.reader.post(calendars, json={"name": "x", "dates": dates}).status_code == 403
    listed = [c["name"] for c in deployment.reader.get(calendars).json()["items"]]
    assert listed == ["closed"]

    unknown = deployment.admin.post(
        "/api/v1/schedules",
        json={"name": "daily-cal", "task": QUICK, "timer": "0 6 * * *", "skip_calendars": "shut"},
    )
    assert (unknown.status_code, unknown.json()["field"]) == (422, "skip_calendars")
    made_schedule = deployment.create("daily-cal", timer="0 6 * * *", skip_calendars=["closed"])
    assert made_schedule["skip_calendars"] == ["closed"]
    assert deployment.reader.get(f"{calendars}/closed").json()["schedules"] == ["daily-cal"]
    body = {"from": "2026-03-01T00:00:00+00:00", "to": "2026-03-05T23:59:00+00:00"}
    filled = deployment.change("/api/v1/schedules/daily-cal/backfill", 201, json=body).json()
    assert [run["plan_time"][:10] for run in filled["created"]] == [
        "2026-03-01", "2026-03-03", "2026-03-05",
    ]  # fmt: skip
    assert filled["excluded"] == 2
    in_use = deployment.admin.delete(f"{calendars}/closed")
    assert (in_use.status_code, in_use.json()["error"]) == (409, "conflict")
    assert "daily-cal" in in_use.json()["message"]

    # Every weekday but Saturday and Sunday excluded: next gives the weekends only.
    weekdays = {"name": "weekdays", "cron": "* * * * mon-fri"}
    assert deployment.admin.post(calendars, json=weekdays).status_code == 201
    edited = deployment.admin.patch(
        "/api/v1/schedules/daily-cal", json={"skip_calendars": ["weekdays"]}
    )
    assert edited.status_code == 200, edited.text
    upcoming = deployment.reader.get("/api/v1/schedules/daily-cal/next", params={"count": 4})
    days = {datetime.fromisoformat(run["occurrence"]).weekday() for run in upcoming.json()["runs"]}
    assert days == {5, 6}
    assert deployment.admin.delete(f"{calendars}/closed").status_code == 204
    gone = deployment.reader.get(f"{calendars}/closed")
    assert (gone.status_code, gone.json()["error"]) == (404, "not_found")
    trail = deployment.reader.get("/api/v1/audit", params={"limit": 10}).json()["items"]
    actions = [entry["action"] for entry in trail]
    assert actions.count("save calendar") == 2 and actions.count("remove calendar") == 1


# -- the scheduler ---------------------------------------------------------------------------


def test_instances_say_who_ticks_and_works(deployment: Deployment) -> None:
    def seen() -> dict[str, Any]:
        found: dict[str, Any] = deployment.reader.get("/api/v1/instances").json()
        return found if found["instances"] and found["workers"] else {}

    status = wait_for(seen, 30, what="a beat and a worker heartbeat")
    assert status["alive"] is True
    assert status["instances"][0]["heartbeat_age"] < 10
    assert status["workers"][0]["name"].startswith("worker-")


def test_every_change_is_in_the_audit_log(deployment: Deployment) -> None:
    deployment.create("audited")
    deployment.admin.patch(
        "/api/v1/schedules/audited", json={"jitter": "5s"}, headers={"X-Bridge-Actor": "bob"}
    )
    deployment.env.cli("pause", "audited", "--note", "from the shell")
    deployment.admin.delete("/api/v1/schedules/audited")
    trail = deployment.reader.get("/api/v1/schedules/audited/audit").json()["items"]
    assert [entry["action"] for entry in trail] == ["delete", "pause", "edit", "create"]
    delete, pause, edit, create = trail
    assert edit["actor"] == "http:admin@127.0.0.1 (bob)"
    assert (edit["before"], edit["after"]) == ({"jitter": 0.0}, {"jitter": 5.0})
    assert pause["actor"].startswith("cli:")
    assert pause["after"] == {"enabled": False, "note": "from the shell"}
    assert create["after"]["timer"] == "every 1h"
    assert delete["before"]["note"] == "from the shell"


def test_a_silence_is_audited_when_it_was_said(deployment: Deployment) -> None:
    """A silence leaves the row's ``updated_at`` (the definition did not change): its audit
    entry still carries the time of the request, not the row's last edit."""
    deployment.create("silenced-later")
    url = deployment.env.database_url
    execute(
        url,
        "UPDATE periodic_task SET updated_at = :at WHERE name = 'silenced-later'",
        at=stored_time(url, datetime.now(UTC) - timedelta(days=3)),
    )
    before = datetime.now(UTC)
    deployment.admin.post("/api/v1/schedules/silenced-later/silence", json={"for": "1h"})
    deployment.admin.delete("/api/v1/schedules/silenced-later/silence")
    trail = deployment.reader.get("/api/v1/schedules/silenced-later/audit").json()["items"]
    assert [entry["action"] for entry in trail] == ["unsilence", "silence", "create"]
    for said in trail[:2]:
        assert before - timedelta(seconds=1) <= datetime.fromisoformat(said["at"])
        assert datetime.fromisoformat(said["at"]) <= datetime.now(UTC)


def test_metrics_parse_and_show_each_schedule(deployment: Deployment) -> None:
    deployment.create("measured", timer="every 1s", overlap="allow")
    wait_for(
        lambda: any(r["status"] == "SUCCESS" for r in deployment.runs("measured")),
        60,
        what="a successful run",
    )
    deployment.admin.post("/api/v1/schedules/measured/pause")
    measured = (("schedule", "measured"),)
    families: dict[str, Any] = {}
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def scraped() -> bool:
        # A scrape answers from a reading up to 2 s old (docs/http.md): one taken before
        # the pause, on a loaded machine, says the schedule is not paused yet.
        text = deployment.reader.get("/metrics").text
        families.update({family.name: family for family in text_string_to_metric_families(text)})
        samples.update(
            {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in families.values()
                for sample in family.samples
            }
        )
        return samples.get(("bridge_schedule_paused", measured)) == 1.0

    wait_for(scraped, 30, interval=0.5, what="a scrape that shows the schedule paused")
    assert (
        samples[("bridge_schedule_runs_total", (("schedule", "measured"), ("status", "SUCCESS")))]
        >= 1
    )
    assert samples[("bridge_schedule_last_success_timestamp_seconds", measured)] > time.time() - 120
    info = next(
        s
        for s in families["bridge_schedule_info"].samples
        if s.labels.get("schedule") == "measured"
    )
    assert (info.labels["timer"], info.labels["task"]) == ("every 1s", QUICK)
    assert samples[("bridge_up", ())] == 1.0
    assert samples[("bridge_runs_total", (("status", "SUCCESS"),))] >= 1
    assert samples[("bridge_schedules", (("state", "paused"),))] >= 1


def test_metrics_past_the_cap_show_only_totals(tmp_path: Path, pg_url: str) -> None:
    env = Env(tmp_path, pg_url, redis_broker())
    env.cli("migrate")
    for name in ("a", "b", "c"):
        env.cli("add", name, "--task", QUICK, "--timer", "every 1h")
    port = free_port()
    try:
        env.serve(port, BRIDGE_METRICS_MAX_SCHEDULES="2")
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        env.kill_all()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    shown = {sample.labels["schedule"] for sample in families["bridge_schedule_enabled"].samples}
    assert shown == {"a", "b"}
    enabled = next(
        s for s in families["bridge_schedules"].samples if s.labels["state"] == "enabled"
    )
    assert enabled.value == 3
    assert families["bridge_metrics_schedules_shown"].samples[0].value == 2


def test_readiness_follows_the_schema_and_docs_are_served(
    deployment: Deployment, tmp_path: Path
) -> None:
    document = deployment.anonymous.get("/openapi.json").json()
    assert {"/api/v1/schedules", "/api/v1/runs/{run_id}/cancel"} <= set(document["paths"])
    page = deployment.anonymous.get("/docs").text
    assert "/docs/static/swagger-ui-bundle.js" in page and "https://" not in page
    assert deployment.anonymous.get("/docs/static/swagger-ui-bundle.js").status_code == 200
    with postgres_database() as fresh:
        env = Env(tmp_path, fresh, redis_broker())
        result = env.cli("serve", "--port", str(free_port()), check=False)
        assert result.returncode == 1
        assert "run `celery -A APP bridge migrate`" in result.stderr


def test_bridge_health_is_a_probe_for_beat(
    deployment: Deployment, tmp_path: Path, pg_url: str
) -> None:
    healthy = deployment.env.cli("health")
    assert healthy.stdout.startswith("ok: schema ")
    env = Env(tmp_path, pg_url, redis_broker())
    behind = env.cli("health", check=False)
    assert behind.returncode == 1
    assert "unhealthy: schema: database " in behind.stderr
    assert "has no bridge tables" in behind.stderr
    env.cli("migrate")
    silent = env.cli("health", "--json", check=False)
    assert silent.returncode == 1
    assert '"alive": false' in silent.stdout
    assert rows(pg_url, "SELECT count(*) FROM beat_instance") == [(0,)]


def test_beat_serves_its_own_metrics(deployment: Deployment) -> None:
    deployment.create("beat-measured", timer="every 1s", overlap="allow")

    def published() -> dict[str, float]:
        try:
            text = httpx.get(deployment.beat_metrics, timeout=5).text
        except httpx.HTTPError:
            return {}
        samples = {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if not sample.labels or sample.labels.get("le") is None
        }
        return samples if samples.get("bridge_beat_fire_lateness_seconds_count", 0) >= 2 else {}

    samples = wait_for(published, 60, what="beat's metrics of two published runs")
    deployment.admin.post("/api/v1/schedules/beat-measured/pause")
    assert samples["bridge_beat_tick_seconds_count"] >= 2
    assert samples["bridge_beat_claimed_rows_sum"] >= 2
    # A run goes out well within a second of its row falling due on an idle machine.
    assert (
        samples["bridge_beat_fire_lateness_seconds_sum"]
        / samples["bridge_beat_fire_lateness_seconds_count"]
        < 5
    )


def test_a_one_shot_that_ran_is_finished_on_every_surface(deployment: Deployment) -> None:
    at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    deployment.create("once", timer=f"at {at.isoformat()}")
    deployment.create("held-back")
    deployment.admin.post("/api/v1/schedules/held-back/pause", json={"note": "not yet"})
    done = wait_for(
        lambda: (
            (s := deployment.reader.get("/api/v1/schedules/once").json())["health"] == "finished"
            and s
        ),
        60,
        what="the one-shot to run and finish",
    )
    assert (done["enabled"], done["broken"]) == (False, False)

    def names(**params: str) -> set[str]:
        page = deployment.reader.get("/api/v1/schedules", params={**params, "limit": "1000"})
        return {schedule["name"] for schedule in page.json()["items"]}

    assert "once" in names(finished="true") and "held-back" not in names(finished="true")
    assert "held-back" in names(paused="true") and "once" not in names(paused="true")
    listed = json.loads(deployment.env.cli("ls", "--state", "finished", "--json").stdout)
    assert [(s["name"], s["health"]) for s in listed] == [("once", "finished")]
    table = deployment.env.cli("ls", "--prefix", "once").stdout
    assert "finished" in table and "paused" not in table
    # One reading of /metrics serves the scrapes of the next 2 s (other tests scrape too).
    finished = 'bridge_schedule_health{schedule="once",state="finished"} 1.0'

    def scraped() -> str:
        text = deployment.reader.get("/metrics").text
        return text if finished in text else ""

    text = wait_for(scraped, 10, what="a scrape read after the one-shot finished")
    assert 'bridge_schedule_finished{schedule="once"} 1.0' in text
    assert 'bridge_schedule_paused{schedule="once"} 0.0' in text
    assert 'bridge_schedule_paused{schedule="held-back"} 1.0' in text


def test_a_missed_incident_says_what_passed_the_occurrences_over(deployment: Deployment) -> None:
    """Catch-up latest has no window: its incident says it ran only the most recent."""
    created = deployment.create("caught-up", catchup="latest")
    url = deployment.env.database_url
    behind = stored_time(url, datetime.fromisoformat(created["anchor"]) - timedelta(hours=3))
    execute(
        url,
        "UPDATE periodic_task SET next_occurrence = :t, nextrun = :t WHERE name = 'caught-up'",
        t=behind,
    )

    def incident() -> dict[str, Any] | None:
        # The watchdog may find it late first, before beat fires it: that is another incident.
        page = deployment.reader.get("/api/v1/incidents", params={"limit": "1000"}).json()
        found = [
            i for i in page["items"] if i["schedule_name"] == "caught-up" and i["kind"] == "missed"
        ]
        return found[0] if found else None

    opened = wait_for(incident, 60, what="the missed incident")
    assert opened["kind"] == "missed"
    assert opened["message"] == (
        "3 occurrence(s) were not run: catch-up latest runs only the most recent of those due"
    )
    assert "window" not in opened["message"]


def test_health_incidents_silence_and_prune(deployment: Deployment) -> None:
    deployment.create("web-failing", task="workers.app.fail", timer="every 1s", overlap="allow")

    def incident() -> dict[str, Any] | None:
        page = deployment.reader.get("/api/v1/incidents", params={"open": "true"}).json()
        found = [
            i
            for i in page["items"]
            if i["schedule_name"] == "web-failing" and i["kind"] == "failing"
        ]
        return found[0] if found else None

    opened = wait_for(incident, 60, what="the failing incident")
    assert opened["kind"] == "failing" and opened["open"] is True

    def failures_told() -> int:
        told = re.fullmatch(r"its last (\d+) occurrences? failed", (incident() or {})["message"])
        return int(told.group(1)) if told else 0

    # The message keeps count as the failures go on, rather than say 1 after five.
    wait_for(lambda: failures_told() >= 3, 60, what="the incident to count three failures")
    assert deployment.reader.get("/api/v1/schedules/web-failing").json()["health"] == "failing"
    # Changes of a schedule failing every second: on MariaDB they may meet a deadlock.
    acked = deployment.change(f"/api/v1/incidents/{opened['id']}/acknowledge", 200)
    assert acked.json()["acknowledged_by"] == "http:admin@127.0.0.1"
    again = deployment.change(f"/api/v1/incidents/{opened['id']}/acknowledge", 200)
    assert again.json()["acknowledged_at"] == acked.json()["acknowledged_at"]
    trail = deployment.reader.get("/api/v1/schedules/web-failing/audit").json()["items"]
    acks = [entry for entry in trail if entry["action"] == "acknowledge"]
    assert [(a["actor"], a["after"]) for a in acks] == [
        ("http:admin@127.0.0.1", {"incident": opened["id"], "kind": "failing"})
    ]
    assert (
        deployment.reader.post(f"/api/v1/incidents/{opened['id']}/acknowledge").status_code == 403
    )
    nothing = deployment.admin.post("/api/v1/incidents/999999/acknowledge")
    assert (nothing.status_code, nothing.json()["error"]) == (404, "not_found")
    assert nothing.json()["message"] == "incident: no incident with id 999999"
    garbled = deployment.admin.post("/api/v1/incidents/first/acknowledge")
    assert (garbled.status_code, garbled.json()["field"]) == (422, "incident")
    silence = "/api/v1/schedules/web-failing/silence"
    silenced = deployment.change(silence, 200, json={"for": "2h"})
    assert silenced.json()["silenced_until"] is not None
    bad = deployment.admin.post(silence, json={"for": "-1h"})
    assert (bad.status_code, bad.json()["field"]) == (422, "for")
    loud = deployment.change(silence, 200, method="DELETE")
    assert loud.json()["silenced_until"] is None

    deployment.change("/api/v1/schedules/web-failing/pause", 200)
    counted = deployment.admin.post("/api/v1/prune", json={"dry_run": True}).json()
    assert counted["dry_run"] is True and counted["runs"] >= 0
    paused = 'bridge_schedule_health{schedule="web-failing",state="paused"} 1.0'
    wait_for(
        lambda: paused in deployment.reader.get("/metrics").text,
        30,
        what="the paused schedule in /metrics",
    )
