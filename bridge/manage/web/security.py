"""Who may do what over HTTP: bearer tokens, the loopback rule, and who the audit log names.

Two tokens from the settings (``bridge_api_admin_token``,
``bridge_api_read_token``): the admin token reads and changes, the read
token only reads. They are compared in constant time. With neither
configured, only a client on a loopback address is served (as admin), and
``bridge serve`` refuses to listen anywhere else: a server that can send
tasks is never open to the network without a token. Named tokens
(``bridge token create``) are looked up in the store by their digest,
in either case, and are refused the moment they are revoked or expire.

The client's address is the socket's peer; a proxy's ``Forwarded`` or
``X-Forwarded-For`` is believed only from a proxy ``bridge_trusted_proxies``
names (:class:`ForwardedClient`).

The dashboard's session cookie and its forms' CSRF tokens are signed here
too, with keys derived from the settings tokens.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import unicodedata
from dataclasses import dataclass
from datetime import timedelta

from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.manage.api import Bridge, Token
from bridge.manage.web.answers import ASGIApp, Receive, Scope, Send
from bridge.rules.tokens import Role, client_address, may_be_named_token, trusted_proxies

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


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in a time that says nothing of where they differ.

    Compared as UTF-8 bytes: ``hmac.compare_digest`` refuses text with any character
    beyond ASCII with a ``TypeError``, and a form, a link or a header can carry any.
    """
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def access_of(settings: Settings, token: str | None, client_host: str | None) -> Access:
    """What a request with bearer ``token`` from ``client_host`` may do."""
    if not tokens_configured(settings):
        return Access.ADMIN if is_loopback(client_host) else Access.NONE
    if token is None:
        return Access.NONE
    # Both comparisons always run, so the time taken says nothing of which matched.
    admin = bool(settings.api_admin_token) and same_secret(token, settings.api_admin_token)
    read = bool(settings.api_read_token) and same_secret(token, settings.api_read_token)
    if admin:
        return Access.ADMIN
    return Access.READ if read else Access.NONE


@dataclass(frozen=True)
class Caller:
    """Who is asking: what they may do, and the name the audit log gives them (``admin`` or
    ``read`` for a settings token and the loopback rule, or a named token's name)."""

    access: Access
    name: str
    #: The named token they hold, if they hold one.
    token: Token | None = None

    @property
    def role(self) -> Role:
        return Role.ADMIN if self.access is Access.ADMIN else Role.READ


def caller_of(bridge: Bridge, token: str | None, client_host: str | None) -> Caller:
    """Who a request with bearer ``token`` from ``client_host`` is. A text shaped like a
    named token is that token or no one: a revoked one does not fall back on the loopback
    rule."""
    if token is not None and may_be_named_token(token):
        named = bridge.token_holder(token)
        if named is None:
            return Caller(Access.NONE, "unknown")
        return Caller(Access[named.role.upper()], named.name, named)
    access = access_of(bridge.settings, token, client_host)
    return Caller(access, "admin" if access is Access.ADMIN else "read")


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


def header_text(value: str | None) -> str | None:
    """A header's text as the client wrote it.

    HTTP carries a header's bytes, which Starlette reads as Latin-1; a client
    writing beyond ASCII sends UTF-8 (curl from a UTF-8 terminal, httpx, browsers'
    ``fetch``), and ``Élise`` would otherwise be kept as ``Ã\x89lise``. Bytes that
    are not UTF-8 stay as Latin-1 read them.
    """
    if value is None or value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def actor(name: str, client_host: str | None, claimed: str | None = None) -> str:
    """Who the audit log says made a change over HTTP: the token's name (``admin`` and
    ``read`` for the settings tokens), the client's address, and the name the client gave
    in ``X-Bridge-Actor`` (kept short and printable)."""
    who = f"http:{name}@{client_host or 'unknown'}"
    if claimed:
        shown = "".join(c for c in claimed if unicodedata.category(c)[0] not in "CZ" or c == " ")
        shown = shown.strip()[:ACTOR_MAX]
        if shown:
            who += f" ({shown})"
    return who


# -- the dashboard's sessions and forms ------------------------------------------------------

SESSION_LIFETIME = timedelta(days=7)


def _key(settings: Settings, purpose: str) -> bytes:
    """A key derived from the tokens, the same in every server process (changing a token
    ends every session and form). Without a token it protects nothing secret: requests
    are then refused unless addressed to a loopback name from this site."""
    material = "\0".join(
        (purpose, settings.api_admin_token, settings.api_read_token, settings.database_url)
    )
    return hashlib.sha256(material.encode()).digest()


def _session_key(settings: Settings) -> bytes:
    """The key sessions are signed with."""
    return _key(settings, "bridge-session")


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def session_cookie(settings: Settings, secret: str) -> str:
    """The cookie of the dashboard session ``secret``, signed: a cookie that was not made
    with the current settings tokens is refused before the store is asked."""
    return f"{secret}.{_sign(_session_key(settings), secret)}"


def session_secret(settings: Settings, cookie: str | None) -> str | None:
    """The session secret a cookie carries, when its signature holds; None otherwise. The
    store says whether that session still lasts."""
    if not cookie or "." not in cookie:
        return None
    secret, _, signature = cookie.rpartition(".")
    if not same_secret(signature, _sign(_session_key(settings), secret)):
        return None
    return secret


def message_signature(settings: Settings, message: str) -> str:
    """The signature of a message a dashboard page is sent back with after an action
    (``?done=``, ``?error=``), so that a page shows only what this server wrote."""
    return _sign(_key(settings, "bridge-message"), message)


def csrf_token(settings: Settings, basis: str) -> str:
    """The CSRF token of the dashboard's forms for the session ``basis`` (its cookie, or
    ``loopback`` with no token configured)."""
    return _sign(_key(settings, "bridge-csrf"), basis)


# -- the client's address ------------------------------------------------------------------


class ForwardedClient:
    """Sets the request's client to the address a trusted proxy forwarded.

    A request whose socket peer is one of ``bridge_trusted_proxies`` is
    treated as coming from the client the proxies name (``Forwarded``, else
    ``X-Forwarded-For``, read from the last hop); from any other peer those
    headers change nothing. Everything after (the loopback rule, the sign-in
    limit, the audit log) reads the address this leaves.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.proxies = trusted_proxies(settings.trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.proxies and scope.get("client"):
            # A header sent several times is one list, in order (RFC 9110, 5.3).
            hops: dict[str, list[str]] = {"x-forwarded-for": [], "forwarded": []}
            for key, value in scope["headers"]:
                hops.get(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
            peer = scope["client"][0]
            client = client_address(
                peer,
                ",".join(hops["x-forwarded-for"]) or None,
                ",".join(hops["forwarded"]) or None,
                self.proxies,
            )
            if client != peer:
                scope = {**scope, "client": (client, 0)}
        await self.app(scope, receive, send)
