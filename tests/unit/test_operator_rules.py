"""The pure rules under the operator surfaces: page cursors, labels, audit differences,
percentiles, and who may do what over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.manage.web.security import (
    Access,
    OpenToNetwork,
    access_of,
    actor,
    bearer,
    check_bind,
    csrf_token,
    header_text,
    is_loopback,
    session_cookie,
    session_secret,
)
from bridge.rules import paging
from bridge.rules.audit import difference, snapshot
from bridge.rules.definition import LABELS_MAX, check_label, check_labels
from bridge.rules.stats import percentile, spread, success_rate

ADMIN = "a" * 20
READ = "r" * 20

# -- cursors -------------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
)


#: Any text a row can hold: no NUL and no lone surrogate (UTF-8 has none); a cursor
#: holding one is refused, since no row can follow it (tests/unit/test_clean_values.py).
storable_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))


@given(storable_text, instants, st.integers(min_value=-(2**40), max_value=2**40))
def test_a_cursor_gives_back_the_key_it_was_made_of(
    name: str, moment: datetime, number: int
) -> None:
    assert paging.decode(paging.encode([name]), (str,)) == (name,)
    assert paging.decode(paging.encode([moment, number]), (datetime, int)) == (moment, number)


@pytest.mark.parametrize(
    ("cursor", "kinds"),
    [
        ("not a cursor!", (str,)),
        ("", (str,)),
        (paging.encode(["a", "b"]), (str,)),
        (paging.encode([5]), (str,)),
        (paging.encode(["2026-01-01T00:00:00"]), (datetime,)),
        (paging.encode([True]), (int,)),
        (None, (str,)),
    ],
)
def test_a_cursor_from_elsewhere_is_refused_naming_it(cursor: Any, kinds: tuple[type, ...]) -> None:
    with pytest.raises(ValidationError) as caught:
        paging.decode(cursor, kinds)
    assert caught.value.field == "cursor"
    assert caught.value.expected == paging.CURSOR_EXPECTED


# -- labels --------------------------------------------------------------------------------


def test_labels_are_sorted_unique_and_read_from_a_list_or_text() -> None:
    assert check_labels(["b", "a", "b"]) == ("a", "b")
    assert check_labels(" team:ops , nightly,,") == ("nightly", "team:ops")
    assert check_labels("") == ()
    assert check_labels([]) == ()
    assert check_label("env=prod") == "env=prod"


@pytest.mark.parametrize(
    "value",
    [["has space"], ["-leading"], ["x" * 65], [5], 5, {"a": 1}, [f"l{i}" for i in range(21)]],
)
def test_a_bad_label_is_refused(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        check_labels(value)
    assert caught.value.field == "labels"
    assert str(LABELS_MAX) in caught.value.expected


@pytest.mark.parametrize("value", ["", "a,b", "has space", None, 3])
def test_a_label_filter_is_one_label(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        check_label(value)
    assert caught.value.field == "label"


# -- audit ----------------------------------------------------------------------------------

ROW: dict[str, Any] = {
    "task": "t",
    "timer": "every 1h",
    "timezone": "UTC",
    "args": "[]",
    "kwargs": '{"x":1}',
    "options": "{}",
    "signature": None,
    "overlap": "skip",
    "replace_with": "terminate",
    "catchup": "latest",
    "catchup_window": None,
    "jitter": 0.0,
    "start_at": datetime(2026, 12, 1, tzinfo=UTC),
    "end_at": None,
    "remaining": None,
    "max_failures": None,
    "max_attempts": 1,
    "backoff": None,
    "expires": "next",
    "grace": None,
    "max_runtime": 600.0,
    "on_overrun": "none",
    "alert_after": 3,
    "recover_after": None,
    "keep_runs": None,
    "keep_days": 0,
    "skip_calendars": "holidays",
    "enabled": True,
    "broken": False,
    "note": None,
    "silenced_until": None,
    "nextrun": datetime(2026, 12, 1, tzinfo=UTC),
}


def test_a_snapshot_shows_what_people_set_as_json() -> None:
    shown = snapshot(ROW, ("b", "a"))
    assert shown["kwargs"] == {"x": 1}
    assert shown["signature"] is None
    canvas = snapshot({**ROW, "signature": '{"task":"t"}'}, ())["signature"]
    assert canvas == {"task": "t"}
    assert shown["start_at"] == "2026-12-01T00:00:00+00:00"
    assert shown["labels"] == ["a", "b"]
    assert "nextrun" not in shown  # beat moves it; no one sets it


def test_the_difference_holds_only_what_changed() -> None:
    before = snapshot(ROW, ())
    after = snapshot({**ROW, "enabled": False, "note": "maintenance"}, ("x",))
    assert difference(before, after) == (
        {"enabled": True, "note": None, "labels": []},
        {"enabled": False, "note": "maintenance", "labels": ["x"]},
    )
    assert difference(before, before) == ({}, {})


# -- figures ---------------------------------------------------------------------------------


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1), st.floats(0.01, 1.0))
def test_a_percentile_is_a_value_that_occurred_with_enough_below_it(
    values: list[float], fraction: float
) -> None:
    found = percentile(values, fraction)
    assert found in values
    at_most = sum(value <= found for value in values)
    assert at_most >= fraction * len(values) - 1e-9


def test_figures_of_nothing_are_none_and_rates_leave_revoked_out() -> None:
    assert percentile([], 0.5) is None
    assert spread([]) == {"count": 0.0, "p50": None, "p95": None, "max": None}
    assert spread([3.0, 1.0, 2.0]) == {"count": 3.0, "p50": 2.0, "p95": 3.0, "max": 3.0}
    assert success_rate({}) is None
    assert success_rate({"REVOKED": 4}) is None
    assert success_rate({"SUCCESS": 3, "FAILURE": 1, "REVOKED": 10}) == 0.75


# -- HTTP access -------------------------------------------------------------------------------


def settings(admin: str = "", read: str = "") -> Settings:
    return Settings(api_admin_token=admin, api_read_token=read)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.7", False),
        ("example.com", False),
        (None, False),
    ],
)
def test_loopback_addresses(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_tokens_only_loopback_gets_in_and_only_loopback_is_bound() -> None:
    assert access_of(settings(), None, "127.0.0.1") is Access.ADMIN
    assert access_of(settings(), None, "10.0.0.7") is Access.NONE
    check_bind("127.0.0.1", settings())
    with pytest.raises(OpenToNetwork):
        check_bind("0.0.0.0", settings())
    check_bind("0.0.0.0", settings(read=READ))


def test_with_tokens_each_token_gets_its_level_wherever_it_comes_from() -> None:
    both = settings(ADMIN, READ)
    assert access_of(both, ADMIN, "10.0.0.7") is Access.ADMIN
    assert access_of(both, READ, "10.0.0.7") is Access.READ
    assert access_of(both, None, "127.0.0.1") is Access.NONE
    assert access_of(both, ADMIN + "x", "127.0.0.1") is Access.NONE
    assert access_of(settings(read=READ), ADMIN, "127.0.0.1") is Access.NONE
    assert access_of(settings(read=READ), "", "127.0.0.1") is Access.NONE


def test_a_session_cookie_holds_its_id_signed_with_a_key_of_the_tokens() -> None:
    """The cookie holds the session's id and a signature of it: another id, a changed
    signature or another settings token is refused before the store is asked."""
    both = settings(ADMIN, READ)
    cookie = session_cookie(both, "session-1")
    assert ADMIN not in cookie and READ not in cookie
    assert session_secret(both, cookie) == "session-1"
    assert session_secret(settings(ADMIN + "x", READ), cookie) is None
    signature = cookie.rpartition(".")[2]
    for forged in (f"session-2.{signature}", cookie[:-1], "", "x", ".", None):
        assert session_secret(both, forged) is None


def test_a_forms_csrf_token_is_bound_to_its_session_and_the_tokens() -> None:
    both = settings(ADMIN, READ)
    token = csrf_token(both, "cookie-1")
    assert token == csrf_token(both, "cookie-1")
    assert token != csrf_token(both, "cookie-2")
    assert token != csrf_token(settings(ADMIN, READ + "x"), "cookie-1")


def test_bearer_headers_and_actors() -> None:
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None
    assert bearer(None) is None
    assert actor("admin", "10.0.0.7") == "http:admin@10.0.0.7"
    assert actor("read", None, " alice\n\x1b[31m ") == "http:read@unknown (alice[31m)"
    assert actor("admin", "::1", "x" * 100) == f"http:admin@::1 ({'x' * 64})"
    assert actor("ci-deploy", "10.0.0.7") == "http:ci-deploy@10.0.0.7"
    # Starlette reads a header's bytes as Latin-1: UTF-8 is read back as what was sent.
    assert header_text("Élise ✓".encode().decode("latin-1")) == "Élise ✓"
    assert header_text("\xe9lise") == "\xe9lise"  # not UTF-8: kept as Latin-1 read it
    assert header_text("alice") == "alice" and header_text(None) is None


def test_settings_never_repeat_a_token() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.from_app(environ={"BRIDGE_API_ADMIN_TOKEN": "short"})
    assert caught.value.value == "<hidden>"
    assert "short" not in str(caught.value)
    assert ADMIN not in repr(settings(ADMIN, READ))
    assert timedelta(seconds=Settings().default_grace) == timedelta(minutes=1)


@pytest.mark.parametrize("name", ["runs", "team/report/runs", "a/pause", "edit", "x/silence"])
def test_a_name_ending_in_a_word_of_the_paths_is_refused(name: str) -> None:
    from bridge.rules.definition import check_name

    with pytest.raises(ValidationError) as caught:
        check_name(name)
    assert caught.value.field == "name"
    assert "does not end with '/'" in caught.value.expected


@pytest.mark.parametrize(
    "name", [".", "..", "a/./b", "evil/../victim", "a/..", "../x", "a//b", "/a", "jobs/"]
)
def test_a_name_with_a_part_a_path_would_lose_is_refused(name: str) -> None:
    """Clients tidy ``.``, ``..`` and empty parts out of a URL's path: such a name would
    address another schedule, or none."""
    from bridge.rules.definition import check_name

    with pytest.raises(ValidationError) as caught:
        check_name(name)
    assert (caught.value.field, caught.value.value) == ("name", name)
    assert "none of them empty, '.' or '..'" in caught.value.expected


def test_names_with_slashes_otherwise_stand() -> None:
    from bridge.rules.definition import check_name

    assert check_name("team/report") == "team/report"
    assert check_name("runs-daily") == "runs-daily"
    assert check_name("v1.2/...") == "v1.2/..."


def test_requests_are_refused_from_other_sites_and_other_names() -> None:
    from bridge.manage.web.security import request_refusal

    open_server, closed = settings(), settings(ADMIN)
    assert request_refusal(open_server, "GET", "127.0.0.1:8555", None) is None
    assert request_refusal(open_server, "GET", "localhost:8555", None) is None
    assert request_refusal(open_server, "GET", "[::1]:8555", None) is None
    assert request_refusal(open_server, "GET", "evil.example:8555", None) is not None
    assert request_refusal(closed, "GET", "bridge.example.com", None) is None
    for server in (open_server, closed):
        host = "127.0.0.1:8555"
        assert request_refusal(server, "POST", host, "http://127.0.0.1:8555") is None
        assert request_refusal(server, "POST", host, "https://evil.example") is not None
        assert request_refusal(server, "DELETE", host, "null") is not None
        assert request_refusal(server, "GET", host, "https://evil.example") is None


def test_notes_are_text_without_control_characters() -> None:
    from bridge.rules.definition import check_note

    assert check_note("line one\nline two") == "line one\nline two"
    assert check_note("") is None
    for bad in ({"x": 1}, 5, "bell\a", "x" * 1001):
        with pytest.raises(ValidationError) as caught:
            check_note(bad)
        assert caught.value.field == "note"
