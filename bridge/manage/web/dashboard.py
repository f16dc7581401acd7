"""The dashboard: HTML pages of the schedules and their runs, at ``/`` of ``bridge serve``.

Server-rendered with Jinja2; one small script (``static/bridge.js``) shows
times in the browser's own zone, refreshes the lists in place and asks
before an action. Every page works without it.

Who may see and do what follows the API's tokens: a sign-in page takes the
admin or the read token and sets a session cookie (HTTP-only, ``Secure``,
``SameSite=Strict``) that holds the role and an expiry signed with a key
derived from the tokens, never the token itself. With no token configured,
loopback clients are served as admin, as the API serves them. Every form
that changes something carries a CSRF token bound to the session, and an
unsafe request from another origin is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import (
    BridgeError,
    RunSkipped,
    SendFailed,
    ValidationError,
)
from bridge.manage.api import Bridge, Run, Schedule, Status
from bridge.manage.fields import DEFINITION_HELP, POLICY_HELP
from bridge.manage.web.reading import SharedReading
from bridge.manage.web.security import Access, access_of, actor, tokens_configured
from bridge.rules.health import Health
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus
from bridge.rules.policy import POLICY_NAMES, Policies
from bridge.rules.stats import success_rate
from bridge.rules.timers import parse_timer
from bridge.rules.values import json_or_text
from bridge.rules.words import policy_words, timer_words

router = APIRouter(include_in_schema=False)
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")

SESSION_COOKIE = "bridge_session"
SESSION_LIFETIME = timedelta(days=7)
#: Rows of the schedules list, runs of a schedule's log, entries of its audit trail.
PAGE = 100
RUN_PAGE = 25
#: Runs shown in a schedule's strip of outcomes.
STRIP = 20
#: The health filter of the list, and what it asks the API for.
STATES = {
    "enabled": {"enabled": True},
    "paused": {"paused": True},
    "broken": {"broken": True},
    "late": {"late": True},
    "failing": {"failing": True},
}


# -- who is asking -------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    """The person at the browser: what they may do, and their CSRF token."""

    access: Access
    csrf: str
    signed_in: bool

    @property
    def admin(self) -> bool:
        return self.access is Access.ADMIN


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


def make_session(settings: Settings, access: Access, now: float) -> str:
    """A cookie value naming the role and its expiry, signed."""
    payload = f"{access.value}.{int(now + SESSION_LIFETIME.total_seconds())}"
    token = base64.urlsafe_b64encode(payload.encode()).decode()
    return f"{token}.{_sign(_session_key(settings), payload)}"


def read_session(settings: Settings, cookie: str | None, now: float) -> Access:
    """The role a session cookie gives, or NONE when it is missing, forged or expired."""
    if not cookie or "." not in cookie:
        return Access.NONE
    token, _, signature = cookie.rpartition(".")
    try:
        payload = base64.urlsafe_b64decode(token.encode()).decode()
        level, expiry = (int(part) for part in payload.split("."))
    except (ValueError, UnicodeDecodeError):
        return Access.NONE
    if not hmac.compare_digest(signature, _sign(_session_key(settings), payload)):
        return Access.NONE
    if expiry < now or level not in (Access.READ, Access.ADMIN):
        return Access.NONE
    return Access(level)


def viewer_of(request: Request) -> Viewer:
    bridge: Bridge = request.app.state.bridge
    settings = bridge.settings
    client = request.client.host if request.client else None
    cookie = request.cookies.get(SESSION_COOKIE)
    if tokens_configured(settings):
        access = read_session(settings, cookie, time.time())
        basis = cookie or ""
    else:
        access = access_of(settings, None, client)
        basis = "loopback"
    csrf = _sign(_key(settings, "bridge-csrf"), basis)
    return Viewer(access, csrf, signed_in=tokens_configured(settings) and access > Access.NONE)


class SignInNeeded(Exception):
    """The page needs a session the browser does not have."""


async def _changing(request: Request) -> tuple[Bridge, dict[str, str], Viewer]:
    """The bridge acting as the viewer, and the form, for a request that changes something:
    the admin's, from this site, with the form's CSRF token."""
    viewer = viewer_of(request)
    if viewer.access is Access.NONE:
        raise SignInNeeded()
    form = {key: str(value) for key, value in (await request.form()).items()}
    if not viewer.admin:
        raise Refused("this action needs the admin token; you are signed in with the read token")
    if not hmac.compare_digest(form.get("csrf", ""), viewer.csrf):
        raise Refused("the form is stale or came from another site; reload the page and retry")
    bridge: Bridge = request.app.state.bridge
    client = request.client.host if request.client else None
    return bridge.acting_as(actor(viewer.access, client, "dashboard")), form, viewer


class Refused(Exception):
    """An action the dashboard refuses to carry out, with why."""


def _reader(request: Request) -> tuple[Bridge, Viewer]:
    viewer = viewer_of(request)
    if viewer.access is Access.NONE:
        raise SignInNeeded()
    return request.app.state.bridge, viewer


# -- rendering -----------------------------------------------------------------------------


def render(
    request: Request, name: str, viewer: Viewer, code: int = 200, **context: Any
) -> HTMLResponse:
    bridge: Bridge = request.app.state.bridge
    return templates.TemplateResponse(
        request,
        name,
        {
            "viewer": viewer,
            "version": request.app.version,
            "flower": bridge.settings.flower_url.rstrip("/"),
            "message": request.query_params.get("done"),
            "problem": request.query_params.get("error"),
            **context,
        },
        status_code=code,
    )


def _back(path: str, **params: str) -> RedirectResponse:
    query = urlencode({key: value for key, value in params.items() if value})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


def schedule_path(name: str) -> str:
    return "/schedules/" + quote(name, safe="")


def _timer_words(schedule: Schedule) -> str:
    try:
        return timer_words(parse_timer(schedule.timer, schedule.timezone, schedule.anchor))
    except ValueError:
        return "a timer that cannot be read"


def _policy_words(schedule: Schedule) -> list[str]:
    try:
        return policy_words(Policies.from_columns(schedule))
    except ValueError as exc:
        return [f"Its policies cannot be read: {exc}"]


def _success_rate(schedule: Schedule) -> float | None:
    """The success rate since the schedule was created, from its counters."""
    return success_rate(
        {
            RunStatus.SUCCESS.value: schedule.success_count,
            RunStatus.FAILURE.value: schedule.failure_count,
            RunStatus.LOST.value: schedule.lost_count,
        }
    )


def _row(schedule: Schedule, strip: list[tuple[datetime, str]]) -> dict[str, Any]:
    return {
        "s": schedule,
        "path": schedule_path(schedule.name),
        "words": _timer_words(schedule),
        "strip": strip,
        "rate": _success_rate(schedule),
    }


templates.env.globals.update(schedule_path=schedule_path, health_states=[h.value for h in Health])
templates.env.filters["json"] = lambda text: json_or_text(text) if isinstance(text, str) else text


# -- sign in -------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return render(
        request, "login.html", viewer_of(request), next=request.query_params.get("next", "/")
    )


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    form = await request.form()
    bridge: Bridge = request.app.state.bridge
    token = str(form.get("token", ""))
    target = str(form.get("next", "/"))
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    access = (
        access_of(bridge.settings, token or None, None)
        if tokens_configured(bridge.settings)
        else Access.NONE
    )
    if access is Access.NONE:
        viewer = viewer_of(request)
        return render(
            request,
            "login.html",
            viewer,
            401,
            next=target,
            refused="That token is not one this server accepts.",
        )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        make_session(bridge.settings, access, time.time()),
        max_age=int(SESSION_LIFETIME.total_seconds()),
        httponly=True,
        secure=True,
        samesite="strict",
    )
    return response


@router.post("/logout", response_model=None)
async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


# -- overview and lists --------------------------------------------------------------------


def overview_reading(bridge: Bridge) -> SharedReading[tuple[dict[str, int], Status]]:
    """The overview's counts by health and its heartbeats, read once for everyone who
    looks within a couple of seconds: the counts take a scan of every schedule."""

    def read() -> tuple[dict[str, int], Status]:
        now = utcnow()
        return bridge.health_counts(now), bridge.status(now)

    return SharedReading(read)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    bridge, viewer = _reader(request)
    counts, status = request.app.state.overview.get()
    attention = bridge.incidents(open_only=True, limit=20).items
    return render(
        request,
        "overview.html",
        viewer,
        counts=counts,
        total=sum(counts.values()),
        status=status,
        attention=attention,
    )


@router.get("/schedules", response_class=HTMLResponse)
def schedules(request: Request) -> HTMLResponse:
    bridge, viewer = _reader(request)
    params = request.query_params
    state = params.get("state") or None
    filters = {
        "prefix": params.get("q") or None,
        "task": params.get("task") or None,
        "label": params.get("label") or None,
        "sort": params.get("sort") or "name",
        "cursor": params.get("cursor") or None,
    }
    try:
        page = bridge.schedules(limit=PAGE, **STATES.get(state or "", {}), **filters)  # type: ignore[arg-type]
        refusal = None
    except ValidationError as exc:
        page, refusal = None, exc
    items = page.items if page else []
    strips = bridge.recent_statuses([s.id for s in items], STRIP)
    rows = [_row(schedule, strips.get(schedule.id, [])) for schedule in items]
    keep = {
        key: value for key, value in params.items() if key not in ("cursor", "fragment") and value
    }
    following = None if not page or not page.next else urlencode({**keep, "cursor": page.next})
    context = {
        "rows": rows,
        "following": following,
        "first": urlencode(keep),
        "filters": {**filters, "q": params.get("q", ""), "state": state or ""},
        "refusal": refusal,
        "states": list(STATES),
        "refresh": f"/schedules?{urlencode({**dict(params), 'fragment': '1'})}",
    }
    name = "_schedule_rows.html" if params.get("fragment") else "schedules.html"
    return render(request, name, viewer, 422 if refusal else 200, **context)


@router.get("/new", response_class=HTMLResponse)
def new_schedule(request: Request) -> HTMLResponse:
    _, viewer = _reader(request)
    return render(request, "form.html", viewer, **_form_context(None, {}, None))


@router.post("/new", response_model=None)
async def create_schedule(request: Request) -> Response:
    bridge, form, viewer = await _changing(request)
    fields = _form_fields(form, creating=True)
    name = fields.pop("name", "")
    try:
        await run_in_threadpool(lambda: bridge.add(name, **fields))
    except ValidationError as exc:
        return render(request, "form.html", viewer, 422, **_form_context(None, form, exc))
    return _back(schedule_path(name), done=f"created {name}")


# -- one schedule ----------------------------------------------------------------------------


@router.get("/schedules/{name:path}/edit", response_class=HTMLResponse)
def edit_page(request: Request, name: str) -> HTMLResponse:
    bridge, viewer = _reader(request)
    schedule = bridge.get(name)
    return render(
        request, "form.html", viewer, **_form_context(schedule, _values_of(schedule), None)
    )


@router.post("/schedules/{name:path}/edit", response_model=None)
async def edit(request: Request, name: str) -> Response:
    bridge, form, viewer = await _changing(request)
    schedule = bridge.get(name)
    fields = _form_fields(form, creating=False)
    changed = {
        key: value for key, value in fields.items() if value != _values_of(schedule).get(key)
    }
    try:
        if changed:
            bridge.edit(name, **changed)
    except ValidationError as exc:
        return render(request, "form.html", viewer, 422, **_form_context(schedule, form, exc))
    return _back(schedule_path(name), done="saved" if changed else "nothing to change")


ACTIONS = ("pause", "resume", "run", "backfill", "delete")


@router.post("/schedules/{name:path}/{action}", response_model=None)
async def act(request: Request, name: str, action: str) -> Response:
    if action not in ACTIONS:
        return HTMLResponse("Not found", status_code=404)
    bridge, form, _ = await _changing(request)
    back = schedule_path(name)
    try:
        done = await run_in_threadpool(_act, bridge, name, action, form)
    except (ValidationError, RunSkipped, SendFailed) as exc:
        return _back(back, error=str(exc))
    return _back("/schedules" if action == "delete" else back, done=done)


def _act(bridge: Bridge, name: str, action: str, form: dict[str, str]) -> str:
    """Carry out an action of the schedule page; what it did, in words."""
    if action == "pause":
        bridge.pause(name, form.get("note") or None)
        return "paused"
    if action == "resume":
        bridge.resume(name, form.get("from") or "now")
        return "resumed"
    if action == "run":
        return f"sent run {bridge.run(name, form.get('overlap') or None).id}"
    if action == "backfill":
        overlap = form.get("overlap") or "allow"
        result = bridge.backfill(name, form.get("from", ""), form.get("to", ""), overlap=overlap)
        return f"backfill: {len(result.created)} runs sent, {result.existing} already recorded"
    bridge.remove(name)
    return f"deleted {name}"


@router.get("/schedules/{name:path}", response_class=HTMLResponse)
def schedule_page(request: Request, name: str) -> HTMLResponse:
    bridge, viewer = _reader(request)
    schedule = bridge.get(name)
    runs = bridge.runs(name, cursor=request.query_params.get("runs") or None, limit=RUN_PAGE)
    outlook = bridge.forecast(name, 10)
    return render(
        request,
        "schedule.html",
        viewer,
        s=schedule,
        words=_timer_words(schedule),
        policies=_policy_words(schedule),
        outlook=outlook,
        runs=runs.items,
        following=runs.next,
        day=bridge.stats(name, "1d"),
        week=bridge.stats(name, "7d"),
        trail=bridge.audit(name, limit=20).items,
        rate=_success_rate(schedule),
        open_statuses={status.value for status in NON_FINAL_STATUSES},
        retriable={RunStatus.FAILURE.value, RunStatus.LOST.value, RunStatus.REVOKED.value},
        path=schedule_path(name),
    )


# -- runs --------------------------------------------------------------------------------------


@router.post("/runs/{run_id}/{action}", response_model=None)
async def run_action(request: Request, run_id: str, action: str) -> Response:
    if action not in ("cancel", "retry"):
        return HTMLResponse("Not found", status_code=404)
    bridge, form, _ = await _changing(request)
    run: Run = await run_in_threadpool(bridge.run_info, run_id)
    back = schedule_path(run.schedule) if run.schedule else "/schedules"
    try:
        if action == "cancel":
            terminate = form.get("terminate") == "on"
            note = form.get("note") or None
            ended = await run_in_threadpool(
                lambda: bridge.cancel(run_id, terminate=terminate, note=note)
            )
            done = f"cancelled run {ended.id}"
        else:
            again = await run_in_threadpool(bridge.retry, run_id)
            done = f"retried as run {again.id}"
    except (ValidationError, SendFailed) as exc:
        return _back(back, error=str(exc))
    return _back(back, done=done)


# -- forms -------------------------------------------------------------------------------------

#: The text fields of the schedule form, besides the policies, in their order.
FORM_FIELDS = ("task", "timer", "timezone", "args", "kwargs", "queue", "labels", "options")


def _values_of(schedule: Schedule) -> dict[str, str]:
    """A schedule's fields as the form shows them: as one would type them."""
    values = {
        "task": schedule.task,
        "timer": schedule.timer,
        "timezone": schedule.timezone,
        "args": schedule.args,
        "kwargs": schedule.kwargs,
        "options": schedule.options,
        "labels": ",".join(schedule.labels),
        "queue": "",
    }
    try:
        for key, value in Policies.from_columns(schedule).to_json().items():
            values[key] = "" if value is None else str(value)
    except ValueError:
        pass
    return values


def _form_fields(form: dict[str, str], creating: bool) -> dict[str, Any]:
    """What a submitted form asks for, as the API takes it: an empty field is left out
    (a policy field emptied on edit goes back to its default with 'none')."""
    fields: dict[str, Any] = {}
    for key in (*FORM_FIELDS, *POLICY_NAMES):
        value = form.get(key, "").strip()
        if value:
            fields[key] = value
        elif not creating and key in POLICY_NAMES and key in form:
            fields[key] = "none"
    if creating:
        fields["name"] = form.get("name", "")
        fields["enabled"] = form.get("enabled") == "on"
    if form.get("allow_unknown_task") == "on":
        fields["allow_unknown_task"] = True
    return fields


def _form_context(
    schedule: Schedule | None, values: dict[str, str], refusal: ValidationError | None
) -> dict[str, Any]:
    field = None if refusal is None else refusal.field.split(".")[0]
    return {
        "s": schedule,
        "values": values,
        "refusal": refusal,
        "refused_field": field,
        "fields": [(name, DEFINITION_HELP[name]) for name in FORM_FIELDS],
        "policies": [(name, POLICY_HELP[name][1]) for name in POLICY_NAMES],
    }


# -- errors -------------------------------------------------------------------------------------


def not_found(request: Request, exc: BridgeError) -> HTMLResponse:
    return render(request, "error.html", viewer_of(request), 404, problem_text=str(exc))


def sign_in(request: Request, _exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def refused(request: Request, exc: Exception) -> HTMLResponse:
    return render(request, "error.html", viewer_of(request), 403, problem_text=str(exc))


#: The dashboard's own answers to the errors its pages raise.
PAGE_ERRORS = {
    SignInNeeded: sign_in,
    Refused: refused,
}


def is_page(request: Request) -> bool:
    """Whether a request is the dashboard's (not the API's, nor a probe's)."""
    path = request.url.path
    return not path.startswith(("/api/", "/metrics", "/healthz", "/readyz", "/docs", "/openapi"))
