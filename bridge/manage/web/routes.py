"""The REST API under ``/api/v1``: everything :class:`~bridge.manage.api.Bridge` does, over HTTP.

Each endpoint is a thin call of one ``Bridge`` method, which checks its
input and raises the bridge's errors; :mod:`bridge.manage.web.app` turns
those into status codes (422 for a refused value, 404 for an unknown
schedule or run, 409 for a state that forbids the action). Reads need the
read or admin token, changes the admin token, and the token is checked
before the request's query and body fields: a caller it does not allow
learns nothing of the operation's parameters (401 or 403, never 422).
Handlers are plain functions, run in the server's thread pool, since the
database calls block.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from bridge.errors import ValidationError
from bridge.manage.api import Bridge, upcoming_json
from bridge.manage.web import schemas
from bridge.manage.web.answers import JSONAnswer
from bridge.manage.web.security import (
    ACTOR_HEADER,
    UNSAFE_METHODS,
    Access,
    actor,
    bearer,
    caller_of,
    header_text,
)
from bridge.rules import values
from bridge.rules.tokens import may_be_named_token


def known_parameters(request: Request) -> None:
    """Refuse a query parameter the operation does not take, naming it, as a field a body
    does not know is refused: a misspelt filter (``?pasued=true``) would otherwise be
    dropped, and the answer list what it was meant to leave out."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    taken = _parameters_of(route)
    for key, value in request.query_params.multi_items():
        if key not in taken:
            expected = (
                f"a parameter this operation takes ({', '.join(sorted(taken))})"
                if taken
                else "no query parameter (this operation takes none)"
            )
            raise ValidationError(key, value, expected)


def _parameters_of(route: APIRoute) -> frozenset[str]:
    """The query parameters of a route's function and of every dependency it has."""
    found: set[str] = set()
    waiting = [route.dependant]
    while waiting:
        dependant = waiting.pop()
        found.update(param.alias for param in dependant.query_params)
        waiting.extend(dependant.dependencies)
    return frozenset(found)


#: Routes are matched in the order they are declared: those of a schedule's sub-paths
#: (``/schedules/{name}/runs``) come before ``/schedules/{name}``, whose name may hold ``/``.
#: Each route takes :data:`Reader` or :data:`Admin` as its first parameter: the token is
#: checked first, then the query's parameters (:func:`known_parameters`), then the body.
router = APIRouter(prefix="/api/v1")
#: Documents the bearer token in the OpenAPI document (and gives its page a sign-in box).
_bearer = HTTPBearer(auto_error=False, description="The admin or the read token, or a named token.")


class NotAllowed(Exception):
    """The caller's token (or its absence) does not allow the request."""

    def __init__(self, access: Access, needed: Access) -> None:
        self.access = access
        self.needed = needed
        super().__init__(f"needs the {needed.name.lower()} token")


async def _bridge_for(
    request: Request, needed: Access, credentials: Any, api: bool = True
) -> Bridge:
    """The bridge acting as the caller, if the caller's token allows ``needed``; then, for an
    operation of the API, a query parameter it does not take is refused: only a caller it
    allows learns what it takes.

    Run on the event loop: a settings token or none is judged without I/O, and
    only a named token is looked up in the database, on a thread. A dependency
    run on a thread for every request cost a page a tenth of its CPU.
    """
    bridge: Bridge = request.app.state.bridge
    token = None if credentials is None else credentials.credentials
    client = request.client.host if request.client else None
    if token is not None and may_be_named_token(token):
        caller = await run_in_threadpool(caller_of, bridge, token, client)
    else:
        caller = caller_of(bridge, token, client)
    if caller.access < needed:
        raise NotAllowed(caller.access, needed)
    if api:
        known_parameters(request)
    return bridge.acting_as(
        actor(caller.name, client, header_text(request.headers.get(ACTOR_HEADER)))
    )


def check_caller(request: Request) -> None:
    """Raise :class:`NotAllowed` unless the caller may make this request, judged from its
    method: a change needs the admin token. For a body FastAPI could not decode, which it
    refuses before any dependency of the route runs: a caller the token does not allow
    learns nothing of what the body should have been. (The dashboard's forms sign in with
    a session instead, and are judged by their own pages.)"""
    if not request.url.path.startswith(router.prefix + "/"):
        return
    bridge: Bridge = request.app.state.bridge
    client = request.client.host if request.client else None
    caller = caller_of(bridge, bearer(request.headers.get("authorization")), client)
    needed = Access.ADMIN if request.method in UNSAFE_METHODS else Access.READ
    if caller.access < needed:
        raise NotAllowed(caller.access, needed)


async def reader(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Bridge:
    """The bridge, for a caller allowed to read."""
    return await _bridge_for(request, Access.READ, credentials)


async def admin(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Bridge:
    """The bridge, acting as the caller, for a caller allowed to change schedules."""
    return await _bridge_for(request, Access.ADMIN, credentials)


async def scraper(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Bridge:
    """The bridge, for a caller allowed to read ``/metrics``: not an operation of the API,
    so the parameters a scraper's configuration may add are left alone."""
    return await _bridge_for(request, Access.READ, credentials, api=False)


Reader = Annotated[Bridge, Depends(reader)]
Admin = Annotated[Bridge, Depends(admin)]
Scraper = Annotated[Bridge, Depends(scraper)]
Text = Annotated[str | None, Query()]


def answer(value: Any, status: int = 200) -> JSONResponse:
    """The JSON of a value made JSON-ready (``to_json``), or of a schedule, a run or a page
    of them (see :class:`~bridge.manage.web.answers.JSONAnswer`), sent as it is: FastAPI
    would otherwise walk it again to encode it, which costs a page as much as reading it."""
    return JSONAnswer(value, status_code=status)


def flag(field: str, value: str | None) -> bool | None:
    """A query parameter that is ``true`` or ``false`` (as a body's is), or left out."""
    if value is None:
        return None
    if value in ("true", "false"):
        return value == "true"
    raise ValidationError(field, value, "true or false")


# -- schedules ---------------------------------------------------------------------------


@router.get("/schedules", tags=["schedules"])
def list_schedules(
    bridge: Reader,
    prefix: Text = None,
    task: Text = None,
    enabled: Text = None,
    paused: Text = None,
    finished: Text = None,
    broken: Text = None,
    failing: Text = None,
    label: Text = None,
    late: Annotated[
        str | None, Query(description="true: only schedules due for longer than the grace.")
    ] = None,
    sort: Annotated[str, Query(description="name, or next (next run, soonest first).")] = "name",
    cursor: Annotated[str | None, Query(description="The next of the page before.")] = None,
    limit: Annotated[str, Query(description="At most 1000.")] = "100",
) -> JSONResponse:
    """A page of schedules, filtered; ``next`` is the cursor of the following page."""
    return answer(
        bridge.schedules(
            prefix=prefix,
            task=task,
            enabled=flag("enabled", enabled),
            paused=flag("paused", paused),
            finished=flag("finished", finished),
            broken=flag("broken", broken),
            failing=flag("failing", failing),
            label=label,
            late=flag("late", late) or None,
            sort=sort,
            cursor=cursor,
            limit=limit,  # type: ignore[arg-type]  # the API checks and converts it
        )
    )


@router.post("/schedules", status_code=201, tags=["schedules"])
def create_schedule(bridge: Admin, body: schemas.ScheduleCreate) -> JSONResponse:  # type: ignore[valid-type]
    """Create a schedule (the fields of ``bridge add``)."""
    fields = body.given()  # type: ignore[attr-defined]
    return answer(bridge.add(fields.pop("name"), **fields).to_json(), 201)


@router.get("/schedules/{name:path}/next", tags=["schedules"])
def next_runs(
    bridge: Reader, name: str, count: Annotated[str, Query(description="At most 1000.")] = "5"
) -> JSONResponse:
    """When beat will send the next runs, as ``bridge next`` says."""
    outlook = bridge.forecast(name, count)  # type: ignore[arg-type]
    return answer(
        {
            "runs": [upcoming_json(run) for run in outlook.runs],
            "end": outlook.end,
        }
    )


@router.get("/schedules/{name:path}/runs", tags=["runs"])
def schedule_runs(
    bridge: Reader,
    name: str,
    status: Text = None,
    trigger: Text = None,
    since: Text = None,
    until: Text = None,
    cursor: Text = None,
    limit: str = "100",
) -> JSONResponse:
    """A page of the schedule's runs, newest occurrence first."""
    return list_runs(bridge, name, status, trigger, since, until, cursor, limit)


@router.get("/schedules/{name:path}/stats", tags=["schedules"])
def schedule_stats(
    bridge: Reader,
    name: str,
    window: Annotated[str, Query(description="How far back: 1h, 1d, 7d...")] = "1d",
) -> JSONResponse:
    """Counts by status, success rate, durations and start delays over a window."""
    return answer(bridge.stats(name, window).to_json())


@router.get("/schedules/{name:path}/audit", tags=["audit"])
def schedule_audit(
    bridge: Reader, name: str, cursor: Text = None, limit: str = "100"
) -> JSONResponse:
    """Who changed the schedule, when and how, newest first."""
    return answer(bridge.audit(name, cursor=cursor, limit=limit).to_json())  # type: ignore[arg-type]


@router.post("/schedules/{name:path}/pause", tags=["schedules"])
def pause(bridge: Admin, name: str, body: schemas.Pause | None = None) -> JSONResponse:
    """Stop firing the schedule until it is resumed, with a note saying why."""
    return answer(bridge.pause(name, None if body is None else body.note).to_json())


@router.post("/schedules/{name:path}/resume", tags=["schedules"])
def resume(bridge: Admin, name: str, body: schemas.Resume | None = None) -> JSONResponse:
    """Fire the schedule again, from now or catching up what it missed."""
    return answer(bridge.resume(name, "now" if body is None else body.from_).to_json())


@router.post("/schedules/{name:path}/run", status_code=201, tags=["runs"])
def run_now(bridge: Admin, name: str, body: schemas.ManualRun | None = None) -> JSONResponse:
    """Send a run now (``trigger=manual``), whatever the timer says."""
    return answer(bridge.run(name, None if body is None else body.overlap).to_json(), 201)


@router.post("/schedules/{name:path}/backfill", status_code=201, tags=["runs"])
def backfill(bridge: Admin, name: str, body: schemas.Backfill) -> JSONResponse:
    """Send the timer's occurrences in a past range, once each."""
    done = bridge.backfill(name, body.from_, body.to, overlap=body.overlap, limit=body.limit)
    return answer(
        {
            "created": [run.to_json() for run in done.created],
            "existing": done.existing,
            "excluded": done.excluded,
        },
        201,
    )


@router.post("/schedules/{name:path}/silence", tags=["incidents"])
def silence(bridge: Admin, name: str, body: schemas.Silence | None = None) -> JSONResponse:
    """Send no alert about the schedule, for a while or until unsilenced."""
    return answer(bridge.silence(name, None if body is None else body.for_).to_json())


@router.delete("/schedules/{name:path}/silence", tags=["incidents"])
def unsilence(bridge: Admin, name: str) -> JSONResponse:
    """Send the schedule's alerts again."""
    return answer(bridge.unsilence(name).to_json())


@router.get("/schedules/{name:path}", tags=["schedules"])
def get_schedule(bridge: Reader, name: str) -> JSONResponse:
    """Every field of the schedule."""
    return answer(bridge.get(name))


@router.patch("/schedules/{name:path}", tags=["schedules"])
def edit_schedule(bridge: Admin, name: str, body: schemas.ScheduleEdit) -> JSONResponse:  # type: ignore[valid-type]
    """Change the fields given (those of ``bridge edit``); the others keep their values."""
    fields = body.given()  # type: ignore[attr-defined]
    if not fields:
        raise ValidationError("body", {}, "at least one field to change")
    return answer(bridge.edit(name, **fields).to_json())


@router.delete("/schedules/{name:path}", status_code=204, tags=["schedules"])
def delete_schedule(bridge: Admin, name: str) -> Response:
    """Delete the schedule and its run history (its audit trail stays)."""
    bridge.remove(name)
    return Response(status_code=204)


# -- calendars ---------------------------------------------------------------------------


@router.get("/calendars", tags=["calendars"])
def list_calendars(bridge: Reader) -> JSONResponse:
    """Every calendar, with the schedules that skip it."""
    return answer({"items": [info.to_json() for info in bridge.calendars()]})


@router.post("/calendars", status_code=201, tags=["calendars"])
def create_calendar(bridge: Admin, body: schemas.CalendarCreate) -> JSONResponse:
    """Make a calendar (the fields of ``bridge calendar add``); 409 if its name is taken
    and ``replace`` is not true."""
    fields = body.given()
    return answer(bridge.add_calendar(fields.pop("name"), **fields).to_json(), 201)


@router.get("/calendars/{name}", tags=["calendars"])
def get_calendar(bridge: Reader, name: str) -> JSONResponse:
    """What the calendar holds, and the schedules that skip it."""
    return answer(bridge.calendar(name).to_json())


@router.delete("/calendars/{name}", status_code=204, tags=["calendars"])
def delete_calendar(bridge: Admin, name: str) -> Response:
    """Delete the calendar; 409 while a schedule skips it."""
    bridge.remove_calendar(name)
    return Response(status_code=204)


# -- labels ------------------------------------------------------------------------------


@router.post("/labels/{label:path}/pause", tags=["schedules"])
def pause_label(bridge: Admin, label: str, body: schemas.Pause | None = None) -> JSONResponse:
    """Pause every enabled schedule carrying the label."""
    paused = bridge.pause_label(label, None if body is None else body.note)
    return answer({"schedules": [schedule.name for schedule in paused]})


@router.post("/labels/{label:path}/resume", tags=["schedules"])
def resume_label(bridge: Admin, label: str, body: schemas.Resume | None = None) -> JSONResponse:
    """Resume every paused or broken schedule carrying the label."""
    resumed = bridge.resume_label(label, "now" if body is None else body.from_)
    return answer({"schedules": [schedule.name for schedule in resumed]})


# -- runs --------------------------------------------------------------------------------


@router.get("/runs", tags=["runs"])
def list_runs(
    bridge: Reader,
    schedule: Text = None,
    status: Annotated[str | None, Query(description="Statuses, separated by commas.")] = None,
    trigger: Annotated[str | None, Query(description="Triggers, separated by commas.")] = None,
    since: Annotated[str | None, Query(description="Planned at or after (ISO-8601).")] = None,
    until: Annotated[str | None, Query(description="Planned before (ISO-8601).")] = None,
    cursor: Text = None,
    limit: str = "100",
) -> JSONResponse:
    """A page of the runs of every schedule (or of one), newest occurrence first."""
    return answer(
        bridge.runs(
            schedule,
            status=status,
            trigger=trigger,
            since=since,
            until=until,
            cursor=cursor,
            limit=limit,  # type: ignore[arg-type]
        )
    )


@router.get("/runs/{run_id}", tags=["runs"])
def get_run(bridge: Reader, run_id: str) -> JSONResponse:
    """One run, with its result, error and traceback."""
    return answer(bridge.run_info(run_id).to_json())


@router.post("/runs/{run_id}/cancel", tags=["runs"])
def cancel_run(bridge: Admin, run_id: str, body: schemas.Cancel | None = None) -> JSONResponse:
    """Cancel a run that has not ended: recorded REVOKED with the reason, revoked on the
    workers, and terminated where it executes if asked."""
    given = body or schemas.Cancel()
    return answer(bridge.cancel(run_id, terminate=given.terminate, note=given.note).to_json())


@router.post("/runs/{run_id}/retry", status_code=201, tags=["runs"])
def retry_run(bridge: Admin, run_id: str) -> JSONResponse:
    """Send a failed, lost or revoked run again, as the next attempt of its occurrence."""
    return answer(bridge.retry(run_id).to_json(), 201)


# -- incidents ---------------------------------------------------------------------------


@router.get("/incidents", tags=["incidents"])
def list_incidents(
    bridge: Reader,
    open: Annotated[str | None, Query(description="true: only open ones.")] = None,
    cursor: Text = None,
    limit: str = "100",
) -> JSONResponse:
    """Incidents, newest first: late, overrun, failing, broken, missed, no beat."""
    return answer(
        bridge.incidents(
            open_only=bool(flag("open", open)),
            cursor=cursor,
            limit=limit,  # type: ignore[arg-type]
        ).to_json()
    )


@router.post("/incidents/{incident_id}/acknowledge", tags=["incidents"])
def acknowledge(bridge: Admin, incident_id: str) -> JSONResponse:
    """Acknowledge an incident: its alert is not repeated; its recovery still goes."""
    return answer(bridge.acknowledge(incident_id).to_json())  # type: ignore[arg-type]


@router.post("/prune", tags=["scheduler"])
def prune(bridge: Admin, body: schemas.Prune | None = None) -> JSONResponse:
    """Remove old final runs now (what beat does over time); dry_run counts them only."""
    dry_run = False if body is None else values.flag("dry_run", body.dry_run)
    done = bridge.prune(dry_run)
    return answer({"dry_run": dry_run, "runs": done.runs, "schedules": done.schedules})


# -- the scheduler -----------------------------------------------------------------------


@router.get("/instances", tags=["scheduler"])
def instances(bridge: Reader) -> JSONResponse:
    """Beats and workers with their heartbeat age, and whether a beat is alive."""
    return answer(bridge.status().to_json())


@router.get("/audit", tags=["audit"])
def audit(
    bridge: Reader, schedule: Text = None, cursor: Text = None, limit: str = "100"
) -> JSONResponse:
    """Every change to every schedule (or to one) and every named token made or revoked,
    newest first."""
    return answer(bridge.audit(schedule, cursor=cursor, limit=limit).to_json())  # type: ignore[arg-type]
