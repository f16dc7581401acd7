"""How the server answers, whatever happened: JSON that always encodes, one shape for every
error, a 500 that keeps the connection, and the headers every answer carries.

- :class:`JSONAnswer` encodes any value the bridge reads back. Values
  refused on the way in (lone surrogates, ``NaN``) may still be stored by an
  older release: a lone surrogate is answered as the ``\\udfff`` escape it
  was written as, a number that is not finite as ``null``.
- :class:`Contained` turns a defect into a logged 500 answer instead of an
  exception, which would make uvicorn drop the connection.
- :class:`SecurityHeaders` adds the Content-Security-Policy and its friends
  to every answer, so that no other site can frame a page.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.responses import JSONResponse

from bridge.rules.values import answerable, json_or_text

logger = logging.getLogger("bridge.web")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class JSONAnswer(JSONResponse):
    """A JSON response that encodes every value the bridge can read back.

    Encoded by orjson (UTF-8, compact), which also writes the views' times and
    tuples itself, asking each view for its ``json_fields``: a page of 100
    schedules in a tenth of the time the standard library took to turn it
    into text. A value orjson refuses (a lone surrogate, an integer beyond 64
    bits) is encoded again by the standard library, every non-ASCII
    character escaped; a number that is not finite is null either way.
    """

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, default=_json_fields, option=_ORJSON_OPTIONS)
        except orjson.JSONEncodeError:  # also what _json_fields's TypeError becomes
            pass
        content = _ready(content)
        try:
            return json.dumps(
                content, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            ).encode("utf-8")
        except ValueError:  # UnicodeEncodeError is one
            return json.dumps(
                answerable(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")


#: Views (dataclasses) through :func:`_json_fields`, keys of any kind as text, as
#: ``json.dumps`` writes them.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS


def _json_fields(value: Any) -> Any:
    """orjson's hook for what it does not write itself: a view, as its ``json_fields``."""
    fields = getattr(value, "json_fields", None)
    if fields is None:
        raise TypeError(f"{type(value).__name__} is not JSON")
    return fields(_decoded)


def _decoded(text: str | None) -> Any:
    """A stored JSON column decoded by orjson, or as :func:`json_or_text` decodes what orjson
    refuses (``NaN``, an escaped lone surrogate, text that is not JSON) or would read
    otherwise (an integer beyond 64 bits, which it reads as a float): the standard
    library's decoder took longer than the rest of a view's JSON."""
    if text is None:
        return None
    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json_or_text(text)


#: Digits enough to hold an integer beyond 64 bits (somewhere in the text, to be safe).
_LONG_NUMBER = re.compile(r"\d{19}")


def _ready(content: Any) -> Any:
    """``content`` JSON-ready for the standard library: a view as its ``to_json``."""
    to_json = getattr(content, "to_json", None)
    return content if to_json is None else to_json()


async def answer_now(send: Send, status: int, body: dict[str, Any], **headers: str) -> None:
    """Send a whole JSON answer from a middleware, before the application has answered."""
    await JSONAnswer(body, status_code=status, headers=headers or None)(
        {"type": "http"}, _nothing, send
    )


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


class HTTPOnly:
    """An ASGI middleware that acts on HTTP requests and passes anything else on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class Contained(HTTPOnly):
    """Answers a defect with ``500 {"error": "internal"}`` and logs its traceback.

    Starlette sends its 500 page and then raises the exception again, for the
    server to log; uvicorn then closes the connection without saying so, and
    a client's next request on it is reset. Here the exception stops, so the
    500 is a complete answer on a connection that stays open.
    """

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            logger.error("bridge: %s %s failed", scope["method"], scope["path"], exc_info=exc)
            if started:  # half an answer is out: only closing the connection ends it
                raise
            body = {"error": "internal", "message": f"{type(exc).__name__}; see the server's log"}
            await answer_now(send, 500, body)


#: The pages' policy: their own scripts, styles and images only (no inline script, no
#: ``on*=`` attribute), forms posted to the server itself, and never inside a frame.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
#: ``Referrer-Policy: same-origin``: the dashboard's addresses (schedule names) go to no
#: other site, such as Flower; ``no-referrer`` would make browsers send ``Origin: null``
#: on the dashboard's own forms, which the cross-site check refuses.
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders(HTTPOnly):
    """Adds :data:`SECURITY_HEADERS` to every HTTP answer, pages, API and errors alike."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)
