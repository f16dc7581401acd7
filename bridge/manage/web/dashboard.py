"""The dashboard: HTML pages of the schedules and their runs, at ``/`` of ``bridge serve``.

Server-rendered with Jinja2; one small script (``static/bridge.js``) shows
times in the browser's own zone, refreshes the lists in place and asks
before an action. Every page works without it.

Who may see and do what follows the API's tokens: a sign-in page takes the
admin or the read token, or a named token, and sets a session cookie
(HTTP-only, ``Secure``, ``SameSite=Strict``) that holds a session's random
id, signed with a key derived from the settings tokens, never a token. The
store keeps each session and which token began it: signing out deletes it,
and revoking that token refuses it at the next request. Failed sign-ins are
limited per client address. With no token configured, loopback clients are
served as admin, as the API serves them. Every form that changes something,
sign-out's included, carries a CSRF token bound to the session, and an unsafe
request from another origin is refused. The signing of both is
:mod:`bridge.manage.web.security`'s.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote_to_bytes, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import (
    BridgeError,
    CalendarNotFound,
    RunSkipped,
    ScheduleNotFound,
    SendFailed,
    ValidationError,
)
from bridge.manage.api import STATE_FILTERS, Bridge, LabelRate, Run, Schedule, Status
from bridge.manage.fields import (
    CALENDAR_HELP,
    DEFINITION_HELP,
    POLICY_CHOICES,
    POLICY_HELP,
    POLICY_SUGGESTIONS,
)
from bridge.manage.forms import policy_fields, policy_values
from bridge.manage.web.answers import JSONAnswer
from bridge.manage.web.charts import (
    MISSED,
    OCCURRENCES_SHOWN,
    RUNS_SHOWN,
    SKIPPED,
    TimelineChart,
    duration_chart,
    occurrence_strip,
    timeline_chart,
)
from bridge.manage.web.marks import (
    Written,
    broken_reason,
    health_html,
    schedule_row_html,
    shown,
    status_html,
    strip_html,
    when_html,
)
from bridge.manage.web.reading import SharedReading
from bridge.manage.web.security import (
    SESSION_LIFETIME,
    Access,
    Caller,
    access_of,
    actor,
    caller_of,
    csrf_token,
    message_signature,
    same_secret,
    session_cookie,
    session_secret,
    tokens_configured,
)
from bridge.rules.calendars import CalendarKind
from bridge.rules.definition import check_label
from bridge.rules.health import TROUBLE, Health
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus
from bridge.rules.policy import POLICY_NAMES, Policies
from bridge.rules.stats import success_rate
from bridge.rules.timers import parse_timer
from bridge.rules.tokens import SignInLimit
from bridge.rules.values import json_or_text
from bridge.rules.words import policy_words, timer_words

router = APIRouter(include_in_schema=False)
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
# The templates are the package's, not edited while the server runs: Jinja would look at
# each file's time at every page (six a list).
templates.env.auto_reload = False

SESSION_COOKIE = "bridge_session"
#: Rows of the schedules list, runs of a schedule's log, entries of its audit trail.
PAGE = 100
RUN_PAGE = 25
#: Runs shown in a schedule's strip of outcomes.
STRIP = 20
#: The mark of each status in a schedule's strip of outcomes: one of its own each (SENT,
#: STARTED and SUCCESS all begin with S), so that the strip reads without its colours.
STATUS_MARKS = {
    RunStatus.PENDING.value: "…",
    RunStatus.SENT.value: "→",
    RunStatus.RECEIVED.value: "↓",
    RunStatus.STARTED.value: "▶",
    RunStatus.RETRY.value: "↻",
    RunStatus.SUCCESS.value: "✓",
    RunStatus.FAILURE.value: "✗",
    RunStatus.REVOKED.value: "⊘",
    RunStatus.LOST.value: "?",
    SKIPPED: "»",
    MISSED: "○",
}
#: The marks of occurrences that were not run, which only a schedule's own strip shows.
GAP_MARKS = (SKIPPED, MISSED)


# -- who is asking -------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    """The person at the browser: what they may do, and their CSRF token."""

    access: Access
    csrf: str
    signed_in: bool
    #: Who the audit log names: ``admin``, ``read``, or a named token's name.
    name: str = "admin"

    @property
    def admin(self) -> bool:
        return self.access is Access.ADMIN


def form_token(request: Request) -> str:
    """The CSRF token the browser's forms carry: bound to its session cookie (to loopback
    when no token is configured)."""
    settings: Settings = request.app.state.bridge.settings
    if tokens_configured(settings):
        return csrf_token(settings, request.cookies.get(SESSION_COOKIE) or "")
    return csrf_token(settings, "loopback")


def viewer_of(request: Request) -> Viewer:
    """Who the browser is signed in as; it asks the store, so it runs off the event loop."""
    bridge: Bridge = request.app.state.bridge
    settings = bridge.settings
    client = request.client.host if request.client else None
    if tokens_configured(settings):
        secret = session_secret(settings, request.cookies.get(SESSION_COOKIE))
        found = None if secret is None else bridge.session(secret)
        if found is None:
            access, name = Access.NONE, "unknown"
        else:
            role, token = found
            access, name = Access[role.name], role.value if token is None else token.name
    else:
        access, name = access_of(settings, None, client), "admin"
    signed_in = tokens_configured(settings) and access > Access.NONE
    return Viewer(access, form_token(request), signed_in, name)


#: What a form's field must be when it is sent URL-encoded, as the dashboard's forms are.
FORM_TEXT_EXPECTED = "text in UTF-8"


async def form_of(request: Request) -> FormData:
    """The request's form, once each URL-encoded field is found to be UTF-8.

    Starlette reads bytes that are not UTF-8 as U+FFFD and goes on, so a name
    sent so would be stored as other text than was given. Such a field is
    refused naming it, before anything is read from the form or written.
    """
    body = await request.body()  # kept by the request: the form is read from it
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        for pair in body.split(b"&"):
            raw_name, _, raw_value = pair.partition(b"=")
            name = _form_text(raw_name)
            if name is None or _form_text(raw_value) is None:
                field = name if name is not None else "form"
                raise ValidationError(field, "<bytes that are not UTF-8>", FORM_TEXT_EXPECTED)
    return await request.form()


def _form_text(raw: bytes) -> str | None:
    """A URL-encoded text, or None when its bytes are not UTF-8."""
    try:
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return None


class SignInNeeded(Exception):
    """The page needs a session the browser does not have."""


async def _changing(request: Request) -> tuple[Bridge, dict[str, str], Viewer]:
    """The bridge acting as the viewer, and the form, for a request that changes something:
    the admin's, from this site, with the form's CSRF token."""
    viewer = await run_in_threadpool(viewer_of, request)
    if viewer.access is Access.NONE:
        raise SignInNeeded()
    form = {key: str(value) for key, value in (await form_of(request)).items()}
    if not viewer.admin:
        raise Refused("this action needs the admin token; you are signed in with the read token")
    if not same_secret(form.get("csrf", ""), viewer.csrf):
        raise Refused(STALE_FORM)
    bridge: Bridge = request.app.state.bridge
    client = request.client.host if request.client else None
    return bridge.acting_as(actor(viewer.name, client, "dashboard")), form, viewer


class Refused(Exception):
    """An action the dashboard refuses to carry out, with why."""


#: Why a form without the CSRF token of the browser's session is refused.
STALE_FORM = "the form is stale or came from another site; reload the page and retry"


def _reader(request: Request) -> tuple[Bridge, Viewer]:
    viewer = viewer_of(request)
    if viewer.access is Access.NONE:
        raise SignInNeeded()
    return request.app.state.bridge, viewer


#: What a read-only session is told on a page that only serves a change.
ADMIN_ONLY = (
    "this page changes schedules, which needs the admin token; "
    "you are signed in with the read token"
)


def _form_reader(request: Request) -> tuple[Bridge, Viewer]:
    """The bridge and viewer of a page whose only use is a change (a form): a read-only
    session is refused it, as it would be refused the change, rather than shown a form
    it cannot submit."""
    bridge, viewer = _reader(request)
    if not viewer.admin:
        raise Refused(ADMIN_ONLY)
    return bridge, viewer


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
            "message": _flash(request, "done"),
            "problem": _flash(request, "error"),
            # When the page was made: the regions that refresh themselves say so.
            "now": utcnow(),
            **context,
        },
        status_code=code,
    )


#: What an action redirects with for the page to show: what it did, or why it was refused.
Flash = Literal["done", "error"]


def _flash_signature(settings: Settings, kind: Flash, text: str) -> str:
    return message_signature(settings, f"{kind}\0{text}")


def _flash(request: Request, kind: Flash) -> str | None:
    """The message of ``kind`` the page was sent with, if this server wrote it: a link
    from elsewhere cannot put words of its own in the page's alert boxes."""
    text = request.query_params.get(kind)
    if not text:
        return None
    bridge: Bridge = request.app.state.bridge
    expected = _flash_signature(bridge.settings, kind, text)
    return text if same_secret(request.query_params.get("sig", ""), expected) else None


def _back(bridge: Bridge, path: str, kind: Flash, text: str) -> RedirectResponse:
    """Back to the page at ``path``, which shows ``text`` as a message of ``kind``, signed."""
    query = urlencode({kind: text, "sig": _flash_signature(bridge.settings, kind, text)})
    return RedirectResponse(f"{path}?{query}", status_code=303)


def schedule_path(name: str) -> str:
    return "/schedules/" + quote(name, safe="")


def _timer_words(schedule: Schedule) -> str:
    return _words_of(schedule.timer, schedule.timezone)


@functools.lru_cache(maxsize=4096)
def _words_of(timer: str, zone: str) -> str:
    """A timer in words, once per timer and zone: most schedules of a page share a few
    timers, and the words do not depend on an interval's anchor."""
    try:
        return timer_words(parse_timer(timer, zone, WORDS_ANCHOR))
    except ValueError:
        return "a timer that cannot be read"


#: Any instant: an interval needs an anchor to be parsed, and its words do not show it.
WORDS_ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)


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


def _row(schedule: Schedule, strip: list[tuple[str, str]], tick: bool) -> Written:
    """A row of the list (:func:`~bridge.manage.web.marks.schedule_row_html`)."""
    return schedule_row_html(
        schedule,
        schedule_path(schedule.name),
        _timer_words(schedule),
        strip,
        _success_rate(schedule),
        STATUS_MARKS,
        tick,
    )


templates.env.globals.update(
    schedule_path=schedule_path,
    health_states=[h.value for h in Health],
    status_marks=STATUS_MARKS,
    gap_marks=GAP_MARKS,
    strip_html=strip_html,
    broken_reason=broken_reason,
    when_html=when_html,
    status_html=status_html,
    health_html=health_html,
)
templates.env.filters["json"] = lambda text: json_or_text(text) if isinstance(text, str) else text


templates.env.finalize = shown


# -- sign in -------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return render(
        request, "login.html", viewer_of(request), next=request.query_params.get("next", "/")
    )


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    form = await form_of(request)
    bridge: Bridge = request.app.state.bridge
    token = str(form.get("token", ""))
    target = str(form.get("next", "/"))
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    client = request.client.host if request.client else "unknown"
    limit: SignInLimit = request.app.state.sign_in_limit
    wait = limit.wait(client, time.monotonic())
    if wait:
        return _slow_down(request, target, wait)
    caller = (
        await run_in_threadpool(caller_of, bridge, token.strip() or None, None)
        if tokens_configured(bridge.settings)
        else Caller(Access.NONE, "unknown")
    )
    if caller.access is Access.NONE:
        limit.failed(client, time.monotonic())
        viewer = await run_in_threadpool(viewer_of, request)
        return render(
            request,
            "login.html",
            viewer,
            401,
            next=target,
            refused="That token is not one this server accepts.",
        )
    secret = await run_in_threadpool(
        bridge.begin_session, caller.role, caller.token, SESSION_LIFETIME
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_cookie(bridge.settings, secret),
        max_age=int(SESSION_LIFETIME.total_seconds()),
        httponly=True,
        secure=True,
        samesite="strict",
    )
    return response


def _slow_down(request: Request, target: str, wait: float) -> Response:
    """The answer to a sign-in from an address that failed too often: 429, and when to
    try again (a page for a browser, the error shape of the API for a program)."""
    seconds = str(math.ceil(wait))
    problem = f"too many failed sign-ins from this address; try again in {seconds} seconds"
    if not wants_html(request):
        body = {"error": "too_many_requests", "message": f"token: {problem}"}
        return JSONAnswer(body, status_code=429, headers={"Retry-After": seconds})
    viewer = Viewer(Access.NONE, "", signed_in=False)
    page = render(request, "login.html", viewer, 429, next=target, refused=problem.capitalize())
    page.headers["Retry-After"] = seconds
    return page


@router.post("/logout", response_model=None)
async def logout(request: Request) -> Response:
    """Sign out: the session ends in the store, so its cookie signs no one in again. Its
    form carries the session's CSRF token, as every form does: without it the session
    goes on (another site cannot sign the browser out)."""
    form = await form_of(request)
    if not same_secret(str(form.get("csrf", "")), form_token(request)):
        raise Refused(STALE_FORM)
    bridge: Bridge = request.app.state.bridge
    secret = session_secret(bridge.settings, request.cookies.get(SESSION_COOKIE))
    if secret is not None:
        await run_in_threadpool(bridge.end_session, secret)
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


def queue_names_reading(bridge: Bridge) -> SharedReading[list[str]]:
    """The queues the schedules send to, read at most once a minute: a read of the options
    of every schedule that names a queue, which changes seldom (a new queue shows within
    the minute)."""
    return SharedReading(bridge.queues, fresh_for=QUEUE_NAMES_FRESH_FOR)


def queues_reading(
    bridge: Bridge, names: SharedReading[list[str]]
) -> SharedReading[dict[str, int | None]]:
    """The messages waiting in each queue the schedules send to, asked of the broker at
    most every few seconds however many look."""
    return SharedReading(lambda: bridge.queue_lengths(names.get()), fresh_for=QUEUES_FRESH_FOR)


def outlook_reading(bridge: Bridge) -> SharedReading[tuple[TimelineChart, list[LabelRate]]]:
    """The overview's pictures, read at most once a minute: the next day's fires laid out
    (a forecast of each timer the schedules share) and the week's success rate per label
    (a sum over the week's tallies). Neither changes much within a minute."""

    def read() -> tuple[TimelineChart, list[LabelRate]]:
        return timeline_chart(bridge.timeline()), bridge.label_rates("7d")

    return SharedReading(read, fresh_for=OUTLOOK_FRESH_FOR)


#: How long one reading of the overview's pictures serves.
OUTLOOK_FRESH_FOR = 60.0
#: How long one reading of the broker's queues serves the overviews that follow it.
QUEUES_FRESH_FOR = 5.0
#: How long one reading of which queues the schedules send to serves.
QUEUE_NAMES_FRESH_FOR = 60.0


#: The health states the watchdog opens incidents for, named on the overview while no
#: incident is open yet.
TROUBLED = tuple(health.value for health in Health if health in TROUBLE)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    bridge, viewer = _reader(request)
    counts, status = request.app.state.overview.get()
    timeline, label_rates = request.app.state.outlook.get()
    attention = bridge.incidents(open_only=True, limit=20).items
    return render(
        request,
        # Its body alone for the page's script, which refreshes it in place.
        "_overview.html" if request.query_params.get("fragment") else "overview.html",
        viewer,
        counts=counts,
        total=sum(counts.values()),
        status=status,
        attention=attention,
        troubled=[state for state in TROUBLED if counts.get(state)],
        filters=STATE_FILTERS,
        queues=request.app.state.queues.get(),
        timeline=timeline,
        label_rates=label_rates,
    )


#: The fields of the form that makes a calendar.
CALENDAR_FORM_FIELDS = ("name", "kind", "entries", "timezone", "replace")
#: What the form's ``entries`` hold for each kind of calendar.
CALENDAR_KINDS = {kind.value: CALENDAR_HELP[kind.value] for kind in CalendarKind}


@router.get("/calendars", response_class=HTMLResponse)
def calendars(request: Request) -> HTMLResponse:
    """The calendars, what each holds and the schedules that skip it; an admin makes one
    with the form under them, and removes one no schedule skips."""
    bridge, viewer = _reader(request)
    return _calendars_page(request, bridge, viewer, {}, None)


def _calendars_page(
    request: Request,
    bridge: Bridge,
    viewer: Viewer,
    values: dict[str, str],
    refusal: ValidationError | None,
) -> HTMLResponse:
    return render(
        request,
        "calendars.html",
        viewer,
        422 if refusal else 200,
        calendars=bridge.calendars(),
        values=values,
        refusal=refusal,
        kinds=CALENDAR_KINDS,
        help=CALENDAR_HELP,
    )


@router.post("/calendars", response_model=None)
async def save_calendar(request: Request) -> Response:
    bridge, form, viewer = await _changing(request)
    return await run_in_threadpool(_save_calendar, request, bridge, form, viewer)


def _save_calendar(
    request: Request, bridge: Bridge, form: dict[str, str], viewer: Viewer
) -> Response:
    """Make (or, asked to, replace) the calendar the form describes; a refusal is shown on
    the page, the form as it was sent, and nothing is written."""
    try:
        _only(form, CALENDAR_FORM_FIELDS)
        kind = form.get("kind", "")
        if kind not in CALENDAR_KINDS:
            raise ValidationError("kind", kind, f"one of {'|'.join(CALENDAR_KINDS)}")
        name = form.get("name", "").strip()
        entries = form.get("entries", "").strip()
        saved = bridge.add_calendar(
            name,
            **{kind: entries},
            timezone=form.get("timezone", "").strip() or None,
            replace=form.get("replace") == "on",
        )
    except ValidationError as exc:
        return _calendars_page(request, bridge, viewer, form, exc)
    return _back(bridge, "/calendars", "done", f"saved calendar {saved.name}")


@router.post("/calendars/{name}/delete", response_model=None)
async def remove_calendar(request: Request, name: str) -> Response:
    bridge, form, _ = await _changing(request)
    try:
        _only(form, ())
        await run_in_threadpool(bridge.remove_calendar, name)
    except (ValidationError, CalendarNotFound) as exc:
        return _back(bridge, "/calendars", "error", str(exc))
    return _back(bridge, "/calendars", "done", f"removed calendar {name}")


@router.get("/schedules", response_class=HTMLResponse)
def schedules(request: Request) -> HTMLResponse:
    # The session, the page and its strips, read on one connection.
    with request.app.state.bridge.database.reading_together():
        return _schedules(request)


def _schedules(request: Request) -> HTMLResponse:
    bridge, viewer = _reader(request)
    params = request.query_params
    state = params.get("state") or None
    filters = {
        **_list_filter(params),
        "sort": params.get("sort") or "name",
        "cursor": params.get("cursor") or None,
    }
    try:
        page = bridge.schedules(limit=PAGE, **filters)
        refusal = None
    except ValidationError as exc:
        page, refusal = None, exc
    items = page.items if page else []
    strips = bridge.recent_statuses([s.id for s in items], STRIP)
    # One text, which the template writes at once: row by row, the template's loop and
    # its check of each row's text (:func:`~bridge.manage.web.marks.shown`) cost the page
    # a tenth of what writing the rows did.
    rows = Written(
        "\n".join(_row(schedule, strips.get(schedule.id, []), viewer.admin) for schedule in items)
    )
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
        "states": list(STATE_FILTERS),
        "bulk_actions": BULK_ACTIONS,
        "refresh": f"/schedules?{urlencode({**dict(params), 'fragment': '1'})}",
    }
    name = "_schedule_rows.html" if params.get("fragment") else "schedules.html"
    return render(request, name, viewer, 422 if refusal else 200, **context)


#: What the list's bulk form does to each schedule it names, one change (and one audit
#: entry) at a time.
BULK_ACTIONS = ("pause", "resume", "run", "add label", "remove label", "delete")
#: The fields of the bulk form, and of its confirmation.
BULK_FIELDS = (
    "action", "bulk_label", "names", "every", "q", "task", "state", "label", "confirmed",
)  # fmt: skip
#: The most schedules one bulk action changes (every match of a filter is read page by page).
BULK_MAX = 10_000


@router.post("/schedules/bulk", response_model=None)
async def bulk(request: Request) -> Response:
    """Pause, resume, run, label, unlabel or delete the schedules ticked in the list, or
    every schedule its filter matches: first a page that says how many and asks again,
    then each change through the bridge, audited one by one; a schedule a change does
    not apply to (paused already, say) is left as it is and counted."""
    bridge, form, viewer = await _changing(request)
    ticked = [str(name) for name in (await form_of(request)).getlist("names")]
    return await run_in_threadpool(_bulk, request, bridge, form, ticked, viewer)


def _bulk(
    request: Request, bridge: Bridge, form: dict[str, str], ticked: list[str], viewer: Viewer
) -> Response:
    try:
        _only(form, BULK_FIELDS)
        action = form.get("action", "")
        if action not in BULK_ACTIONS:
            raise ValidationError("action", action, f"one of: {', '.join(BULK_ACTIONS)}")
        label = form.get("bulk_label", "").strip()
        if action.endswith("label"):
            label = check_label(label)
        names = (
            _every_match(bridge, form) if form.get("every") == "on" else list(dict.fromkeys(ticked))
        )
        if not names:
            raise ValidationError(
                "names", "", "a schedule ticked, or every schedule the filter matches"
            )
    except ValidationError as exc:
        return _back(bridge, "/schedules", "error", str(exc))
    if form.get("confirmed") != "yes":
        return render(
            request, "bulk.html", viewer, action=action, label=label, names=names, form=form
        )
    done, left = 0, []
    for name in names:
        try:
            _apply(bridge, action, name, label)
            done += 1
        except (ValidationError, ScheduleNotFound, RunSkipped, SendFailed) as exc:
            left.append(f"{name}: {exc}")
    told = f"{action}: {done} of {len(names)} schedule(s)"
    if left:
        told += f"; {len(left)} left as they were (the first: {left[0]})"
    return _back(bridge, "/schedules", "done", told)


def _list_filter(params: Mapping[str, str]) -> dict[str, Any]:
    """What the list of schedules is narrowed to, as :meth:`Bridge.schedules` takes it: from
    the list's query, or from the bulk form's copy of it (so that "every schedule this
    filter matches" is what the list shows)."""
    return {
        "prefix": params.get("q") or None,
        "task": params.get("task") or None,
        "label": params.get("label") or None,
        **STATE_FILTERS.get(params.get("state") or "", {}),
    }


def _every_match(bridge: Bridge, form: dict[str, str]) -> list[str]:
    """The names of every schedule the list's filter matches, read page by page."""
    filters = _list_filter(form)
    names: list[str] = []
    cursor = None
    while True:
        page = bridge.schedules(limit=1000, cursor=cursor, **filters)
        names += [schedule.name for schedule in page.items]
        if len(names) > BULK_MAX:
            raise ValidationError("every", "on", f"a filter matching at most {BULK_MAX} schedules")
        if page.next is None:
            return names
        cursor = page.next


def _apply(bridge: Bridge, action: str, name: str, label: str) -> None:
    """One schedule's change of a bulk action, as the schedule's own page makes it."""
    if action == "pause":
        bridge.pause(name)
    elif action == "resume":
        bridge.resume(name)
    elif action == "run":
        bridge.run(name)
    elif action == "delete":
        bridge.remove(name)
    else:
        labels = bridge.get(name).labels
        wanted = (*labels, label) if action == "add label" else [x for x in labels if x != label]
        if tuple(wanted) == labels:
            raise ValidationError("label", label, f"a label {name} does not have already")
        bridge.edit(name, labels=list(wanted))


#: The dashboard's answers that are JSON for its script, refused as the API refuses.
PREVIEW_PATH = "/forecast.json"
#: Occurrences the schedule's form shows of the timer being typed.
PREVIEW_COUNT = 5


@router.get(PREVIEW_PATH)
def preview(request: Request) -> JSONAnswer:
    """The next five occurrences of the timer and zone being typed in the schedule's form
    (:meth:`Bridge.preview`), for its script to show in the browser's zone and the
    schedule's as they are typed; a refusal is the API's ``422``, naming the field."""
    bridge, _ = _reader(request)
    params = request.query_params
    found = bridge.preview(params.get("timer", ""), params.get("timezone", ""), PREVIEW_COUNT)
    return JSONAnswer(found.to_json())


@router.get("/new", response_class=HTMLResponse)
def new_schedule(request: Request) -> HTMLResponse:
    """The form of a new schedule: empty, or (``?from=NAME``, the schedule page's
    Duplicate) holding a copy of a schedule's definition and policies under a new name."""
    bridge, viewer = _form_reader(request)
    copied = request.query_params.get("from")
    if copied is None:
        return render(request, "form.html", viewer, **_form_context(bridge, None, {}, None))
    original = bridge.get(copied)
    values = {
        **_values_of(original),
        "name": f"{original.name}-copy",
        "enabled": "on" if original.enabled else "",
    }
    context = _form_context(bridge, None, values, None)
    return render(request, "form.html", viewer, copied_from=original.name, **context)


@router.post("/new", response_model=None)
async def create_schedule(request: Request) -> Response:
    bridge, form, viewer = await _changing(request)
    try:
        _only(form, SCHEDULE_FORM_FIELDS)
        fields = _form_fields(form, creating=True)
        name = fields.pop("name", "")
        await run_in_threadpool(lambda: bridge.add(name, **fields))
    except ValidationError as exc:
        # As it was sent: an unticked box is not in the form, and is shown unticked.
        values = {**form, "enabled": form.get("enabled", "")}
        context = _form_context(bridge, None, values, exc)
        return render(request, "form.html", viewer, 422, **context)
    return _back(bridge, schedule_path(name), "done", f"created {name}")


# -- one schedule ----------------------------------------------------------------------------


@router.get("/schedules/{name:path}/edit", response_class=HTMLResponse)
def edit_page(request: Request, name: str) -> HTMLResponse:
    bridge, viewer = _form_reader(request)
    schedule = bridge.get(name)
    context = _form_context(bridge, schedule, _values_of(schedule), None)
    return render(request, "form.html", viewer, **context)


@router.post("/schedules/{name:path}/edit", response_model=None)
async def edit(request: Request, name: str) -> Response:
    bridge, form, viewer = await _changing(request)
    # The reads and the change wait on the database (a row another session has locked,
    # say): in the thread pool, so that the server answers everyone else meanwhile.
    return await run_in_threadpool(_edit, request, bridge, name, form, viewer)


def _edit(
    request: Request, bridge: Bridge, name: str, form: dict[str, str], viewer: Viewer
) -> Response:
    schedule = bridge.get(name)
    try:
        _only(form, SCHEDULE_FORM_FIELDS[:-2])
        fields = _form_fields(form, creating=False)
        changed = {
            key: value for key, value in fields.items() if value != _values_of(schedule).get(key)
        }
        if changed:
            bridge.edit(name, **changed)
    except ValidationError as exc:
        return render(
            request, "form.html", viewer, 422, **_form_context(bridge, schedule, form, exc)
        )
    return _back(bridge, schedule_path(name), "done", "saved" if changed else "nothing to change")


#: The actions of a schedule's page, and the fields of each one's form.
ACTIONS = {
    "pause": ("note",),
    "resume": ("from",),
    "run": ("overlap",),
    "backfill": ("from", "to", "overlap"),
    "delete": (),
}
#: The actions on a run, and the fields of each one's form.
RUN_ACTIONS = {"cancel": ("terminate", "note"), "retry": ()}


@router.post("/schedules/{name:path}/{action}", response_model=None)
async def act(request: Request, name: str, action: str) -> Response:
    if action not in ACTIONS:
        return HTMLResponse("Not found", status_code=404)
    bridge, form, _ = await _changing(request)
    back = schedule_path(name)
    try:
        _only(form, ACTIONS[action])
        done = await run_in_threadpool(_act, bridge, name, action, form)
    except (ValidationError, RunSkipped, SendFailed) as exc:
        return _back(bridge, back, "error", str(exc))
    return _back(bridge, "/schedules" if action == "delete" else back, "done", done)


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
    cursor = request.query_params.get("runs") or None
    runs = bridge.runs(name, cursor=cursor, limit=RUN_PAGE)
    log: dict[str, Any] = {
        "runs": runs.items,
        "following": runs.next,
        "open_statuses": {status.value for status in NON_FINAL_STATUSES},
        "retriable": bridge.retriable(runs.items) if viewer.admin else set(),
        "path": schedule_path(name),
    }
    if request.query_params.get("fragment") == "runs":
        # The run log alone, for the page's script, which refreshes it in place.
        return render(request, "_run_log.html", viewer, **log)
    schedule = bridge.get(name)
    outlook = bridge.forecast(name, 10)
    # The latest runs, for the picture of their durations and the strip of occurrences.
    latest = bridge.runs(name, limit=max(RUNS_SHOWN, OCCURRENCES_SHOWN)).items
    return render(
        request,
        "schedule.html",
        viewer,
        s=schedule,
        words=_timer_words(schedule),
        policies=_policy_words(schedule),
        outlook=outlook,
        day=bridge.stats(name, "1d"),
        week=bridge.stats(name, "7d"),
        trail=bridge.audit(name, limit=20).items,
        rate=_success_rate(schedule),
        chart=duration_chart(latest),
        occurrences=occurrence_strip(
            latest, bridge.gaps(name, schedule.created_at, OCCURRENCES_SHOWN)
        ),
        log_query=urlencode({"fragment": "runs", **({"runs": cursor} if cursor else {})}),
        **log,
    )


# -- runs --------------------------------------------------------------------------------------


@router.post("/runs/{run_id}/{action}", response_model=None)
async def run_action(request: Request, run_id: str, action: str) -> Response:
    if action not in RUN_ACTIONS:
        return HTMLResponse("Not found", status_code=404)
    bridge, form, _ = await _changing(request)
    run: Run = await run_in_threadpool(bridge.run_info, run_id)
    back = schedule_path(run.schedule) if run.schedule else "/schedules"
    try:
        _only(form, RUN_ACTIONS[action])
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
        return _back(bridge, back, "error", str(exc))
    return _back(bridge, back, "done", done)


# -- forms -------------------------------------------------------------------------------------

#: The text fields of the schedule form, besides the policies, in their order.
FORM_FIELDS = (
    *("task", "timer", "timezone", "args", "kwargs", "queue", "labels", "options"),
    "signature",
)
#: Every field of the schedule form; the last two only when it creates one.
SCHEDULE_FORM_FIELDS = (*FORM_FIELDS, *POLICY_NAMES, "allow_unknown_task", "name", "enabled")


def _only(form: dict[str, str], fields: Sequence[str]) -> None:
    """Refuse a field the form does not have, naming it, as the API refuses a field its body
    does not know: a form of this dashboard never sends one, and a forged or outdated one
    would otherwise have part of what it asks silently dropped."""
    for key, value in form.items():
        if key != "csrf" and key not in fields:
            raise ValidationError(key, value, f"a field of this form ({', '.join(fields)})")


def _values_of(schedule: Schedule) -> dict[str, str]:
    """A schedule's fields as the form shows them: as one would type them."""
    return {
        "task": schedule.task,
        "timer": schedule.timer,
        "timezone": schedule.timezone,
        "args": schedule.args,
        "kwargs": schedule.kwargs,
        "options": schedule.options,
        "signature": schedule.signature or "",
        "labels": ",".join(schedule.labels),
        "queue": "",
        **policy_values(schedule),
    }


def _form_fields(form: dict[str, str], creating: bool) -> dict[str, Any]:
    """What a submitted form asks for, as the API takes it: an empty field is left out
    (a policy field emptied on edit goes back to its default: :func:`policy_fields`)."""
    typed = {key: form.get(key, "").strip() for key in FORM_FIELDS}
    fields: dict[str, Any] = {key: value for key, value in typed.items() if value}
    fields.update(policy_fields(form, editing=not creating))
    if creating:
        fields["name"] = form.get("name", "")
        fields["enabled"] = form.get("enabled") == "on"
    if form.get("allow_unknown_task") == "on":
        fields["allow_unknown_task"] = True
    return fields


def _form_context(
    bridge: Bridge,
    schedule: Schedule | None,
    values: dict[str, str],
    refusal: ValidationError | None,
) -> dict[str, Any]:
    """What the form of a schedule shows: its values, the refusal beside its field, the
    policies that take a word as choices each with what it does, and the app's
    registered tasks as suggestions for the task (any name may still be typed, for
    ``allow_unknown_task``)."""
    field = None if refusal is None else refusal.field.split(".")[0]
    return {
        "s": schedule,
        "values": values,
        "refusal": refusal,
        "refused_field": field,
        "fields": [(name, DEFINITION_HELP[name]) for name in FORM_FIELDS],
        "policies": [(name, POLICY_HELP[name][1]) for name in POLICY_NAMES],
        "choices": POLICY_CHOICES,
        "suggestions": {"task": sorted(bridge.known_tasks() or ()), **POLICY_SUGGESTIONS},
    }


# -- errors -------------------------------------------------------------------------------------


def not_found(request: Request, exc: BridgeError) -> HTMLResponse:
    return render(request, "error.html", viewer_of(request), 404, problem_text=str(exc))


def sign_in(request: Request, _exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def refused(request: Request, exc: Exception, status: int = 403) -> HTMLResponse:
    return render(request, "error.html", viewer_of(request), status, problem_text=str(exc))


def refused_action(request: Request, exc: Exception) -> Response:
    """403 for an action refused (a read-only session's, a form without its CSRF token):
    the error page for a browser, the API's error shape for a program."""
    if not wants_html(request):
        return JSONAnswer({"error": "forbidden", "message": str(exc)}, status_code=403)
    return refused(request, exc)


#: The dashboard's own answers to the errors its pages raise.
PAGE_ERRORS = {
    SignInNeeded: sign_in,
    Refused: refused_action,
}


def no_page(request: Request) -> HTMLResponse:
    """The page of a path the dashboard does not have."""
    problem = f"There is no page at {request.url.path}."
    return render(request, "error.html", viewer_of(request), 404, problem_text=problem)


def wants_html(request: Request) -> bool:
    """Whether the client reads HTML (a browser), rather than a program reading JSON."""
    return "text/html" in request.headers.get("accept", "")


def is_page(request: Request) -> bool:
    """Whether a request is for one of the dashboard's pages (not the API's, a probe's, or
    the JSON its script reads)."""
    path = request.url.path
    return path != PREVIEW_PATH and not path.startswith(
        ("/api/", "/metrics", "/healthz", "/readyz", "/docs", "/openapi")
    )
