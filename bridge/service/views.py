"""Read-only views of schedules, runs, instances and the audit log, as the API returns them.

Frozen values copied from the table rows, so that they can be passed
around, compared and turned into JSON (:meth:`to_json`: times in ISO-8601
UTC, the JSON columns decoded) without a database session. The services
build them, so that :class:`bridge.manage.api.Bridge` hands on what they
return, and the front ends take them from there.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Generic, Self, TypeVar

from bridge.errors import ValidationError
from bridge.rules.calendars import Calendar, names_of
from bridge.rules.canvas import stored_canvas
from bridge.rules.decisions import Upcoming
from bridge.rules.health import Health, State
from bridge.rules.timers import parse_timer
from bridge.rules.values import column_of, columns_of, json_or_text

T = TypeVar("T")


def _iso(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value


def upcoming_json(run: Upcoming) -> dict[str, Any]:
    """One run of a forecast (``bridge next``, ``GET .../next``) as JSON."""
    return {
        "fire_at": run.fire_at.isoformat(),
        "occurrence": run.occurrence.isoformat(),
        "latest": run.latest.isoformat(),
        "trigger": run.trigger.value,
        "attempt": run.attempt,
        "after_previous": run.after_previous,
    }


def _names(cls: type) -> tuple[str, ...]:
    """The field names of a view class, in order: ``dataclasses.fields`` walks the class
    each call, which cost a page of 100 schedules more than reading them."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(item.name for item in fields(cls))
    return names


_NAMES: dict[type, tuple[str, ...]] = {}


def _converted(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The fields of a view class that JSON gets in another form: its times (ISO-8601 UTC),
    its tuples (lists) and its JSON columns (decoded). Read from the annotations once, so
    that a view's JSON converts these only, not each of its fields on the chance."""
    found = _CONVERTED.get(cls)
    if found is None:
        times = tuple(item.name for item in fields(cls) if "datetime" in str(item.type))
        sequences = tuple(item.name for item in fields(cls) if str(item.type).startswith("tuple"))
        documents = tuple(item.name for item in fields(cls) if item.name in _JSON_COLUMNS)
        found = _CONVERTED[cls] = (times, sequences, documents)
    return found


_CONVERTED: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}


#: The columns that hold JSON as text.
_JSON_COLUMNS = ("args", "kwargs", "options", "signature")


class _View:
    """Shared conversion of a table row into a frozen, detached view."""

    @classmethod
    def of(cls, row: Any) -> Self:
        return cls(**columns_of(row, _names(cls)))

    @classmethod
    def _made(cls, values: dict[str, Any]) -> Self:
        """A view holding ``values``: one for each of its fields, in their order.

        A frozen dataclass's ``__init__`` sets each field through
        ``object.__setattr__``; for 100 schedules of 63 fields that was a sixth
        of what building a page cost. A view checks and derives nothing when
        made, so its fields are put in place at once.
        """
        view = object.__new__(cls)
        vars(view).update(values)
        return view

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields: times as ISO-8601 UTC, tuples as lists, JSON columns decoded."""
        out = self.json_fields()
        times, sequences, _ = _converted(type(self))
        for name in times:
            value = out[name]
            if value is not None:
                out[name] = value.isoformat()
        for name in sequences:
            out[name] = list(out[name])
        return out

    def json_fields(self, decode: Callable[[str | None], Any] = json_or_text) -> dict[str, Any]:
        """:meth:`to_json`'s fields for an encoder that writes times (ISO-8601) and tuples
        itself, as the HTTP API's does: the times in UTC, the JSON columns decoded by
        ``decode`` (as :func:`~bridge.rules.values.json_or_text` does, or faster).

        Converting a page's 1,700 times to text in Python took the HTTP API
        longer than its encoder takes to write the whole page.
        """
        out = dict(vars(self))  # the fields, in their order: a view has no other attribute
        times, _, documents = _converted(type(self))
        for name in times:
            value = out[name]
            if value is not None and value.tzinfo is not UTC:
                out[name] = value.astimezone(UTC)
        for name in documents:
            out[name] = decode(out[name])
        return out


@dataclass(frozen=True)
class Schedule(_View):
    """A schedule as stored in ``periodic_task``."""

    id: int
    name: str
    task: str
    timer: str
    timezone: str
    args: str
    kwargs: str
    options: str
    enabled: bool
    nextrun: datetime | None
    next_occurrence: datetime | None
    anchor: datetime
    overlap: str
    replace_with: str
    catchup: str
    catchup_window: float | None
    jitter: float
    start_at: datetime | None
    end_at: datetime | None
    remaining: int | None
    max_failures: int | None
    max_attempts: int
    backoff: str | None
    expires: str
    grace: float | None
    max_runtime: float | None
    on_overrun: str
    alert_after: int | None
    recover_after: int | None
    keep_runs: int | None
    keep_days: int | None
    held: datetime | None
    retry_plan: datetime | None
    retry_attempt: int | None
    retry_at: datetime | None
    failure_streak: int
    failing_since: datetime | None
    success_streak: int
    source: str
    note: str | None
    broken: bool
    silenced_until: datetime | None
    created_at: datetime
    updated_at: datetime
    last_run_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    total_run_count: int
    skipped_count: int
    missed_count: int
    excluded_count: int
    expired_count: int
    alert_count: int
    success_count: int
    failure_count: int
    revoked_count: int
    lost_count: int
    runtime_total: float
    last_success_at: datetime | None
    last_failure_at: datetime | None
    worker: str | None
    marked: datetime | None
    labels: tuple[str, ...] = ()
    #: The calendars its occurrences are not sent on, by name.
    skip_calendars: tuple[str, ...] = ()
    #: What the schedule is for, in words (kept from the scheduler it was imported from).
    description: str | None = None
    #: The Celery canvas it sends instead of its task alone, in Celery's JSON form.
    signature: str | None = None
    #: Its health (see :mod:`bridge.rules.health`): the state, why, and since when. Judged
    #: when the view is made, so not compared: two views of one row are equal.
    health: str = field(default=Health.OK.value, compare=False)
    health_reason: str = field(default="", compare=False)
    health_since: datetime | None = field(default=None, compare=False)

    @classmethod
    def of(cls, row: Any, state: State | None = None) -> Self:
        """The schedule ``row`` (a mapping or an object), judged ``state`` (ok when not
        judged)."""
        values = columns_of(row, _STORED)
        values["skip_calendars"] = names_of(values["skip_calendars"])
        state = state or _UNJUDGED
        values.update(
            health=state.health.value, health_reason=state.reason, health_since=state.since
        )
        return cls._made(values)

    @property
    def canvas(self) -> str | None:
        """The canvas it sends, in a line (:attr:`~bridge.rules.canvas.Canvas.shape`), or
        None when it sends its task alone; the stored text when it no longer reads."""
        if self.signature is None:
            return None
        try:
            return stored_canvas(self.signature).shape
        except ValidationError:
            return self.signature

    @property
    def fixed_delay(self) -> bool:
        """Whether the timer counts from the previous run's completion (``... after completion``).

        Such a schedule has no next run while a run is open: it is set when that run ends.
        """
        try:
            timer = parse_timer(self.timer, self.timezone, self.anchor)
        except ValueError:  # a bad stored timer or zone is reported where it is used
            return False
        return timer.fixed_delay


#: The health of a schedule not judged: ok, since no time, for no reason (the defaults of
#: :class:`Schedule`'s health fields).
_UNJUDGED = State(Health.OK)

#: The columns of ``periodic_task`` (and its labels) a schedule's view copies, in the
#: order of its fields; the health, judged apart, comes last.
_STORED = tuple(
    name for name in _names(Schedule) if name not in ("health", "health_reason", "health_since")
)


@dataclass(frozen=True)
class Run(_View):
    """One run, as recorded in ``task_execution``, with its schedule's name."""

    id: str
    schedule_id: int | None
    schedule: str | None
    task: str
    plan_time: datetime | None
    attempt: int
    trigger: str
    status: str
    queued_at: datetime | None
    expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    runtime: float | None
    worker: str | None
    result: str | None
    error: str | None
    traceback: str | None
    #: The OpenTelemetry trace beat's span of the run began (None: not traced).
    trace_id: str | None = None

    @classmethod
    def of(cls, row: Any, schedule: str | None = None) -> Self:
        """The run ``row`` (a mapping or an object) of the schedule called ``schedule``."""
        values = columns_of(row, _RUN_COLUMNS)
        return cls(schedule_id=column_of(row, "periodic_task_id"), schedule=schedule, **values)


#: The columns of ``task_execution`` a run's view copies (the schedule's id and name are
#: given apart).
_RUN_COLUMNS = tuple(name for name in _names(Run) if name not in ("schedule_id", "schedule"))


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing, and the cursor of the next one (None: this is the last)."""

    items: list[T]
    next: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [item.to_json() for item in self.items],  # type: ignore[attr-defined]
            "next": self.next,
        }

    def json_fields(self, decode: Callable[[str | None], Any] = json_or_text) -> dict[str, Any]:
        """:meth:`to_json` with the items left as they are, for an encoder that asks each
        one for its :meth:`_View.json_fields`."""
        return {"items": self.items, "next": self.next}


@dataclass(frozen=True)
class Preview:
    """The first occurrences of a timer not saved yet (:meth:`Bridge.preview`), and the zone
    it was read in: the one given, or the app's."""

    timezone: str
    runs: list[datetime]

    def to_json(self) -> dict[str, Any]:
        return {"timezone": self.timezone, "runs": [at.isoformat() for at in self.runs]}


@dataclass(frozen=True)
class Gap:
    """Occurrences of a schedule that were not run, counted in the hour beat decided so
    (:meth:`Bridge.gaps`): skipped (a run was open, and the overlap policy skips) or
    missed (the catch-up policy passed them over, or they fell outside its window)."""

    hour: datetime
    skipped: int
    missed: int


@dataclass(frozen=True)
class TimerGroup:
    """Schedules due within a timeline's span that share a timer and a zone, and when that
    timer fires within it (:meth:`Bridge.timeline`)."""

    timer: str
    timezone: str
    #: The timer in words (``every minute``).
    words: str
    schedules: int
    #: One of them, the first by name.
    first_name: str
    #: The timer's occurrences from the soonest next run among them, within the span.
    fires: list[datetime]
    #: It fires more often within the span than
    #: :data:`bridge.service.forecasts.TIMELINE_FIRES` left room for: ``fires`` holds the
    #: first of them only.
    more: bool


@dataclass(frozen=True)
class Timeline:
    """When the schedules fire over a span (:meth:`Bridge.timeline`), by timer."""

    since: datetime
    until: datetime
    groups: list[TimerGroup]
    #: Schedules due within the span in groups left out (beyond
    #: :data:`bridge.service.forecasts.TIMELINE_GROUPS` or
    #: :data:`bridge.service.forecasts.TIMELINE_FIRES`, or whose timer no longer reads).
    left_out: int


@dataclass(frozen=True)
class LabelRate:
    """The runs of a label's schedules that ended over a window, and their success rate
    (:meth:`Bridge.label_rates`)."""

    label: str
    counts: dict[str, int]
    #: SUCCESS among those that ended SUCCESS, FAILURE or LOST (None: none did).
    success_rate: float | None


@dataclass(frozen=True)
class Backfill:
    """What :meth:`Bridge.backfill` did."""

    #: The runs recorded and sent, oldest occurrence first.
    created: list[Run]
    #: Occurrences of the range already recorded (by beat or an earlier backfill); not sent again.
    existing: int
    #: Occurrences of the range on the schedule's calendars; not sent.
    excluded: int = 0


@dataclass(frozen=True)
class Instance(_View):
    """A beat instance, from its heartbeat in ``beat_instance``."""

    id: str
    host: str
    pid: int
    started_at: datetime
    last_tick: datetime
    sent: int


@dataclass(frozen=True)
class Worker(_View):
    """A Celery worker that records runs, from its heartbeat in ``worker_instance``."""

    name: str
    pid: int
    started_at: datetime
    last_seen: datetime


@dataclass(frozen=True)
class Status:
    """What ``bridge status`` shows: who ticks, who works, and how far behind the schedules are."""

    instances: builtins.list[Instance]
    workers: builtins.list[Worker]
    #: Enabled schedules due now that no instance holds (or whose mark expired).
    due_unclaimed: int
    #: How long the most overdue enabled schedule has been due, in seconds (None: none is).
    worst_lateness: float | None
    #: When this was read: the heartbeat ages count from it.
    now: datetime
    #: How recent a beat's last tick must be for it to count as alive, in seconds.
    beat_timeout: float

    @property
    def alive(self) -> bool:
        """Whether some beat instance ticked within ``beat_timeout``: the scheduler runs."""
        return any(self.age(i.last_tick) <= self.beat_timeout for i in self.instances)

    def age(self, moment: datetime) -> float:
        """Seconds from ``moment`` to when this was read."""
        return max(0.0, (self.now - moment).total_seconds())

    def to_json(self) -> dict[str, Any]:
        return {
            "alive": self.alive,
            "instances": [
                {**i.to_json(), "heartbeat_age": self.age(i.last_tick)} for i in self.instances
            ],
            "workers": [
                {**w.to_json(), "heartbeat_age": self.age(w.last_seen)} for w in self.workers
            ],
            "due_unclaimed": self.due_unclaimed,
            "worst_lateness": self.worst_lateness,
        }


@dataclass(frozen=True)
class SchedulerHealth:
    """Whether the scheduler works: a beat ticks, and the schema is the one the code expects."""

    #: The schema revision of the database (None: not migrated), and the code's latest.
    revision: str | None
    head: str
    status: Status
    #: Why this release may not run against the schema, in one line (None: it may).
    schema_problem: str | None = None

    @property
    def schema_current(self) -> bool:
        """The schema is one this release runs against: its head, or a later one whose
        release accepts this one."""
        return self.schema_problem is None

    @property
    def ok(self) -> bool:
        return self.schema_current and self.status.alive

    def problems(self) -> builtins.list[str]:
        """What is wrong, one line each (empty: healthy)."""
        found = []
        if self.schema_problem is not None:
            found.append(self.schema_problem)
        if not self.status.alive:
            ticks = [self.status.age(i.last_tick) for i in self.status.instances]
            latest = f"the latest ticked {min(ticks):.1f}s ago" if ticks else "none is registered"
            found.append(f"no beat instance ticked within {self.status.beat_timeout:g}s ({latest})")
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "alive": self.status.alive,
            "schema": {
                "revision": self.revision,
                "head": self.head,
                "current": self.schema_current,
            },
            "problems": self.problems(),
            "instances": self.status.to_json()["instances"],
        }


@dataclass(frozen=True)
class Stats:
    """A schedule over a window: runs by status, success rate, skips, misses, alerts,
    durations and start delays.

    The counts come from its hourly tallies (whole hours, untouched by
    pruning), with its open runs planned in the window; the durations and
    start delays from its latest recorded runs (see
    :data:`bridge.service.history.STATS_SAMPLE`). ``totals`` are its counts since
    it was created.
    """

    schedule: str
    window: float
    since: datetime
    until: datetime
    counts: dict[str, int]
    #: SUCCESS among the runs that ended SUCCESS, FAILURE or LOST (None: none did).
    success_rate: float | None
    duration: dict[str, float | None]
    start_delay: dict[str, float | None]
    skipped: int
    missed: int
    alerts: int
    totals: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        out = {name: _iso(getattr(self, name)) for name in _names(type(self))}
        return out


@dataclass(frozen=True)
class IncidentRecord(_View):
    """An incident: trouble with a schedule (or the scheduler), opened, alerted, closed."""

    id: int
    kind: str
    schedule_name: str | None
    since: datetime | None
    opened_at: datetime
    closed_at: datetime | None
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    alerted_at: datetime | None
    alerts: int
    recovery_sent_at: datetime | None
    message: str
    runs: str
    #: Tries in a row an alert URL refused the alert owed, and why the last one failed.
    alert_attempts: int = 0
    alert_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["runs"] = json.loads(out["runs"] or "[]")
        out["open"] = self.closed_at is None
        return out


@dataclass(frozen=True)
class Token(_View):
    """A named token of the HTTP server, as ``bridge token ls`` shows it: never its secret,
    which is shown once, when it is made, and kept nowhere."""

    id: int
    name: str
    #: ``read`` or ``admin``.
    role: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def state(self, now: datetime) -> str:
        """``revoked``, ``expired`` or ``active``: whether a request carrying it is served."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class CalendarInfo:
    """A named calendar, as ``bridge calendar show`` and the API give it: what it holds,
    when it was made and changed, and the schedules that skip it."""

    calendar: Calendar
    created_at: datetime
    updated_at: datetime
    #: The schedules that skip it, by name.
    schedules: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.calendar.name

    def to_json(self) -> dict[str, Any]:
        return {
            **self.calendar.to_json(),
            "created_at": self.created_at.astimezone(UTC).isoformat(),
            "updated_at": self.updated_at.astimezone(UTC).isoformat(),
            "schedules": list(self.schedules),
        }


@dataclass(frozen=True)
class AuditRecord(_View):
    """One entry of the audit log: who changed which schedule, when, and how; or who made
    or revoked a named token (``schedule_name`` empty, the token in ``after``)."""

    id: int
    at: datetime
    actor: str
    action: str
    schedule_id: int | None
    schedule_name: str
    before: str | None
    after: str | None
    note: str | None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        for key in ("before", "after"):
            out[key] = None if out[key] is None else json.loads(out[key])
        return out


__all__ = [
    "AuditRecord",
    "Backfill",
    "IncidentRecord",
    "Instance",
    "Page",
    "Preview",
    "Run",
    "Schedule",
    "SchedulerHealth",
    "Stats",
    "Status",
    "Worker",
]
