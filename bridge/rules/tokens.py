"""The rules of the HTTP server's credentials: named tokens, the settings tokens, sign-in
attempts and the addresses a proxy forwards.

A named token is a random secret the server hands out once; the store keeps
only its SHA-256 digest, which is as good as the secret for looking it up
and useless for signing in. A digest without salt or stretching is enough
because the secret is 256 random bits, not a password a person chose.
The settings tokens (``bridge_api_admin_token``, ``bridge_api_read_token``)
are chosen by people, so they are held to a minimum instead.

Everything here is pure: it takes ``now`` and the values, and decides.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import re
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from bridge.errors import ValidationError
from bridge.rules.policy import duration
from bridge.rules.values import is_clear

#: What every named token starts with: a scanner of leaked secrets can tell it, and the
#: server looks up no text that cannot be one.
TOKEN_PREFIX = "bridge_"
#: The random part's length: 32 bytes in URL-safe base64.
TOKEN_BODY = 43
#: A token's name: what the audit log says after ``http:``.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME_EXPECTED = (
    "1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a letter or a digit"
)
#: The names the settings tokens and the loopback rule go by in the audit log.
RESERVED_NAMES = frozenset({"admin", "read", "loopback", "unknown"})
#: The shortest settings token, and the fewest different characters it may have.
SETTINGS_TOKEN_MIN = 16
SETTINGS_TOKEN_DISTINCT = 6
SETTINGS_TOKEN_EXPECTED = (
    f"a token of at least {SETTINGS_TOKEN_MIN} characters (not counting spaces at either end),"
    f" with no space inside and at least {SETTINGS_TOKEN_DISTINCT} different characters"
    " (openssl rand -hex 24 makes one)"
)


class Role(enum.StrEnum):
    """What a token allows: ``read`` the API's reads and ``/metrics``, ``admin`` everything."""

    READ = "read"
    ADMIN = "admin"


def check_token_name(name: object) -> str:
    """``name`` if it may name a token: short, plain, and not one of the settings tokens'."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValidationError("name", name, NAME_EXPECTED)
    if name in RESERVED_NAMES:
        reserved = ", ".join(sorted(RESERVED_NAMES))
        raise ValidationError("name", name, f"{NAME_EXPECTED}, other than {reserved}")
    return name


def check_role(role: object) -> Role:
    if isinstance(role, str) and role in {member.value for member in Role}:
        return Role(role)
    raise ValidationError("role", role, "read or admin")


def expiry(expires: object, now: datetime) -> datetime | None:
    """When a token made at ``now`` with ``--expires`` ``expires`` (a duration such as
    ``90d``, or none) stops working; None: never."""
    if expires is None or is_clear(expires):
        return None
    return now + duration("expires", expires)


def digest(secret: str) -> str:
    """What the store keeps of a secret (a token, a session's id): its SHA-256, in hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def may_be_named_token(text: str) -> bool:
    """Whether ``text`` has the shape of a named token (worth looking up at all)."""
    return text.startswith(TOKEN_PREFIX) and len(text) == len(TOKEN_PREFIX) + TOKEN_BODY


def settings_token(value: str) -> str:
    """A settings token as the server compares it: without spaces at either end (a line
    read from a file keeps its newline). Raises ValueError when it is too weak to guard
    a server: short, spaced, only spaces, or of a few characters repeated. Only an empty
    value leaves the setting unset."""
    if not value:
        return ""
    token = value.strip()
    if (
        len(token) < SETTINGS_TOKEN_MIN
        or any(c.isspace() for c in token)
        or len(set(token)) < SETTINGS_TOKEN_DISTINCT
    ):
        raise ValueError(SETTINGS_TOKEN_EXPECTED)
    return token


# -- sign-in attempts --------------------------------------------------------------------------


class SignInLimit:
    """At most ``failures`` failed sign-ins per client address within ``window`` seconds.

    A sign-in that succeeds clears nothing: a caller holding the read token
    could otherwise guess at the admin token between two good sign-ins.

    Kept in memory by whoever holds it (each server process), for at most
    ``clients`` addresses: past that, the address that failed longest ago is
    forgotten first. Not safe to share between threads; the server calls it
    from its event loop only.
    """

    def __init__(self, failures: int = 5, window: float = 60.0, clients: int = 10_000) -> None:
        self.failures = failures
        self.window = window
        self.clients = clients
        self._failed: dict[str, deque[float]] = {}

    def wait(self, client: str, now: float) -> float:
        """Seconds ``client`` must wait before it may try again (0: it may now)."""
        times = self._recent(client, now)
        if len(times) < self.failures:
            return 0.0
        return max(times[-self.failures] + self.window - now, 0.0)

    def failed(self, client: str, now: float) -> None:
        times = self._recent(client, now)
        times.append(now)
        while len(times) > self.failures:
            times.popleft()
        self._failed.pop(client, None)
        self._failed[client] = times  # the latest failure last, for forgetting in order
        while len(self._failed) > self.clients:
            del self._failed[next(iter(self._failed))]

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failed.get(client, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times


# -- forwarded addresses ---------------------------------------------------------------------

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
PROXIES_EXPECTED = (
    "addresses or networks of the proxies in front of the server, separated by commas"
    " ('10.0.0.5, 172.16.0.0/12'), or nothing"
)


def trusted_proxies(text: str) -> tuple[Network, ...]:
    """The networks of ``bridge_trusted_proxies``; ValueError when one is not an address."""
    networks = []
    for part in text.replace("\n", ",").split(","):
        if part.strip():
            try:
                networks.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError:
                raise ValueError(PROXIES_EXPECTED) from None
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # [2001:db8::1]:443
        text = text[1 : text.find("]")] if "]" in text else text
    elif text.count(":") == 1:  # 192.0.2.7:443
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: str | None, proxies: Sequence[Network]) -> bool:
    found = None if address is None else _address(address)
    return found is not None and any(found in network for network in proxies)


def forwarded_for(forwarded: str) -> list[str]:
    """The ``for=`` addresses of a ``Forwarded`` header (RFC 7239), first hop first."""
    hops = []
    for element in forwarded.split(","):
        for pair in element.split(";"):
            key, _, value = pair.partition("=")
            if key.strip().lower() == "for":
                hops.append(value.strip().strip('"'))
    return hops


def client_address(
    peer: str | None,
    x_forwarded_for: str | None,
    forwarded: str | None,
    proxies: Sequence[Network],
) -> str | None:
    """The address of the client a request comes from.

    The socket's peer, unless it is one of the trusted ``proxies``: then the
    hops the proxies added (``Forwarded``, else ``X-Forwarded-For``) are read
    from the last, skipping trusted proxies, and the first address that is not
    one is the client. A hop that is not an address stops the walk there: what
    a client wrote before reaching the first proxy is never believed.
    """
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops: Iterable[str] = (
        forwarded_for(forwarded)
        if forwarded
        else [hop.strip() for hop in (x_forwarded_for or "").split(",") if hop.strip()]
    )
    client = peer
    for hop in reversed(list(hops)):
        found = _address(hop)
        if found is None:
            break
        client = str(found)
        if not any(found in network for network in proxies):
            break
    return client


def session_end(now: datetime, lifetime: timedelta, token_expires: datetime | None) -> datetime:
    """When a dashboard session begun at ``now`` ends: after ``lifetime``, or when the
    token it was begun with expires, whichever comes first."""
    end = now + lifetime
    return end if token_expires is None else min(end, token_expires)
