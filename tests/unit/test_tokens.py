"""The rules of the HTTP server's credentials: token names, roles and expiry, the strength
of the settings tokens, the sign-in limit, and which forwarded address is believed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.rules.tokens import (
    TOKEN_PREFIX,
    Role,
    SignInLimit,
    check_role,
    check_token_name,
    client_address,
    digest,
    expiry,
    may_be_named_token,
    session_end,
    trusted_proxies,
)

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("name", ["ci", "deploy-bot", "team.ops_2", "a" * 64, "0day"])
def test_a_plain_short_name_names_a_token(name: str) -> None:
    assert check_token_name(name) == name


@pytest.mark.parametrize(
    "name", ["", " ci", "CI", "has space", "a" * 65, "-lead", "ci\n", "admin", "read", 7, None]
)
def test_other_names_are_refused_naming_the_field(name: object) -> None:
    with pytest.raises(ValidationError) as caught:
        check_token_name(name)
    assert caught.value.field == "name"
    assert caught.value.value == name


def test_roles_and_expiry() -> None:
    assert check_role("read") is Role.READ
    assert check_role("admin") is Role.ADMIN
    for bad in ("Admin", "write", "", None):
        with pytest.raises(ValidationError, match=r"role: got .*, expected read or admin"):
            check_role(bad)
    assert expiry(None, NOW) is None
    assert expiry("none", NOW) is None
    assert expiry("90d", NOW) == NOW + timedelta(days=90)
    assert expiry("1h30m", NOW) == NOW + timedelta(minutes=90)
    for bad in ("soon", "-1d", "0s", "99999d"):
        with pytest.raises(ValidationError) as caught:
            expiry(bad, NOW)
        assert caught.value.field == "expires"


def test_the_store_keeps_a_digest_that_is_not_the_secret() -> None:
    secret = TOKEN_PREFIX + "x" * 43
    assert may_be_named_token(secret)
    assert not may_be_named_token(secret[:-1])
    assert not may_be_named_token("admin-token-0123456789abcdef")
    assert digest(secret) == digest(secret) != digest(secret + "y")
    assert secret not in digest(secret) and len(digest(secret)) == 64


def test_a_session_ends_with_its_token() -> None:
    week = timedelta(days=7)
    assert session_end(NOW, week, None) == NOW + week
    assert session_end(NOW, week, NOW + timedelta(hours=1)) == NOW + timedelta(hours=1)
    assert session_end(NOW, week, NOW + timedelta(days=30)) == NOW + week


@pytest.mark.parametrize(
    "token",
    [
        " " * 20,
        "short-token",
        "a" * 40,
        "abababababababababab",
        "abc123" * 2 + "  ",
        "0123456789 abcdefghij",
        "\t" * 16 + "abc",
    ],
)
def test_a_weak_settings_token_is_refused_at_start_without_repeating_it(token: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.from_app(environ={"BRIDGE_API_READ_TOKEN": token})
    assert caught.value.field == "bridge_api_read_token"
    assert caught.value.value == "<hidden>"
    assert str(caught.value).startswith(
        "bridge_api_read_token: got '<hidden>', expected a token of at least 16 characters"
    )
    if token.strip():
        assert token.strip() not in str(caught.value)


def test_a_settings_token_is_compared_without_the_spaces_around_it() -> None:
    settings = Settings.from_app(environ={"BRIDGE_API_ADMIN_TOKEN": " 0123456789abcdef\n"})
    assert settings.api_admin_token == "0123456789abcdef"
    assert Settings.from_app(environ={"BRIDGE_API_ADMIN_TOKEN": ""}).api_admin_token == ""


def test_sign_ins_are_limited_per_address_within_a_window() -> None:
    limit = SignInLimit(failures=5, window=60.0)
    for second in range(5):
        assert limit.wait("10.0.0.7", 100.0 + second) == 0.0
        limit.failed("10.0.0.7", 100.0 + second)
    # The sixth try waits until the first failure is a minute old; others are not held up.
    assert limit.wait("10.0.0.7", 105.0) == pytest.approx(55.0)
    assert limit.wait("10.0.0.8", 105.0) == 0.0
    assert limit.wait("10.0.0.7", 160.0) == 0.0
    limit.failed("10.0.0.7", 160.0)
    assert limit.wait("10.0.0.7", 160.5) == pytest.approx(0.5)


def test_the_limit_forgets_the_oldest_address_past_its_size() -> None:
    limit = SignInLimit(failures=1, window=60.0, clients=2)
    for address in ("a", "b", "c"):
        limit.failed(address, 10.0)
    assert limit.wait("a", 11.0) == 0.0
    assert limit.wait("b", 11.0) > 0 and limit.wait("c", 11.0) > 0


PROXIES = trusted_proxies("10.0.0.5, 172.16.0.0/12\n::1")


def test_trusted_proxies_are_addresses_and_networks() -> None:
    assert trusted_proxies("") == ()
    assert [str(network) for network in PROXIES] == ["10.0.0.5/32", "172.16.0.0/12", "::1/128"]
    with pytest.raises(ValueError, match="addresses or networks"):
        trusted_proxies("10.0.0.5, proxy.example")
    with pytest.raises(ValidationError) as caught:
        Settings.from_app(environ={"BRIDGE_TRUSTED_PROXIES": "10.0.0.300"})
    assert caught.value.field == "bridge_trusted_proxies"


@pytest.mark.parametrize(
    ("peer", "x_forwarded_for", "forwarded", "client"),
    [
        # Not from a trusted proxy: the headers change nothing.
        ("127.0.0.1", "203.0.113.9", None, "127.0.0.1"),
        ("192.0.2.1", "203.0.113.9", 'for="203.0.113.9"', "192.0.2.1"),
        # From one: the last hop not a trusted proxy, whatever the client wrote before.
        ("10.0.0.5", "203.0.113.9", None, "203.0.113.9"),
        ("10.0.0.5", "6.6.6.6, 203.0.113.9", None, "203.0.113.9"),
        ("10.0.0.5", "6.6.6.6, 203.0.113.9, 172.16.4.4", None, "203.0.113.9"),
        ("10.0.0.5", "not-an-address, 172.16.4.4", None, "172.16.4.4"),
        ("10.0.0.5", None, None, "10.0.0.5"),
        # Forwarded wins over X-Forwarded-For, with its quoting and ports.
        ("10.0.0.5", "6.6.6.6", 'for="[2001:db8::7]:443";proto=https', "2001:db8::7"),
        ("10.0.0.5", None, "for=6.6.6.6, for=198.51.100.2:8080", "198.51.100.2"),
        ("10.0.0.5", None, "for=unknown", "10.0.0.5"),
    ],
)
def test_the_client_is_the_peer_unless_a_trusted_proxy_forwards(
    peer: str, x_forwarded_for: str | None, forwarded: str | None, client: str
) -> None:
    assert client_address(peer, x_forwarded_for, forwarded, PROXIES) == client


def test_with_no_trusted_proxy_the_peer_is_the_client() -> None:
    assert client_address("127.0.0.1", "203.0.113.9", None, ()) == "127.0.0.1"
