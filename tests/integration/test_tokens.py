"""Named tokens, dashboard sessions, the sign-in limit and forwarded addresses, against a
real ``celery bridge serve`` process on PostgreSQL, with tokens made and revoked through
the real CLI.

The server trusts one proxy, 127.0.0.2: a client bound to that address plays the
proxy, and a client on 127.0.0.1 plays anyone else on the machine. The sign-in
limit is per address, so the tests that fail sign-ins do it from addresses of
their own.
"""

from __future__ import annotations

import getpass
import json
import re
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.support import Env, rows, served, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_tokens")]

ADMIN = "tokens-admin-token-0123456789"
READ = "tokens-read-token-0123456789"
QUICK = "workers.app.quick"
PROXY = "127.0.0.2"


def csrf_of(page: httpx.Response) -> str:
    """The CSRF token the page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text[:300]
    return found.group(1)


class Server:
    """The module's server, and the CLI of its database."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.url = env.server_url

    def client(self, token: str | None = None, address: str = "127.0.0.1") -> httpx.Client:
        """A client from ``address`` (on loopback), with ``token`` as its bearer token."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        transport = httpx.HTTPTransport(local_address=address)
        return httpx.Client(base_url=self.url, headers=headers, transport=transport, timeout=30)

    def make_token(self, name: str, role: str, *options: str) -> str:
        """``bridge token create``; the secret it prints once, on its last line."""
        made = self.env.cli("token", "create", name, "--role", role, *options)
        secret = made.stdout.strip().splitlines()[-1]
        assert secret.startswith("bridge_"), made.stdout
        return secret

    def tokens(self) -> dict[str, dict[str, object]]:
        listed = json.loads(self.env.cli("token", "ls", "--json").stdout)
        return {token["name"]: token for token in listed}

    def sign_in(self, token: str, address: str = "127.0.0.1") -> dict[str, str]:
        """A dashboard session's cookie, as a header (httpx keeps ``Secure`` cookies off
        plain HTTP, as it should; the server is on loopback)."""
        with self.client(address=address) as client:
            response = client.post("/login", data={"token": token, "next": "/"})
        assert response.status_code == 303, response.text
        return {"Cookie": f"bridge_session={response.cookies['bridge_session']}"}

    def sign_out(self, browser: httpx.Client, cookie: dict[str, str]) -> None:
        """Sign out as the page's button does, with the page's CSRF token; the old cookie,
        kept by anyone who copied it, signs no one in any more."""
        page = browser.get("/schedules", headers=cookie)
        assert page.status_code == 200
        out = browser.post("/logout", data={"csrf": csrf_of(page)}, headers=cookie)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        replayed = browser.get("/schedules", headers=cookie)
        assert replayed.status_code == 303 and replayed.headers["location"].startswith("/login")

    def actors(self, schedule: str) -> list[str]:
        found = rows(
            self.env.database_url,
            "SELECT actor FROM audit_log WHERE schedule_name = :name ORDER BY id",
            name=schedule,
        )
        return [row[0] for row in found]


@pytest.fixture(scope="module", params=["postgres", "mariadb"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    settings = {
        "BRIDGE_API_ADMIN_TOKEN": ADMIN,
        "BRIDGE_API_READ_TOKEN": READ,
        "BRIDGE_TRUSTED_PROXIES": PROXY,
    }
    with served(tmp_path_factory.mktemp("tokens"), None, request.param, **settings) as env:
        yield Server(env)


def schedule(name: str) -> dict[str, str]:
    return {"name": name, "task": QUICK, "timer": "every 1h"}


def test_a_named_token_works_is_audited_by_name_and_stops_at_revocation(server: Server) -> None:
    secret = server.make_token("deployer", "admin", "--expires", "30d")
    reader = server.make_token("watcher", "read")
    listed = server.tokens()
    assert listed["deployer"]["role"] == "admin" and listed["deployer"]["state"] == "active"
    assert listed["deployer"]["last_used_at"] is None and listed["deployer"]["expires_at"]
    listing = server.env.cli("token", "ls").stdout + json.dumps(listed)
    assert secret not in listing and reader not in listing
    # The store keeps no secret either.
    stored = rows(server.env.database_url, "SELECT * FROM api_token")
    assert not any(secret in str(value) for row in stored for value in row)

    with server.client(secret) as deployer, server.client(reader) as watcher:
        assert deployer.post("/api/v1/schedules", json=schedule("by-token")).status_code == 201
        assert server.actors("by-token") == ["http:deployer@127.0.0.1"]
        assert watcher.get("/api/v1/schedules/by-token").status_code == 200
        refused = watcher.post("/api/v1/schedules/by-token/pause", json={})
        assert refused.status_code == 403
        assert server.tokens()["deployer"]["last_used_at"] is not None

        server.env.cli("token", "revoke", "deployer")
        gone = deployer.get("/api/v1/schedules/by-token")
        assert gone.status_code == 401
        assert gone.json() == {
            "error": "unauthorized",
            "message": "a valid bearer token is required",
        }
        assert deployer.post("/api/v1/schedules", json=schedule("after")).status_code == 401
    assert server.tokens()["deployer"]["state"] == "revoked"
    again = server.env.cli("token", "create", "deployer", "--role", "read", check=False)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        "Error: name: got 'deployer', expected a name no other token has"
        " (a revoked token keeps its name)"
    )


def test_making_and_revoking_a_token_is_audited_by_name_and_role(server: Server) -> None:
    """``token create`` and ``token revoke`` write an audit entry each, with the CLI's actor,
    the token's name and role and never its secret, listed by ``bridge audit`` and
    ``/api/v1/audit`` and in no schedule's trail; revoking it again logs nothing."""
    secret = server.make_token("auditor", "read", "--expires", "30d")
    server.env.cli("token", "revoke", "auditor")
    server.env.cli("token", "revoke", "auditor")
    expires_at = server.tokens()["auditor"]["expires_at"]
    actor = f"cli:{getpass.getuser()}@{socket.gethostname()}"

    def of_auditor(entries: list[dict[str, object]]) -> list[tuple[object, ...]]:
        return [
            (e["actor"], e["action"], e["schedule_id"], e["schedule_name"], e["before"], e["after"])
            for e in entries
            if isinstance(e["after"], dict) and e["after"].get("token") == "auditor"
        ]

    fields = {"token": "auditor", "role": "read", "expires_at": expires_at}
    expected = [
        (actor, "revoke token", None, "", None, fields),
        (actor, "create token", None, "", None, fields),
    ]
    listed = server.env.cli("audit", "--json", "--limit", "1000").stdout
    assert of_auditor(json.loads(listed)) == expected
    with server.client(READ) as reader:
        page = reader.get("/api/v1/audit", params={"limit": "1000"})
        assert page.status_code == 200
        assert of_auditor(page.json()["items"]) == expected
    table = server.env.cli("audit", "--limit", "1000").stdout
    assert "create token" in table and "revoke token" in table
    assert 'role: "read", token: "auditor"' in table
    assert secret not in listed + table + page.text
    assert json.loads(server.env.cli("audit", "auditor", "--json").stdout) == []


def test_an_expired_token_is_refused(server: Server) -> None:
    secret = server.make_token("brief", "read", "--expires", "3s")
    with server.client(secret) as client:
        assert client.get("/api/v1/schedules").status_code == 200
        wait_for(lambda: client.get("/api/v1/schedules").status_code == 401, 15, what="expiry")
    assert server.tokens()["brief"]["state"] == "expired"


def test_revoking_a_token_ends_its_dashboard_session_at_once(server: Server) -> None:
    secret = server.make_token("operator", "admin")
    cookie = server.sign_in(secret)
    with server.client() as browser:
        page = browser.get("/new", headers=cookie)
        assert page.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        created = browser.post(
            "/new", data={"csrf": csrf.group(1), **schedule("from-page")}, headers=cookie
        )
        assert created.status_code == 303, created.text[:300]
        assert server.actors("from-page") == ["http:operator@127.0.0.1 (dashboard)"]

        server.env.cli("token", "revoke", "operator")
        after = browser.get("/schedules", headers=cookie)
        assert after.status_code == 303 and after.headers["location"].startswith("/login")
        refused = browser.post(
            "/schedules/from-page/pause", data={"csrf": csrf.group(1)}, headers=cookie
        )
        assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
    # The refused pause wrote nothing.
    assert server.actors("from-page") == ["http:operator@127.0.0.1 (dashboard)"]


def test_signing_out_ends_the_session_on_the_server(server: Server) -> None:
    cookie = server.sign_in(ADMIN)
    with server.client() as browser:
        server.sign_out(browser, cookie)
    assert server.sign_in(READ)  # another sign-in is a new session


def test_signing_out_needs_the_sessions_csrf_token(server: Server) -> None:
    """Sign-out is a form like the others: posted without its session's CSRF token (by
    another site, or with another session's token), it is refused 403 in the API's error
    shape (the error page for a browser), and the session goes on."""
    cookie = server.sign_in(READ)
    other = server.sign_in(READ)
    refusal = {
        "error": "forbidden",
        "message": "the form is stale or came from another site; reload the page and retry",
    }
    with server.client() as browser:
        page = browser.get("/schedules", headers=cookie)
        assert page.status_code == 200
        others = csrf_of(browser.get("/schedules", headers=other))
        assert others != csrf_of(page)
        for form in ({}, {"csrf": ""}, {"csrf": "guessed"}, {"csrf": others}):
            refused = browser.post("/logout", data=form, headers=cookie)
            assert (refused.status_code, refused.json()) == (403, refusal), form
            assert "set-cookie" not in refused.headers, form
        shown = browser.post("/logout", headers={**cookie, "Accept": "text/html"})
        assert shown.status_code == 403 and "text/html" in shown.headers["content-type"]
        assert refusal["message"] in shown.text
        # The session lasts, and signs out with its own token.
        server.sign_out(browser, cookie)
        assert browser.get("/schedules", headers=other).status_code == 200


def test_failed_sign_ins_are_limited_per_address(server: Server) -> None:
    with server.client(address="127.0.0.3") as guesser:
        for guess in range(5):
            tried = guesser.post("/login", data={"token": f"guess-{guess}-0123456789abc"})
            assert tried.status_code == 401
        limited = guesser.post("/login", data={"token": ADMIN})
        assert limited.status_code == 429
        assert 0 < int(limited.headers["retry-after"]) <= 60
        body = limited.json()
        assert body["error"] == "too_many_requests"
        assert body["message"].startswith("token: too many failed sign-ins from this address")
        page = guesser.post("/login", data={"token": ADMIN}, headers={"Accept": "text/html"})
        assert page.status_code == 429 and "Too many failed sign-ins" in page.text
    # Another address signs in as before.
    assert server.sign_in(ADMIN, address="127.0.0.4")


def test_a_forwarded_address_is_believed_from_a_trusted_proxy_only(server: Server) -> None:
    forged = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=198.51.100.1"}
    with server.client(ADMIN) as local:
        created = local.post("/api/v1/schedules", json=schedule("forged"), headers=forged)
        assert created.status_code == 201
    assert server.actors("forged") == ["http:admin@127.0.0.1"]
    with server.client(ADMIN, address=PROXY) as proxy:
        headers = {"X-Forwarded-For": "6.6.6.6, 203.0.113.9"}
        made = proxy.post("/api/v1/schedules", json=schedule("proxied"), headers=headers)
        assert made.status_code == 201
        paused = proxy.post("/api/v1/schedules/proxied/pause", json={}, headers=forged)
        assert paused.status_code == 200
    assert server.actors("proxied") == ["http:admin@203.0.113.9", "http:admin@198.51.100.1"]


def test_a_weak_settings_token_stops_the_server_in_one_line(server: Server) -> None:
    for token in (" " * 20, "aaaaaaaaaaaaaaaaaaaa"):
        result = server.env.cli("serve", "--port", "1", check=False, BRIDGE_API_ADMIN_TOKEN=token)
        assert result.returncode == 1
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(
            "Error: bridge_api_admin_token: got '<hidden>', expected a token of at least 16"
        )
        assert "aaaa" not in line
