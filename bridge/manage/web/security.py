"""Who may do what over HTTP: bearer tokens, the loopback rule, and who the audit log names.

Two tokens, from the settings (``bridge_api_admin_token``,
``bridge_api_read_token``): the admin token reads and changes, the read
token only reads. They are compared in constant time. With neither
configured, only a client on a loopback address is served (as admin), and
``bridge serve`` refuses to listen anywhere else: a server that can send
tasks is never open to the network without a token.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import unicodedata

from bridge.config import Settings
from bridge.errors import BridgeError

#: The header a client may name a person or a system in, for the audit log.
ACTOR_HEADER = "x-bridge-actor"
ACTOR_MAX = 64


class Access(enum.IntEnum):
    """What a caller may do; each level includes the ones below it."""

    NONE = 0
    READ = 1
    ADMIN = 2


class OpenToNetwork(BridgeError):
    """``bridge serve`` was asked to listen beyond loopback with no token configured."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"host: got {host!r}, expected a loopback address (127.0.0.1, ::1, localhost) "
            "while no API token is set; set bridge_api_admin_token (BRIDGE_API_ADMIN_TOKEN) "
            "and/or bridge_api_read_token to serve other hosts"
        )


def tokens_configured(settings: Settings) -> bool:
    return bool(settings.api_admin_token or settings.api_read_token)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is on this machine only."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: Settings) -> None:
    """Refuse to listen on ``host`` if that would serve the network without a token."""
    if not tokens_configured(settings) and not is_loopback(host):
        raise OpenToNetwork(host)


def access_of(settings: Settings, token: str | None, client_host: str | None) -> Access:
    """What a request with bearer ``token`` from ``client_host`` may do."""
    if not tokens_configured(settings):
        return Access.ADMIN if is_loopback(client_host) else Access.NONE
    if token is None:
        return Access.NONE
    given = token.encode()
    # Both comparisons always run, so the time taken says nothing of which matched.
    admin = bool(settings.api_admin_token) and hmac.compare_digest(
        given, settings.api_admin_token.encode()
    )
    read = bool(settings.api_read_token) and hmac.compare_digest(
        given, settings.api_read_token.encode()
    )
    if admin:
        return Access.ADMIN
    return Access.READ if read else Access.NONE


#: Methods that change something: a browser may be made to send them from another site.
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def hostname_of(host_header: str | None) -> str | None:
    """The host name of a ``Host`` header, without its port (``[::1]:8555`` gives ``::1``)."""
    if not host_header:
        return None
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else None
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def request_refusal(
    settings: Settings, method: str, host: str | None, origin: str | None
) -> str | None:
    """Why a request must be refused before anything reads it, or None.

    Without a token, the server answers only requests addressed to a loopback
    name: a page of another site that resolves its own name to 127.0.0.1 (DNS
    rebinding) is refused. And a request that changes something is refused
    when the browser says it comes from another site (``Origin``), whoever
    is signed in.
    """
    if not tokens_configured(settings) and not is_loopback(hostname_of(host)):
        return "with no API token set, only requests addressed to a loopback name are served"
    if method in UNSAFE_METHODS and origin is not None:
        # "null" is what a sandboxed page or a redirect sends: another site too.
        site = origin.partition("://")[2].split("/")[0]
        if site != host:
            return "a change requested from another site is refused"
    return None


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def actor(access: Access, client_host: str | None, claimed: str | None = None) -> str:
    """Who the audit log says made a change over HTTP: the token's role and the client's
    address, and the name the client gave in ``X-Bridge-Actor`` (kept short and printable)."""
    role = "admin" if access is Access.ADMIN else "read"
    who = f"http:{role}@{client_host or 'unknown'}"
    if claimed:
        shown = "".join(c for c in claimed if unicodedata.category(c)[0] not in "CZ" or c == " ")
        shown = shown.strip()[:ACTOR_MAX]
        if shown:
            who += f" ({shown})"
    return who
