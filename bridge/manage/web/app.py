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
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from celery import Celery
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.config import Settings
from bridge.errors import (
    BridgeError,
    RunNotFound,
    RunSkipped,
    ScheduleNotFound,
    SendFailed,
    StateConflict,
    ValidationError,
)
from bridge.manage.api import Bridge, default_actor
from bridge.manage.web import dashboard, metrics
from bridge.manage.web.routes import NotAllowed, Reader, router
from bridge.manage.web.security import Access, request_refusal
from bridge.storage.database import DatabaseError, error_reason

logger = logging.getLogger("bridge.web")

DESCRIPTION = (
    "Schedules are rows in `periodic_task`; `celery beat -S bridge` fires them; workers "
    "record each run in `task_execution`. Reads need the read or the admin token "
    "(`Authorization: Bearer ...`), changes the admin token; a refused value is answered "
    "422 with the field, the value given and what was expected."
)
#: Where Swagger UI's files are served from, so that /docs needs no third-party host.
DOCS_STATIC = "/docs/static"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def create_app(celery_app: Celery | None = None, *, bridge: Bridge | None = None) -> FastAPI:
    """The API for ``celery_app`` (its settings name the database and the tokens), or for
    ``bridge`` when one is given."""
    bridge = bridge or Bridge(celery_app, actor=default_actor("http"))
    app = FastAPI(
        title="celery-periodic-bridge",
        description=DESCRIPTION,
        version=_version(),
        docs_url=None,
        redoc_url=None,
    )
    app.state.bridge = bridge
    app.state.overview = dashboard.overview_reading(bridge)
    app.include_router(router)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.HERE / "static"), "static")
    _add_errors(app)
    _add_operations(app, bridge)
    _add_docs(app)
    app.add_middleware(RequestGuard, settings=bridge.settings)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("celery-periodic-bridge")
    except PackageNotFoundError:
        return "0"


# -- errors ------------------------------------------------------------------------------


def refusal(exc: ValidationError) -> dict[str, Any]:
    """The body of a refused value: the field, the value given, what was expected."""
    return {
        "error": "invalid",
        "field": exc.field,
        "value": _jsonable(exc.value),
        "expected": exc.expected,
        "message": str(exc),
    }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


def _add_errors(app: FastAPI) -> None:
    def answer(status: int, body: dict[str, Any], **headers: str) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers=headers or None)

    for kind, page in dashboard.PAGE_ERRORS.items():
        app.add_exception_handler(kind, page)

    @app.exception_handler(StateConflict)
    def conflict(request: Request, exc: StateConflict) -> Response:
        if dashboard.is_page(request):
            return dashboard.refused(request, exc)
        return answer(409, {**refusal(exc), "error": "conflict"})

    @app.exception_handler(ValidationError)
    def invalid(request: Request, exc: ValidationError) -> Response:
        if dashboard.is_page(request):
            return dashboard.refused(request, exc)
        return answer(422, refusal(exc))

    @app.exception_handler(RequestValidationError)
    def malformed(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # A body that is not a JSON object, a required field left out, an unknown field:
        # said in the same shape as the bridge's own refusals.
        first = exc.errors()[0]
        location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query")]
        field = location[-1] if location else "body"
        kind = first.get("type", "")
        if kind == "extra_forbidden":
            expected = "no such field (see the OpenAPI document at /openapi.json)"
        elif kind == "missing":
            expected = "a value: the field is required"
        else:
            expected = str(first.get("msg", "a valid value"))
        value = first.get("input") if kind != "missing" else None
        return answer(422, refusal(ValidationError(field, value, expected)))

    @app.exception_handler(ScheduleNotFound)
    @app.exception_handler(RunNotFound)
    def missing(request: Request, exc: BridgeError) -> Response:
        if dashboard.is_page(request):
            return dashboard.not_found(request, exc)
        return answer(404, {"error": "not_found", "message": str(exc)})

    @app.exception_handler(RunSkipped)
    def skipped(_request: Request, exc: RunSkipped) -> JSONResponse:
        body = {"error": "skipped", "message": str(exc), "run": exc.run_id, "status": exc.status}
        return answer(409, body)

    @app.exception_handler(SendFailed)
    def not_sent(_request: Request, exc: SendFailed) -> JSONResponse:
        return answer(503, {"error": "not_sent", "message": str(exc)})

    @app.exception_handler(NotAllowed)
    def not_allowed(_request: Request, exc: NotAllowed) -> JSONResponse:
        if exc.access is Access.NONE:
            body = {"error": "unauthorized", "message": "a valid bearer token is required"}
            return answer(401, body, **{"WWW-Authenticate": "Bearer"})
        return answer(403, {"error": "forbidden", "message": f"this request {exc}"})

    @app.exception_handler(DatabaseError)
    def database(_request: Request, exc: DatabaseError) -> JSONResponse:
        return answer(503, {"error": "database", "message": error_reason(exc)})

    @app.exception_handler(BridgeError)
    def other(_request: Request, exc: BridgeError) -> JSONResponse:
        return answer(500, {"error": "bridge", "message": str(exc)})

    @app.exception_handler(Exception)
    def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("bridge: %s %s failed", request.method, request.url.path)
        return answer(500, {"error": "internal", "message": f"{type(exc).__name__}; see the log"})


# -- health, metrics ---------------------------------------------------------------------


def _add_operations(app: FastAPI, bridge: Bridge) -> None:
    @app.get("/healthz", tags=["scheduler"], response_class=PlainTextResponse)
    def healthz() -> str:
        """The server process is up (it answers without touching the database)."""
        return "ok\n"

    @app.get("/readyz", tags=["scheduler"])
    def readyz() -> JSONResponse:
        """The database answers and its schema is the one this server expects."""
        try:
            revision, head = bridge.database.revisions()
        except DatabaseError as exc:
            # The driver's words may name hosts and users: the log has them, not the probe.
            logger.error("bridge: /readyz: database unreachable: %s", error_reason(exc))
            body = {"ready": False, "problem": "the database does not answer; see the log"}
            return JSONResponse(body, status_code=503)
        if revision != head:
            problem = f"schema at {revision or 'nothing'}, expected {head}: run bridge migrate"
            return JSONResponse({"ready": False, "problem": problem}, status_code=503)
        return JSONResponse({"ready": True, "revision": revision})

    registry = metrics.registry_for(bridge)

    @app.get("/metrics", tags=["scheduler"], response_class=PlainTextResponse)
    def scrape(_reader: Reader) -> Response:
        """Prometheus metrics of every schedule (up to ``bridge_metrics_max_schedules``)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# -- the interactive page ------------------------------------------------------------------


def _add_docs(app: FastAPI) -> None:
    import swagger_ui_bundle

    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), "swagger")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="celery-periodic-bridge API",
            swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC}/favicon-32x32.png",
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
            await _answer(send, 403, {"error": "forbidden", "message": problem})
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
        await _answer(send, 413, body)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    await JSONResponse(body, status_code=status)({"type": "http"}, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
