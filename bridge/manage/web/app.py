"""The ASGI application of ``bridge serve``: the dashboard at ``/``, the REST API, ``/metrics``,
``/healthz`` and ``/readyz``, and the API's interactive page at ``/docs``.

Built on FastAPI, which derives the OpenAPI document from the handlers.
:func:`create_app` builds it for a Celery app, so that it can also be
mounted in a project's own ASGI application::

    from bridge.manage.web import create_app
    api = create_app(celery_app)

No error reaches a client as a traceback: the bridge's refusals become
JSON bodies naming the field, the value given and what was expected, and
anything unexpected is logged and answered 500 with one line.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from celery import Celery
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from bridge.config import Settings
from bridge.errors import (
    BridgeError,
    CalendarNotFound,
    IncidentNotFound,
    RunNotFound,
    RunSkipped,
    ScheduleNotFound,
    SendFailed,
    StateConflict,
    ValidationError,
)
from bridge.manage.api import Bridge, DatabaseError, default_actor, error_reason, is_conflict
from bridge.manage.web import dashboard, metrics
from bridge.manage.web.answers import (
    ASGIApp,
    Contained,
    JSONAnswer,
    Message,
    Receive,
    Scope,
    SecurityHeaders,
    Send,
    answer_now,
)
from bridge.manage.web.routes import NotAllowed, Scraper, check_caller, router
from bridge.manage.web.security import Access, ForwardedClient, request_refusal
from bridge.rules.repeats import Repeats
from bridge.rules.tokens import SignInLimit
from bridge.version import __version__

logger = logging.getLogger("bridge.web")

DESCRIPTION = (
    "Schedules are rows in `periodic_task`; `celery beat -S bridge` fires them; workers "
    "record each run in `task_execution`. Reads need the read or the admin token "
    "(`Authorization: Bearer ...`), changes the admin token; a refused value is answered "
    "422 with the field, the value given and what was expected."
)
#: Where Swagger UI's files are served from, so that /docs needs no third-party host.
DOCS_STATIC = "/docs/static"


class Refusals:
    """The database's refusals of requests, told in the log once a minute for the same
    words (:mod:`bridge.rules.repeats`): an outage is a line a minute, not one for each
    request a dashboard or a monitor sends meanwhile. Handlers run on any of the
    server's threads."""

    def __init__(self) -> None:
        self._repeats = Repeats()
        self._lock = threading.Lock()

    def told(self, reason: str) -> str | None:
        """What the log says of a refusal for ``reason`` now (None: nothing, this time)."""
        with self._lock:
            untold = self._repeats.tell(reason, time.monotonic())
        if untold is None:
            return None
        return f"{reason} ({untold} more refused so since the last such line)" if untold else reason


def create_app(celery_app: Celery | None = None, *, bridge: Bridge | None = None) -> FastAPI:
    """The API for ``celery_app`` (its settings name the database and the tokens), or for
    ``bridge`` when one is given."""
    bridge = bridge or Bridge(celery_app, actor=default_actor("http"))
    app = FastAPI(
        title="celery-periodic-bridge",
        description=DESCRIPTION,
        version=__version__,
        docs_url=None,
        redoc_url=None,
        default_response_class=JSONAnswer,
    )
    app.state.bridge = bridge
    app.state.overview = dashboard.overview_reading(bridge)
    app.state.queue_names = dashboard.queue_names_reading(bridge)
    app.state.queues = dashboard.queues_reading(bridge, app.state.queue_names)
    app.state.outlook = dashboard.outlook_reading(bridge)
    #: Failed sign-ins by client address, in this process's memory.
    app.state.sign_in_limit = SignInLimit()
    app.state.refusals = Refusals()
    app.include_router(router)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.HERE / "static"), "static")
    _add_errors(app)
    _add_operations(app, bridge)
    _add_docs(app)
    _declare_errors(app)
    # The last added is the outermost: headers go on every answer, a defect is answered
    # 500 whatever raised it, the guard turns requests away before anything reads them, and
    # what is read sees the client a trusted proxy names.
    app.add_middleware(ForwardedClient, settings=bridge.settings)
    app.add_middleware(RequestGuard, settings=bridge.settings)
    app.add_middleware(Contained)
    app.add_middleware(SecurityHeaders)
    return app


# -- errors ------------------------------------------------------------------------------

#: How deep a refused value is repeated; deeper parts are shown as "...".
SHOWN_DEPTH = 8


def refusal(exc: ValidationError) -> dict[str, Any]:
    """The body of a refused value: the field, the value given, what was expected."""
    return {
        "error": "invalid",
        "field": exc.field,
        "value": _jsonable(exc.value),
        "expected": exc.expected,
        "message": str(exc),
    }


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A refused value as JSON can repeat it: a number that is not finite as its name (it is
    what was refused), and nothing deeper than :data:`SHOWN_DEPTH`."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth >= SHOWN_DEPTH:
        return "..."
    if isinstance(value, list | tuple):
        return [_jsonable(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item, depth + 1) for key, item in value.items()}
    return str(value)


#: What FastAPI's 400 for a body it could not decode was caused by, in a refusal's words.
UNREADABLE = {
    UnicodeDecodeError: "JSON in UTF-8 (the body is not UTF-8 text)",
    RecursionError: "JSON nested at most a few hundred deep",
    ValueError: "JSON whose whole numbers have at most 4300 digits",
}
#: The ``error`` of an answer the HTTP layer itself gives, by status.
HTTP_ERRORS = {
    400: "malformed",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


#: The methods a 405's ``Allow`` may name.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """The methods the resource of a request refused with 405 takes: each method that the
    routing would hand to a route of the same path template as the one that refused it.
    Starlette's own ``Allow`` names the methods of that one route only, though a resource
    is often served by several (``GET`` and ``POST`` of ``/api/v1/schedules``)."""
    refused = _route_for(request, request.method, Match.PARTIAL)
    if refused is None:
        return []
    return [
        method
        for method in METHODS
        if (route := _route_for(request, method, Match.FULL)) is not None
        and route.path == refused.path
    ]


def _route_for(request: Request, method: str, least: Match) -> Route | None:
    """The first route whose match of the request's path with ``method`` is at least
    ``least``, or None: the API's, the dashboard's, then the application's own."""
    scope = {**request.scope, "method": method}
    own = [route for route in request.app.router.routes if isinstance(route, Route)]
    for route in [*router.routes, *dashboard.router.routes, *own]:
        if not isinstance(route, Route):
            continue
        match, _ = route.matches(scope)
        if match is Match.FULL or (match is Match.PARTIAL and least is Match.PARTIAL):
            return route
    return None


def malformed(expected: str) -> dict[str, Any]:
    """The body of a request whose body is not a JSON value at all."""
    return {
        "error": "malformed",
        "field": "body",
        "expected": expected,
        "message": f"body: expected {expected}",
    }


def _add_errors(app: FastAPI) -> None:
    def answer(status: int, body: dict[str, Any], **headers: str) -> JSONAnswer:
        return JSONAnswer(body, status_code=status, headers=headers or None)

    def unreadable(request: Request, expected: str) -> JSONAnswer:
        """400 for a body that is not a JSON value at all, to a caller the token allows: the
        others learn nothing of what a body should be."""
        try:
            check_caller(request)
        except NotAllowed as refused:
            return not_allowed(request, refused)
        return answer(400, malformed(expected))

    for kind, page in dashboard.PAGE_ERRORS.items():
        app.add_exception_handler(kind, page)

    @app.exception_handler(StateConflict)
    def conflict(request: Request, exc: StateConflict) -> Response:
        if dashboard.is_page(request):
            return dashboard.refused(request, exc, 409)
        return answer(409, {**refusal(exc), "error": "conflict"})

    @app.exception_handler(ValidationError)
    def invalid(request: Request, exc: ValidationError) -> Response:
        if dashboard.is_page(request):
            # A value a page's handler did not take back to its form (a link's cursor, a
            # field that is not UTF-8): the error page, with the API's status for it.
            return dashboard.refused(request, exc, 422)
        return answer(422, refusal(exc))

    @app.exception_handler(RequestValidationError)
    def unparsed(request: Request, exc: RequestValidationError) -> JSONAnswer:
        # A body that is not JSON, or not an object; a required field left out, an unknown
        # field: said in the same shape as the bridge's own refusals.
        first = exc.errors()[0]
        kind = first.get("type", "")
        if kind == "json_invalid":
            error = first.get("ctx", {}).get("error", "not JSON")
            return unreadable(request, f"a JSON object (the body is not JSON: {error})")
        location = [part for part in first.get("loc", ()) if part not in ("body", "query")]
        in_body = first.get("loc", ())[:1] == ("body",)
        sent, declared = first.get("input"), request.headers.get("content-type", "")
        if (
            in_body
            and not location
            and (isinstance(sent, bytes) or (sent is None and "json" not in declared))
        ):
            # FastAPI reads a body as JSON only when its Content-Type says so; any other
            # body (or none) reaches the model as bytes, which no message should show.
            problem = "no body" if not sent else f"a body sent as {declared or 'no type'}"
            return unreadable(request, f"a JSON object sent as application/json (got {problem})")
        if in_body and (not location or isinstance(location[0], int)):
            # The body itself (not one of its fields) is refused: a list, a text, a number.
            field, expected = "body", "a JSON object"
        else:
            field = str(location[-1]) if location else "body"
            if kind == "extra_forbidden":
                expected = "no such field (see the OpenAPI document at /openapi.json)"
            elif kind == "missing":
                expected = "a value: the field is required"
            else:
                expected = str(first.get("msg", "a valid value"))
        value = sent if kind != "missing" else None
        return answer(422, refusal(ValidationError(field, _jsonable(value), expected)))

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> Response:
        # Starlette's own answers (no such path, a method the path does not take) and
        # FastAPI's 400 for a body it could not decode, in the bridge's shape.
        status = exc.status_code
        if status == 400:
            cause = exc.__cause__
            reason = next(
                (words for kind, words in UNREADABLE.items() if isinstance(cause, kind)),
                "a JSON object",
            )
            return unreadable(request, reason)
        if status == 404:
            if dashboard.is_page(request) and dashboard.wants_html(request):
                return dashboard.no_page(request)
            message = f"no such path: {request.url.path}"
        elif status == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
            return answer(
                405,
                {"error": HTTP_ERRORS[405], "message": message},
                Allow=", ".join(allowed_methods(request)),
            )
        else:
            message = str(exc.detail)
        body = {"error": HTTP_ERRORS.get(status, "refused"), "message": message}
        return answer(status, body, **(exc.headers or {}))

    @app.exception_handler(ScheduleNotFound)
    @app.exception_handler(CalendarNotFound)
    @app.exception_handler(RunNotFound)
    @app.exception_handler(IncidentNotFound)
    def missing(request: Request, exc: BridgeError) -> Response:
        if dashboard.is_page(request):
            return dashboard.not_found(request, exc)
        return answer(404, {"error": "not_found", "message": str(exc)})

    @app.exception_handler(RunSkipped)
    def skipped(_request: Request, exc: RunSkipped) -> JSONAnswer:
        body = {"error": "skipped", "message": str(exc), "run": exc.run_id, "status": exc.status}
        return answer(409, body)

    @app.exception_handler(SendFailed)
    def not_sent(_request: Request, exc: SendFailed) -> JSONAnswer:
        return answer(503, {"error": "not_sent", "message": str(exc)})

    @app.exception_handler(NotAllowed)
    def not_allowed(_request: Request, exc: NotAllowed) -> JSONAnswer:
        if exc.access is Access.NONE:
            body = {"error": "unauthorized", "message": "a valid bearer token is required"}
            return answer(401, body, **{"WWW-Authenticate": "Bearer"})
        return answer(403, {"error": "forbidden", "message": f"this request {exc}"})

    @app.exception_handler(DatabaseError)
    def database(request: Request, exc: DatabaseError) -> JSONAnswer:
        # The driver's words may name the database's host, port and user: the log has
        # them, the caller what to do. A conflict the database ended is worth resending.
        told = app.state.refusals.told(error_reason(exc))
        if told is not None:
            logger.warning("bridge: %s %s: database: %s", request.method, request.url.path, told)
        message = (
            "the database ended this request's transaction in a conflict with another;"
            " send it again"
            if is_conflict(exc)
            else "the database did not answer or refused the request; see the server's log"
        )
        return answer(503, {"error": "database", "message": message}, **{"Retry-After": "1"})

    @app.exception_handler(BridgeError)
    def other(request: Request, exc: BridgeError) -> JSONAnswer:
        logger.error("bridge: %s %s failed", request.method, request.url.path, exc_info=exc)
        return answer(500, {"error": "bridge", "message": str(exc)})


#: The errors every operation of the API can answer, and those that depend on the operation.
ERROR_STATUSES = {
    400: "The body is not a JSON value (not UTF-8, not JSON, nested too deep).",
    401: "No token, or not one the server accepts (unknown, revoked or expired).",
    403: "The read token on a change, or a change requested from another site.",
    404: "No schedule of that name, no run of that id, or no incident of that id.",
    409: "The state forbids it (name taken, paused already, run ended, open run with skip).",
    413: "The body is over bridge_api_max_body.",
    422: "A value is refused: the field, the value given and what was expected.",
    503: "The database does not answer, or the broker refused the run.",
}
#: Operations whose state can forbid them (409).
CONFLICTING = frozenset(
    {
        ("post", "/api/v1/schedules"),
        *(("post", f"/api/v1/schedules/{{name}}/{action}") for action in ("pause", "resume")),
        *(("post", f"/api/v1/schedules/{{name}}/{action}") for action in ("run", "backfill")),
        ("post", "/api/v1/runs/{run_id}/cancel"),
        ("post", "/api/v1/runs/{run_id}/retry"),
    }
)


def _statuses(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer."""
    if path == "/metrics":
        return [401, 403, 503]
    if path == "/readyz":
        return [503]
    if not path.startswith("/api/"):
        return []
    statuses = [401, 403, 413, 422, 503]
    if "requestBody" in operation:
        statuses.append(400)
    if "{name}" in path or "{run_id}" in path or "{incident_id}" in path:
        statuses.append(404)
    if (method, path) in CONFLICTING:
        statuses.append(409)
    return sorted(statuses)


def _declare_errors(app: FastAPI) -> None:
    """Say in the OpenAPI document which errors each operation answers, in the one shape they
    all have (FastAPI's own 422 schema is not what the API answers)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        schemas["Error"] = ERROR_SCHEMA
        reference = {"$ref": "#/components/schemas/Error"}
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                responses = operation["responses"]
                responses.pop("422", None)  # FastAPI's, of a shape the API does not answer
                for status in _statuses(method, path, operation):
                    responses[str(status)] = {
                        "description": ERROR_STATUSES[status],
                        "content": {"application/json": {"schema": reference}},
                    }
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {
            "type": "string",
            "description": "invalid, malformed, not_found, conflict, skipped, unauthorized, "
            "forbidden, too_large, too_many_requests, method_not_allowed, not_sent, database, "
            "internal",
        },
        "message": {"type": "string", "description": "One line saying what is wrong."},
        "field": {"type": "string", "description": "The field to blame, when one is."},
        "value": {"description": "The value given for it."},
        "expected": {"type": "string", "description": "What the field takes."},
        "run": {"type": "string", "description": "skipped: the open run."},
        "status": {"type": "string", "description": "skipped: its status."},
    },
}


# -- health, metrics ---------------------------------------------------------------------


def _add_operations(app: FastAPI, bridge: Bridge) -> None:
    @app.get("/healthz", tags=["scheduler"], response_class=PlainTextResponse)
    async def healthz() -> str:
        """The server process is up (it answers without touching the database).

        Run on the event loop itself, not in the thread pool: it answers even
        while every thread waits on the database."""
        return "ok\n"

    @app.get("/readyz", tags=["scheduler"])
    def readyz() -> JSONAnswer:
        """The database answers and its schema is one this server's release runs against;
        the answer names the schema's revision and the release."""
        try:
            schema = bridge.database.schema()
        except DatabaseError as exc:
            # The driver's words may name hosts and users: the log has them, not the probe.
            told = app.state.refusals.told(error_reason(exc))
            if told is not None:
                logger.error("bridge: /readyz: database unreachable: %s", told)
            return _not_ready("the database does not answer; see the log")
        # The database's address stays in the log, like the driver's words.
        problem = schema.refusal(__version__, "of this server")
        if problem is not None:
            return _not_ready(problem)
        return JSONAnswer({"ready": True, "revision": schema.revision, "version": __version__})

    # Load balancers and orchestrators may probe with HEAD: the same status, no body.
    @app.head("/healthz", include_in_schema=False)
    async def healthz_head() -> Response:
        return Response(media_type="text/plain")

    @app.head("/readyz", include_in_schema=False)
    def readyz_head() -> Response:
        return Response(status_code=readyz().status_code, media_type="application/json")

    exposition = metrics.exposition_for(bridge, app.state.queue_names)

    @app.get("/metrics", tags=["scheduler"], response_class=PlainTextResponse)
    def scrape(_reader: Scraper) -> Response:
        """Prometheus metrics of every schedule (up to ``bridge_metrics_max_schedules``)."""
        return Response(exposition.get(), media_type=CONTENT_TYPE_LATEST)


def _not_ready(problem: str) -> JSONAnswer:
    """A readiness probe's 503, in the shape of every error (``problem`` says it too)."""
    body = {"error": "not_ready", "message": problem, "ready": False, "problem": problem}
    return JSONAnswer(body, status_code=503)


# -- the interactive page ------------------------------------------------------------------


def _add_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI 5 (which reads OpenAPI 3.1), from the files the
    ``fastapi-offline`` package ships, started by a script of the dashboard's own: no
    inline script, and no request to any host but this server."""
    from importlib.resources import files

    swagger = files("fastapi_offline") / "static"
    app.mount(DOCS_STATIC, StaticFiles(directory=str(swagger)), "swagger")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        return dashboard.templates.TemplateResponse(
            request, "docs.html", {"static": DOCS_STATIC, "version": app.version}
        )


# -- request bodies ------------------------------------------------------------------------


class RequestGuard:
    """Checks every HTTP request before the application sees it.

    Requests that :func:`~bridge.manage.web.security.request_refusal` turns
    away (another site's change, a non-loopback name with no token) get 403.
    A body larger than ``limit`` bytes gets 413 before it is read whole: the
    declared ``Content-Length`` is checked first, and a body sent without one
    is gathered up to the limit and handed on only if it fits.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.limit = settings.api_max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        problem = request_refusal(
            self.settings, scope["method"], headers.get("host"), headers.get("origin")
        )
        if problem is not None:
            await answer_now(send, 403, {"error": "forbidden", "message": problem})
            return
        declared = headers.get("content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._too_large(send)
                return
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._too_large(send)
                return
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        body = {"error": "too_large", "message": f"request body over {self.limit} bytes"}
        await answer_now(send, 413, body)
