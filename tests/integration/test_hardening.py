"""Hostile requests against a real ``celery bridge serve`` process on PostgreSQL: each is
answered in the documented error shape with the documented status, writes nothing, and
leaves every read answering; what older releases stored is still read; every answer
carries the security headers; a 500 keeps its connection; a locked row stalls nobody else.

The client is httpx (or a bare socket, where the connection itself is the
point); the database is checked directly, as psql would.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import make_url

from tests.support import (
    PG_ADMIN_URL,
    CeleryProcess,
    Env,
    execute,
    free_port,
    rows,
    served,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_hardening")]

ADMIN = "hardening-admin-token-0123456789"
READ = "hardening-read-token-0123456789"
QUICK = "workers.app.quick"
JSON = {"content-type": "application/json"}


class Server:
    """The module's server and its database."""

    def __init__(self, env: Env, url: str) -> None:
        self.env = env
        self.url = url
        self.database_url = env.database_url
        self.admin = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        )
        self.reader = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {READ}"}, timeout=60
        )

    def create(self, name: str, **fields: Any) -> None:
        body = {"name": name, "task": QUICK, "timer": "every 1h", **fields}
        response = self.admin.post("/api/v1/schedules", json=body)
        assert response.status_code == 201, response.text

    def stored(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Every schedule and every audit entry: what a refused request must not change."""
        schedules = rows(self.database_url, "SELECT * FROM periodic_task ORDER BY id")
        audit = rows(self.database_url, "SELECT * FROM audit_log ORDER BY id")
        return [tuple(row) for row in schedules], [tuple(row) for row in audit]

    def session_cookie(self, token: str = ADMIN) -> dict[str, str]:
        """A dashboard session's cookie, as a header (httpx keeps ``Secure`` cookies off
        plain HTTP, as it should; the server is on loopback)."""
        response = httpx.post(
            self.url + "/login", data={"token": token, "next": "/"}, follow_redirects=False
        )
        assert response.status_code == 303, response.text
        return {"Cookie": f"bridge_session={response.cookies['bridge_session']}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    settings = {"BRIDGE_API_ADMIN_TOKEN": ADMIN, "BRIDGE_API_READ_TOKEN": READ}
    with served(tmp_path_factory.mktemp("hardening"), **settings) as env:
        yield Server(env, env.server_url)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


SCHEDULE = b'"name": "hostile", "task": "workers.app.quick", "timer": "every 1h"'
#: (method, path, raw body, status, error, field): each must be refused so, writing nothing.
HOSTILE: list[tuple[str, str, bytes | None, int, str, str]] = [
    # Lone surrogates, in every place a text goes.
    ("POST", "/api/v1/schedules", b'{%s, "args": ["\\udfff"]}' % SCHEDULE, 422, "invalid", "args"),
    ("POST", "/api/v1/schedules", b'{%s, "kwargs": {"a": "\\udfff"}}' % SCHEDULE, 422, "invalid",
     "kwargs"),
    ("POST", "/api/v1/schedules", b'{%s, "kwargs": {"\\ud800": 1}}' % SCHEDULE, 422, "invalid",
     "kwargs"),
    ("POST", "/api/v1/schedules", b'{%s, "options": {"headers": {"h": "\\udfff"}}}' % SCHEDULE,
     422, "invalid", "options"),
    ("POST", "/api/v1/schedules", b'{"name": "x\\udfff", "task": "workers.app.quick", '
     b'"timer": "every 1h"}', 422, "invalid", "name"),
    ("POST", "/api/v1/schedules", b'{"name": "hostile", "task": "workers.app.quick", '
     b'"timer": "every 1h\\udfff"}', 422, "invalid", "timer"),
    ("POST", "/api/v1/schedules", b'{"name": "hostile", "task": "x\\udfff", "timer": "every 1h",'
     b' "allow_unknown_task": true}', 422, "invalid", "task"),
    ("POST", "/api/v1/schedules/target/pause", b'{"note": "\\udfff"}', 422, "invalid", "note"),
    ("PATCH", "/api/v1/schedules/target", b'{"args": ["\\udfff"]}', 422, "invalid", "args"),
    ("PATCH", "/api/v1/schedules/target", b'{"timer": "\\udfff"}', 422, "invalid", "timer"),
    ("POST", "/api/v1/schedules/target/backfill", b'{"from": "\\udfff", "to": "\\udfff"}', 422,
     "invalid", "from"),
    # Numbers JSON does not have.
    ("POST", "/api/v1/schedules", b'{%s, "jitter": NaN}' % SCHEDULE, 422, "invalid", "jitter"),
    ("POST", "/api/v1/schedules", b'{%s, "jitter": Infinity}' % SCHEDULE, 422, "invalid",
     "jitter"),
    ("POST", "/api/v1/schedules", b'{%s, "args": [-Infinity]}' % SCHEDULE, 422, "invalid",
     "args"),
    ("PATCH", "/api/v1/schedules/target", b'{"jitter": NaN}', 422, "invalid", "jitter"),
    ("POST", "/api/v1/schedules/target/silence", b'{"for": NaN}', 422, "invalid", "for"),
    # A queue name that would split a listing's lines.
    ("POST", "/api/v1/schedules", b'{%s, "queue": "a\\r\\nb"}' % SCHEDULE, 422, "invalid",
     "queue"),
    ("PATCH", "/api/v1/schedules/target", b'{"options": {"queue": "\\u001b[31m"}}', 422,
     "invalid", "options.queue"),
    # A name a client would tidy into another schedule's.
    ("POST", "/api/v1/schedules", b'{"name": "evil/../target", "task": "workers.app.quick", '
     b'"timer": "every 1h"}', 422, "invalid", "name"),
    # Times that UTC puts outside the years a time can hold.
    ("POST", "/api/v1/schedules", b'{%s, "start": "0001-01-01T00:00:00+01:00"}' % SCHEDULE, 422,
     "invalid", "start"),
    ("PATCH", "/api/v1/schedules/target", b'{"end": "9999-12-31T23:59:59-01:00"}', 422,
     "invalid", "end"),
    ("POST", "/api/v1/schedules/target/backfill", b'{"from": "0001-01-01T00:00:00+01:00", '
     b'"to": "2026-01-01T00:00:00+00:00"}', 422, "invalid", "from"),
    ("GET", "/api/v1/runs?since=0001-01-01T00:00:00%2B01:00", None, 422, "invalid", "since"),
    ("POST", "/api/v1/schedules/target/backfill", b'{"from": "0001-01-01T00:00:00Z", '
     b'"to": "2026-01-01T00:00:00Z"}', 422, "invalid", "to"),
    # A backfill as long as it likes would hold a thread and its memory for as long.
    ("POST", "/api/v1/schedules/target/backfill", b'{"from": "2026-01-01T00:00:00Z", '
     b'"to": "2026-01-02T00:00:00Z", "limit": 2147483647}', 422, "invalid", "limit"),
    # NUL, in a body and in a filter, a name, a run id.
    ("POST", "/api/v1/schedules", b'{%s, "kwargs": {"a": "\\u0000"}}' % SCHEDULE, 422, "invalid",
     "kwargs"),
    ("POST", "/api/v1/schedules/target/pause", b'{"note": "a\\u0000b"}', 422, "invalid", "note"),
    ("GET", "/api/v1/schedules?prefix=%00", None, 422, "invalid", "prefix"),
    ("GET", "/api/v1/schedules?task=a%00", None, 422, "invalid", "task"),
    ("GET", "/api/v1/schedules/a%00b", None, 422, "invalid", "name"),
    ("GET", "/api/v1/schedules/a%00b/runs", None, 422, "invalid", "name"),
    ("GET", "/api/v1/audit?schedule=%00", None, 422, "invalid", "name"),
    ("GET", "/api/v1/runs/%00", None, 422, "invalid", "run"),
    ("GET", "/api/v1/schedules?limit=" + "9" * 5000, None, 422, "invalid", "limit"),
    # Bodies that are not JSON at all.
    ("POST", "/api/v1/schedules", b'{"name": "\xff\xfe"}', 400, "malformed", "body"),
    ("POST", "/api/v1/schedules", nested(1000), 400, "malformed", "body"),
    ("POST", "/api/v1/schedules", b'{"name": ' + b"9" * 5000 + b"}", 400, "malformed", "body"),
    ("POST", "/api/v1/schedules", b"{not json", 400, "malformed", "body"),
    ("POST", "/api/v1/schedules/target/pause", b'{"note": "x"', 400, "malformed", "body"),
    # JSON, nested deeper than a value may be.
    ("POST", "/api/v1/schedules", b'{%s, "args": %s}' % (SCHEDULE, nested(500)), 422, "invalid",
     "args"),
    # Bodies that are JSON but not an object.
    ("POST", "/api/v1/schedules", b"[1, 2]", 422, "invalid", "body"),
    ("POST", "/api/v1/schedules", b'"text"', 422, "invalid", "body"),
    ("POST", "/api/v1/schedules", b"7", 422, "invalid", "body"),
    ("POST", "/api/v1/schedules", b"null", 422, "invalid", "body"),
    ("PATCH", "/api/v1/schedules/target", b"[1]", 422, "invalid", "body"),
    ("POST", "/api/v1/schedules/target/pause", b"[1, 2]", 422, "invalid", "body"),
    ("POST", "/api/v1/schedules/target/resume", b'"now"', 422, "invalid", "body"),
    ("POST", "/api/v1/runs/some-run/cancel", b"[true]", 422, "invalid", "body"),
]  # fmt: skip


def test_hostile_requests_are_refused_in_one_shape_and_write_nothing(server: Server) -> None:
    server.create("target", kwargs={"kept": "é"})
    before = server.stored()
    for method, path, body, status, error, field in HOSTILE:
        response = server.admin.request(method, path, content=body, headers=JSON)
        where = f"{method} {path} {body!r:.80}: {response.status_code} {response.text[:300]}"
        assert response.status_code == status, where
        answer = response.json()
        assert (answer["error"], answer.get("field")) == (error, field), where
        assert isinstance(answer["message"], str) and answer["message"], where
        assert "detail" not in answer, where
    assert server.stored() == before
    for path in ("/api/v1/schedules", "/api/v1/schedules/target", "/api/v1/audit",
                 "/api/v1/schedules/target/audit", "/api/v1/runs", "/metrics"):  # fmt: skip
        assert server.reader.get(path).status_code == 200, path


def test_values_stored_by_an_older_release_are_still_read(server: Server) -> None:
    """Older releases took lone surrogates and NaN; their rows and audit entries read back,
    on the API and on the dashboard's pages."""
    server.create("legacy")
    (schedule_id,) = rows(
        server.database_url, "SELECT id FROM periodic_task WHERE name = 'legacy'"
    )[0]
    stored = '{"n":NaN,"s":"\\udfff"}'
    execute(server.database_url, "UPDATE periodic_task SET kwargs = :v WHERE id = :id", v=stored,
            id=schedule_id)  # fmt: skip
    execute(
        server.database_url,
        "INSERT INTO audit_log (at, actor, action, schedule_id, schedule_name, before, after)"
        " SELECT now(), 'an older release', 'edit', :id, 'legacy', :before, :after",
        id=schedule_id,
        before='{"kwargs":{}}',
        after='{"kwargs":' + stored + "}",
    )
    one = server.reader.get("/api/v1/schedules/legacy")
    assert one.status_code == 200, one.text
    assert one.json()["kwargs"] == {"n": None, "s": "\udfff"}
    for path in ("/api/v1/schedules", "/api/v1/audit", "/api/v1/schedules/legacy/audit"):
        response = server.reader.get(path)
        assert response.status_code == 200, (path, response.text)
        json.loads(response.content)  # strict JSON: no NaN, nothing but UTF-8
    cookie = server.session_cookie(READ)
    for page in ("/", "/schedules", "/schedules/legacy"):
        response = httpx.get(server.url + page, headers=cookie)
        assert response.status_code == 200, (page, response.text[:300])
    # The edit form is the admin's only.
    admin = server.session_cookie(ADMIN)
    edit_page = httpx.get(server.url + "/schedules/legacy/edit", headers=admin)
    assert edit_page.status_code == 200, edit_page.text[:300]
    assert "\\udfff" in httpx.get(server.url + "/schedules/legacy", headers=cookie).text


def test_every_error_has_the_one_shape(server: Server) -> None:
    anonymous = httpx.Client(base_url=server.url, timeout=60)
    cases = [
        (anonymous.get("/api/v1/schedules"), 401, "unauthorized"),
        (server.reader.post("/api/v1/schedules", json={}), 403, "forbidden"),
        (server.reader.get("/api/v1/no-such-thing"), 404, "not_found"),
        (server.reader.get("/api/v1/schedules/no-such-schedule"), 404, "not_found"),
        (anonymous.get("/no/such/page"), 404, "not_found"),
        (server.admin.put("/api/v1/schedules", json={}), 405, "method_not_allowed"),
        (server.admin.delete("/api/v1/runs"), 405, "method_not_allowed"),
        (server.admin.post("/api/v1/schedules", content=b"x" * 2_000_000), 413, "too_large"),
        (
            server.admin.post(
                "/api/v1/schedules", json={}, headers={"Origin": "http://elsewhere.example"}
            ),
            403,
            "forbidden",
        ),
    ]
    for response, status, error in cases:
        where = f"{response.request.method} {response.request.url}: {response.text[:200]}"
        assert response.status_code == status, where
        assert response.headers["content-type"] == "application/json", where
        answer = response.json()
        assert answer["error"] == error and answer["message"], where
        assert "detail" not in answer, where
    # Allow names every method the path takes, not those of one of its routes only.
    assert cases[5][0].headers["allow"] == "GET, POST"
    assert cases[6][0].headers["allow"] == "GET"
    for method, path, allowed in (
        ("PUT", "/api/v1/schedules/some-name", "GET, PATCH, DELETE"),
        ("PUT", "/api/v1/schedules/some-name/silence", "POST, DELETE"),
        ("GET", "/api/v1/prune", "POST"),
        ("POST", "/metrics", "GET"),
    ):
        refused = server.admin.request(method, path)
        assert (refused.status_code, refused.headers["allow"]) == (405, allowed), path
    # A browser that asks for a page that is not there gets the dashboard's page.
    page = anonymous.get("/no/such/page", headers={"Accept": "text/html"})
    assert page.status_code == 404 and "<html" in page.text


def test_the_openapi_document_declares_each_operations_errors(server: Server) -> None:
    document = server.reader.get("/openapi.json").json()
    error = document["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"error", "message"}
    assert "HTTPValidationError" not in json.dumps(document)
    operations = [
        (method, path, operation)
        for path, methods in document["paths"].items()
        if path.startswith("/api/")
        for method, operation in methods.items()
    ]
    assert len(operations) > 20
    for method, path, operation in operations:
        declared = {int(status) for status in operation["responses"] if status[0] in "45"}
        assert {401, 403, 413, 422, 503} <= declared, (method, path)
        assert (400 in declared) == ("requestBody" in operation), (method, path)
        named = ("{name}", "{run_id}", "{incident_id}")
        assert (404 in declared) == any(key in path for key in named), (method, path)
        for status in declared:
            schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}
    assert 409 in {int(s) for s in document["paths"]["/api/v1/schedules"]["post"]["responses"]}


HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def test_every_answer_carries_the_security_headers(server: Server) -> None:
    anonymous = httpx.Client(base_url=server.url, timeout=60)
    answers = [
        anonymous.get("/login"),
        anonymous.get("/", follow_redirects=False),
        anonymous.get("/docs"),
        anonymous.get("/openapi.json"),
        anonymous.get("/healthz"),
        anonymous.get("/readyz"),
        anonymous.get("/static/bridge.js"),
        anonymous.get("/api/v1/schedules"),
        server.reader.get("/metrics"),
        server.reader.get("/api/v1/schedules"),
        server.reader.get("/nowhere"),
        server.admin.post("/api/v1/schedules", content=b"x" * 2_000_000),
        server.admin.post("/api/v1/schedules", json={}, headers={"Origin": "http://evil.example"}),
    ]
    for response in answers:
        where = f"{response.request.method} {response.request.url} {response.status_code}"
        for name, value in HEADERS.items():
            assert response.headers.get(name) == value, where
        policy = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy, where
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, where


def test_no_page_has_inline_script_or_event_handler_attributes(server: Server) -> None:
    """The CSP allows the server's own script files only, so the pages must hold none."""
    cookie = server.session_cookie()
    server.create("inline-check")
    for page in ("/", "/schedules", "/new", "/schedules/inline-check",
                 "/schedules/inline-check/edit", "/login", "/docs"):  # fmt: skip
        html = httpx.get(server.url + page, headers=cookie).text
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), page
        assert not re.search(r"\son[a-z]+\s*=", html), page
        assert "javascript:" not in html, page


def answers_on(sock: socket.socket, path: str) -> tuple[int, dict[str, str], bytes]:
    """Send GET ``path`` on an open connection and read one whole answer from it."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection inside an answer"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_a_500_is_a_whole_answer_and_the_connection_stays_open(tmp_path: Path, pg_url: str) -> None:
    """No route of the server raises; one is added that does, on a real uvicorn."""
    env = Env(tmp_path, pg_url, None)
    env.cli("migrate")
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "tests.defective_app:build",
             "--port", str(port)],
            cwd=tmp_path, env=env.environ(), stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60, what="the server")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            status, headers, body = answers_on(sock, "/defect")
            assert status == 500
            assert json.loads(body) == {
                "error": "internal",
                "message": "RuntimeError; see the server's log",
            }
            assert headers.get("connection") != "close"
            assert headers["x-frame-options"] == "DENY"
            # The same connection carries the next request.
            status, _, body = answers_on(sock, "/healthz")
            assert (status, body) == (200, b"ok\n")
    finally:
        process.terminate()
        process.wait(30)
    text = log.read_text()
    assert "RuntimeError: a defect" in text and "Traceback" in text, text
    assert "NoneType: None" not in text


def test_the_server_command_logs_the_traceback_of_a_defect(tmp_path: Path, pg_url: str) -> None:
    """``bridge serve`` itself, with a defect in a read: the client gets the documented
    shape, and the log the exception's own traceback (not ``NoneType: None``)."""
    env = Env(tmp_path, pg_url, None)
    env.cli("migrate")
    port = free_port()
    command = [sys.executable, "-m", "celery", "-A", "tests.defective_server", "bridge", "serve",
               "--port", str(port)]  # fmt: skip
    process = CeleryProcess("serve", command, tmp_path, env.environ())
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60, what="the server")
        for path in ("/api/v1/incidents", "/"):
            response = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=60)
            assert response.status_code == 500, (path, response.text)
            assert response.json() == {
                "error": "internal",
                "message": "RuntimeError; see the server's log",
            }
        wait_for(lambda: process.log.count("Traceback") >= 2, 30, what="both tracebacks")
    finally:
        process.stop()
    text = process.log
    assert "bridge: GET /api/v1/incidents failed" in text, text
    assert "RuntimeError: a defect in reading the incidents" in text, text
    assert 'raise RuntimeError("a defect in reading the incidents")' in text, text
    assert "NoneType: None" not in text, text


def test_a_database_outage_is_answered_without_the_drivers_words(tmp_path: Path) -> None:
    """A 503 says what to do; where the database is stays in the server's log, once for
    the outage rather than once a request."""
    with served(tmp_path) as env:
        name = make_url(env.database_url).database
        url = f"{env.server_url}/api/v1/schedules"
        assert httpx.get(url, timeout=60).status_code == 200
        execute(PG_ADMIN_URL, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            execute(
                PG_ADMIN_URL,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name",
                name=name,
            )
            response = httpx.get(url, timeout=60)
            assert response.status_code == 503, response.text
            assert response.json() == {
                "error": "database",
                "message": "the database did not answer or refused the request;"
                " see the server's log",
            }
            assert response.headers["retry-after"] == "1"
            for told in ("127.0.0.1", "5432", str(name)):
                assert told not in response.text, told
            server = env.processes[-1]
            wait_for(
                lambda: "bridge: GET /api/v1/schedules: database:" in server.log,
                30,
                what="the reason in the server's log",
            )
            assert "not currently accepting connections" in server.log
            for _ in range(10):  # a dashboard refreshing itself, a monitor's probes
                assert httpx.get(url, timeout=60).status_code == 503
            assert httpx.get(f"{env.server_url}/readyz", timeout=60).status_code == 503
            assert server.log.count(": database: ") == 1, server.log
        finally:
            execute(PG_ADMIN_URL, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert httpx.get(url, timeout=60).status_code == 200


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_locked_row_stalls_no_one_but_its_own_save(server: Server) -> None:
    """Another session holds the schedule's row lock while the dashboard saves it: the
    save waits for the lock, and meanwhile the server answers everything else."""
    server.create("locked")
    server.create("bystander")
    cookie = server.session_cookie()
    form_page = httpx.get(server.url + "/schedules/locked/edit", headers=cookie).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form_page)
    assert csrf is not None
    url = server.database_url.replace("postgresql+psycopg://", "postgresql://")
    saved: list[httpx.Response] = []
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM periodic_task WHERE name = 'locked' FOR UPDATE")

        def save() -> None:
            saved.append(
                httpx.post(
                    server.url + "/schedules/locked/edit",
                    data={"csrf": csrf.group(1), "task": QUICK, "timer": "every 2h"},
                    headers={**cookie, "Origin": server.url},
                    timeout=120,
                )
            )

        saving = threading.Thread(target=save)
        saving.start()
        # The save is waiting on the lock: PostgreSQL says so.
        wait_for(
            lambda: (
                rows(
                    server.database_url,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()",
                )[0][0]
                > 0
            ),
            60,
            what="the save to wait on the row lock",
        )
        assert httpx.get(server.url + "/healthz").text == "ok\n"
        assert server.reader.get("/api/v1/schedules/bystander").status_code == 200
        assert httpx.get(server.url + "/schedules", headers=cookie).status_code == 200
        assert httpx.get(server.url + "/schedules/bystander", headers=cookie).status_code == 200
        assert saving.is_alive() and not saved  # still waiting, while the others answered
        holder.rollback()
    saving.join(120)
    assert saved and saved[0].status_code == 303, saved
    assert server.reader.get("/api/v1/schedules/locked").json()["timer"] == "every 2h"


def test_the_dashboards_forms_and_filters_refuse_what_no_store_can_keep(server: Server) -> None:
    server.create("formed")
    cookie = server.session_cookie()
    page = httpx.get(server.url + "/new", headers=cookie).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    before = server.stored()
    fields = {"csrf": csrf.group(1), "name": "from-form", "task": QUICK, "timer": "every 1h"}
    for field, value in (
        ("name", "nul\x00name"),
        ("kwargs", '{"a": "\\u0000"}'),
        ("args", '["\\udfff"]'),
        ("kwargs", '{"a": NaN}'),
        ("jitter", "Infinity"),
        ("task", "workers.app.quick\x00"),
    ):
        response = httpx.post(server.url + "/new", data={**fields, field: value}, headers=cookie)
        assert response.status_code == 422, (field, response.text[:300])
        assert f'id="e-{field}"' in response.text, field
    edit = httpx.post(
        server.url + "/schedules/formed/edit",
        data={"csrf": csrf.group(1), "task": QUICK, "timer": "every 1h", "args": "[NaN]"},
        headers=cookie,
    )
    assert edit.status_code == 422 and 'id="e-args"' in edit.text
    paused = httpx.post(
        server.url + "/schedules/formed/pause",
        data={"csrf": csrf.group(1), "note": "a\x00b"},
        headers=cookie,
        follow_redirects=False,
    )
    assert paused.status_code == 303 and "note" in paused.headers["location"]
    # A refused value is said back in part: whole, it made a Location proxies refuse.
    resumed = httpx.post(
        server.url + "/schedules/formed/resume",
        data={"csrf": csrf.group(1), "from": "x" * 100_000},
        headers=cookie,
        follow_redirects=False,
    )
    location = resumed.headers["location"]
    assert resumed.status_code == 303 and "from" in location and len(location) < 4000, location
    # Bytes that are not UTF-8: refused naming the field, not stored as U+FFFD.
    for raw in (b"%ff%fe", b"%ed%bf%bf", b"caf\xe9"):
        body = b"csrf=%s&task=%s&timer=every+1h&name=%s" % (
            csrf.group(1).encode(),
            QUICK.encode(),
            raw,
        )
        form = {**cookie, "Content-Type": "application/x-www-form-urlencoded"}
        sent = httpx.post(server.url + "/new", content=body, headers=form)
        assert sent.status_code == 422 and "name: got" in sent.text, (raw, sent.text[:300])
    # A link's value no page takes back to a form: the error page, as the API's 422.
    cursor = httpx.get(server.url + "/schedules/formed", params={"runs": "bogus"}, headers=cookie)
    assert cursor.status_code == 422, cursor.text[:300]
    listing = httpx.get(server.url + "/schedules", params={"q": "\x00"}, headers=cookie)
    assert listing.status_code == 422 and "prefix" in listing.text
    assert server.stored() == before


def test_a_forms_token_or_a_links_signature_beyond_ascii_is_refused(server: Server) -> None:
    """A CSRF token, a message's signature or a bearer token with characters beyond ASCII
    is a wrong one, refused as such: the comparison of secrets took only ASCII text and
    answered 500."""
    server.create("guarded")
    cookie = server.session_cookie()
    before = server.stored()
    for path in ("/schedules/guarded/pause", "/new", "/schedules/bulk", "/calendars", "/logout"):
        response = httpx.post(
            server.url + path, data={"csrf": "jeton-volé", "name": "x"}, headers=cookie
        )
        assert response.status_code == 403, (path, response.text[:300])
        assert "stale" in response.text, path
    assert server.stored() == before
    # The session goes on: the sign-out above was refused.
    assert httpx.get(server.url + "/schedules", headers=cookie).status_code == 200
    page = httpx.get(
        server.url + "/schedules", params={"error": "forged", "sig": "signé"}, headers=cookie
    )
    assert page.status_code == 200 and 'role="alert"' not in page.text
    bearer = {"Authorization": "Bearer jeton-été-0123456789".encode()}
    answer = httpx.get(server.url + "/api/v1/schedules", headers=bearer)
    assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
