"""The typed Python API for managing schedules and reading their runs.

>>> from bridge import Bridge
>>> bridge = Bridge(app)
>>> bridge.add("report", task="workers.app.quick", timer="0 9 * * mon-fri",
...            timezone="Europe/Paris")

Every method checks its input completely before it writes, and raises
:class:`~bridge.errors.ValidationError` or :class:`~bridge.errors.ScheduleNotFound`.
The CLI is a thin layer over this class.
"""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Self, Unpack

from celery import Celery
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bridge import broker
from bridge.broker import check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import (
    DuplicateSchedule,
    RunSkipped,
    ScheduleNotFound,
    SendFailed,
    ValidationError,
)
from bridge.rules.checks import whole_number
from bridge.rules.decisions import (
    FINISHED_NOTES,
    Forecast,
    first_at_or_after,
    forecast,
    occurrences,
)
from bridge.rules.definition import build_definition, check_name, parse_json, require_occurrence
from bridge.rules.kinds import RunStatus, Source, Trigger
from bridge.rules.policy import Overlap, Policies, PolicyFields
from bridge.rules.runs import Payload, expires_at, new_run
from bridge.rules.timers import Timer, parse_timer
from bridge.storage.database import Database, database_for
from bridge.storage.lifecycle import state_of
from bridge.storage.models import BeatInstance, PeriodicTask, TaskExecution
from bridge.storage.store import Sent, Store, insert_ignoring_duplicates

#: The most runs :meth:`Bridge.forecast` (``bridge next``) looks ahead.
MAX_FORECAST = 1000
#: Why a fixed-delay schedule whose run is under way has no next run yet.
NOTE_RUNNING_RUN = "after the running run completes"
#: Why a schedule whose owed work waits for an open run has no next run yet.
NOTE_OPEN_RUN = "when its open run ends"
#: Where :meth:`Bridge.resume` restarts a schedule.
RESUME_FROM = ("now", "catchup")
#: The overlap choices of a manual run or a backfill: ``buffer_one`` holds a
#: *scheduled* occurrence, which a run sent by hand is not.
MANUAL_OVERLAPS = (Overlap.ALLOW, Overlap.SKIP, Overlap.REPLACE)


def _iso(value: Any) -> Any:
    return value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value


def _json_or_text(text: str) -> Any:
    """Decoded JSON for display; the raw text when a row holds malformed JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class _View:
    """Shared conversion of a table row into a frozen, detached view."""

    @classmethod
    def of(cls, row: Any) -> Self:
        return cls(**{field.name: getattr(row, field.name) for field in fields(cls)})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields: times as ISO-8601 UTC, JSON columns decoded."""
        out = {field.name: _iso(getattr(self, field.name)) for field in fields(self)}  # type: ignore[arg-type]
        for key in ("args", "kwargs", "options"):
            if key in out:
                out[key] = _json_or_text(out[key])
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
    held: datetime | None
    retry_plan: datetime | None
    retry_attempt: int | None
    retry_at: datetime | None
    failure_streak: int
    source: str
    note: str | None
    broken: bool
    created_at: datetime
    updated_at: datetime
    last_run_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    total_run_count: int
    skipped_count: int
    missed_count: int
    expired_count: int
    worker: str | None
    marked: datetime | None

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


@dataclass(frozen=True)
class Run(_View):
    """One run, as recorded in ``task_execution``."""

    id: str
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


@dataclass(frozen=True)
class Backfill:
    """What :meth:`Bridge.backfill` did."""

    #: The runs recorded and sent, oldest occurrence first.
    created: list[Run]
    #: Occurrences of the range already recorded (by beat or an earlier backfill); not sent again.
    existing: int


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
class Status:
    """What ``bridge status`` shows: who ticks, and how far behind the schedules are."""

    instances: builtins.list[Instance]
    #: Enabled schedules due now that no instance holds (or whose mark expired).
    due_unclaimed: int
    #: How long the most overdue enabled schedule has been due, in seconds (None: none is).
    worst_lateness: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": [instance.to_json() for instance in self.instances],
            "due_unclaimed": self.due_unclaimed,
            "worst_lateness": self.worst_lateness,
        }


class Bridge:
    """Management of schedules, against the database the app's settings name."""

    def __init__(
        self,
        app: Celery | None = None,
        *,
        database_url: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or Settings.from_app(app)
        self.database: Database = database_for(database_url or self.settings.database_url)

    # -- schema -------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade the bridge's tables; safe to repeat and to run concurrently."""
        self.database.migrate()

    # -- changes --------------------------------------------------------------

    def add(
        self,
        name: str,
        *,
        task: str,
        timer: str,
        args: Any = (),
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        enabled: bool = True,
        anchor: datetime | None = None,
        allow_unknown_task: bool = False,
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Create a schedule; its first run is the timer's first occurrence after now.

        ``policies`` are the scheduling policies (``overlap="allow"``,
        ``start=...``, ``max_failures=3``, ...; see :class:`~bridge.policy.PolicyFields`);
        those left out take their defaults. The first run also respects
        ``start`` and ``end``: a combination with no occurrence to come is refused.
        """
        now = utcnow()
        check_name(name)
        anchor = _aware("anchor", anchor) if anchor is not None else now
        if not isinstance(enabled, bool):
            raise ValidationError("enabled", enabled, "true or false")
        definition, timer_ = build_definition(
            task=task,
            timer=timer,
            timezone=timezone or self._default_timezone(),
            anchor=anchor,
            args=args,
            kwargs=kwargs,
            options=_with_queue(options, queue),
            policies=policies,
            known_tasks=None if allow_unknown_task else self._known_tasks(),
        )
        first = require_occurrence(timer_, definition.policies, now, timer)
        row = PeriodicTask(
            **definition.new_row(
                name, anchor=anchor, first=first, enabled=enabled, source=Source.API, now=now
            )
        )
        try:
            with self.database.session() as session:
                if session.scalar(select(PeriodicTask.id).where(PeriodicTask.name == name)):
                    raise DuplicateSchedule(name)
                session.add(row)
        except IntegrityError:
            raise DuplicateSchedule(name) from None
        return Schedule.of(row)

    def edit(
        self,
        name: str,
        *,
        task: str | None = None,
        timer: str | None = None,
        args: Any = None,
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        allow_unknown_task: bool = False,
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Change the fields given; a field left out or given as None keeps its value.

        A new timer, time zone, start or end moves the next run to the first
        occurrence after now that the new values allow; any other change
        leaves it. ``"none"`` clears an optional policy (``end="none"``). Values
        equal to the stored ones (or none given) write nothing: ``updated_at``
        stays as it was.
        """
        now = utcnow()
        with self.database.session() as session:
            row = self._row(session, name)
            # A new timer starts from now (an interval's grid is anchored there).
            anchor = now if timer is not None and timer != row.timer else row.anchor
            current = Policies.from_columns(row)
            merged_options = row.options if options is None else options
            definition, timer_ = build_definition(
                task=row.task if task is None else task,
                timer=row.timer if timer is None else timer,
                timezone=row.timezone if timezone is None else timezone,
                anchor=anchor,
                args=row.args if args is None else args,
                kwargs=row.kwargs if kwargs is None else kwargs,
                options=_with_queue(merged_options, queue),
                policies=policies,
                base=current,
                known_tasks=None if allow_unknown_task or task is None else self._known_tasks(),
            )
            new, columns = definition.policies, definition.columns()
            retimed = (definition.timer, definition.timezone, new.start, new.end) != (
                row.timer,
                row.timezone,
                current.start,
                current.end,
            )
            if not retimed and all(getattr(row, key) == value for key, value in columns.items()):
                return Schedule.of(row)
            if retimed:
                written = row.timer if timer is None else timer
                row.next_occurrence = row.nextrun = require_occurrence(timer_, new, now, written)
                row.anchor = anchor
            for key, value in columns.items():
                setattr(row, key, value)
            row.updated_at = now
            return Schedule.of(row)

    def pause(self, name: str, note: str | None = None) -> Schedule:
        """Stop firing the schedule until it is resumed; ``note`` says why.

        A schedule that is not enabled (paused, broken or finished) takes a
        new note; without one, or with the note it has, pausing it again is
        refused and writes nothing.
        """
        with self.database.session() as session:
            row = self._row(session, name)
            if not row.enabled and (note is None or note == row.note):
                shown = f"paused: {row.note}" if row.note else "paused"
                raise ValidationError(
                    "name", name, f"a schedule that is not paused already (it is {shown})"
                )
            row.enabled = False
            row.note = note
            row.updated_at = utcnow()
            return Schedule.of(row)

    def resume(self, name: str, from_: str = "now") -> Schedule:
        """Fire the schedule again; clears the note, the broken flag, the breaker and retries.

        ``from_="now"`` restarts at the first occurrence after now (within the
        start/end bounds): what fell due while it was paused is not run.
        ``"catchup"`` restarts at the occurrence the schedule stopped at, so
        beat catches up the occurrences missed meanwhile as the schedule's
        catch-up policy says.
        """
        if from_ not in RESUME_FROM:
            raise ValidationError("from", from_, " or ".join(RESUME_FROM))
        now = utcnow()
        with self.database.session() as session:
            row = self._row(session, name)
            if row.enabled and not row.broken:
                raise ValidationError(
                    "name", name, "a paused or broken schedule (it is enabled: nothing to resume)"
                )
            if from_ == "now":
                timer_ = parse_timer(row.timer, row.timezone, row.anchor)
                policies = Policies.from_columns(row)
                row.next_occurrence = require_occurrence(timer_, policies, now, row.timer)
            elif row.next_occurrence is None:
                raise ValidationError(
                    "from", from_, "now (the schedule has no occurrence left to catch up from)"
                )
            row.nextrun = row.next_occurrence
            row.enabled = True
            row.note = None
            row.broken = False
            row.failure_streak = 0
            row.held = None
            row.retry_plan = row.retry_attempt = row.retry_at = None
            row.updated_at = now
            return Schedule.of(row)

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        with self.database.session() as session:
            self._row(session, name)
            session.execute(delete(PeriodicTask).where(PeriodicTask.name == name))

    def run(self, name: str, overlap: str | None = None) -> Run:
        """Send a run now (``trigger=manual``), whatever the timer says.

        ``overlap`` says what to do while a run of the schedule is open:
        ``allow`` (default) sends anyway, ``skip`` refuses with
        :class:`~bridge.errors.RunSkipped`, ``replace`` revokes the open runs
        first. The schedule's next run, remaining runs and breaker are not
        changed: they count scheduled occurrences only.
        """
        app = self._sender()
        mode = _manual_overlap(overlap)
        schedule = self.get(name)
        payload = _payload(schedule)
        run_id = str(uuid.uuid4())
        self._make_way(app, schedule, mode, "run", f"replaced by manual run {run_id}")
        now = utcnow()
        with self.database.session() as session:
            session.add(
                TaskExecution(
                    **new_run(schedule.id, schedule.task, now, Trigger.MANUAL, now, run_id)
                )
            )
            session.execute(
                update(PeriodicTask)
                .where(PeriodicTask.id == schedule.id)
                .values(
                    last_run_at=now,
                    last_run_id=run_id,
                    last_status=RunStatus.PENDING.value,
                    total_run_count=PeriodicTask.total_run_count + 1,
                )
                .execution_options(synchronize_session=False)
            )
        self._send(app, schedule, payload, run_id, now, Trigger.MANUAL, "run")
        return self._runs([run_id])[0]

    def backfill(
        self,
        name: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str = Overlap.ALLOW.value,
        limit: int = 100,
    ) -> Backfill:
        """Record and send the occurrences of the timer from ``start`` to ``end``, both included.

        Each run has ``trigger=backfill`` and the id a scheduled run of its
        occurrence has, so an occurrence already recorded (by beat or by an
        earlier backfill) is counted in ``existing`` and not sent again:
        repeating a backfill is safe. ``end`` may not be later than now; later
        occurrences are beat's to send. A range of more than ``limit``
        occurrences is refused with nothing written. ``overlap`` is checked
        once, before the first run: ``allow`` (default), ``skip`` or
        ``replace``, as for :meth:`run`. The schedule's row (next run,
        counters, remaining runs, breaker) is not changed.
        """
        app = self._sender()
        now = utcnow()
        first, last = _instant("from", start), _instant("to", end)
        if last <= first:
            raise ValidationError("to", end, f"a time after from ({first.isoformat()})")
        if last > now:
            raise ValidationError(
                "to", end, "a time no later than now (later occurrences are beat's to send)"
            )
        limit = whole_number("limit", limit)
        mode = _manual_overlap(overlap)
        schedule = self.get(name)
        timer_ = parse_timer(schedule.timer, schedule.timezone, schedule.anchor)
        if schedule.fixed_delay:
            raise ValidationError(
                "timer",
                schedule.timer,
                "a timer with fixed occurrences (a fixed-delay timer has none to backfill)",
            )
        plans = _occurrences(timer_, first, last, limit, end)
        payload = _payload(schedule)
        self._make_way(app, schedule, mode, "backfill", "replaced by a backfill")
        sent: builtins.list[str] = []
        for plan in plans:
            record = new_run(schedule.id, schedule.task, plan, Trigger.BACKFILL, utcnow())
            with self.database.session() as session:
                if not insert_ignoring_duplicates(session, record):
                    continue
            self._send(app, schedule, payload, record["id"], plan, Trigger.BACKFILL, "backfill")
            sent.append(record["id"])
        return Backfill(created=self._runs(sent), existing=len(plans) - len(sent))

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Schedule:
        with self.database.session() as session:
            return Schedule.of(self._row(session, name))

    def list(self) -> builtins.list[Schedule]:
        with self.database.session() as session:
            rows = session.scalars(select(PeriodicTask).order_by(PeriodicTask.name))
            return [Schedule.of(row) for row in rows]

    def status(self, now: datetime | None = None) -> Status:
        """The live beat instances, the due rows nobody holds and the worst lateness."""
        now = now or utcnow()
        lease_start = now - timedelta(seconds=self.settings.lease_seconds)
        due = (PeriodicTask.enabled, PeriodicTask.nextrun <= now)
        with self.database.session() as session:
            instances = session.scalars(select(BeatInstance).order_by(BeatInstance.started_at))
            unclaimed = session.scalar(
                select(func.count())
                .select_from(PeriodicTask)
                .where(
                    *due,
                    or_(PeriodicTask.worker.is_(None), PeriodicTask.marked < lease_start),
                )
            )
            oldest = session.scalar(select(func.min(PeriodicTask.nextrun)).where(*due))
            return Status(
                instances=[Instance.of(row) for row in instances],
                due_unclaimed=unclaimed or 0,
                worst_lateness=None if oldest is None else (now - oldest).total_seconds(),
            )

    def history(self, name: str, limit: int = 20) -> builtins.list[Run]:
        """The schedule's runs, newest first."""
        limit = whole_number("limit", limit)
        with self.database.session() as session:
            schedule_id = self._row(session, name).id
            rows = session.scalars(
                select(TaskExecution)
                .where(TaskExecution.periodic_task_id == schedule_id)
                .order_by(TaskExecution.plan_time.desc(), TaskExecution.attempt.desc())
                .limit(limit)
            )
            return [Run.of(row) for row in rows]

    def forecast(self, name: str, count: int = 5, now: datetime | None = None) -> Forecast:
        """The next ``count`` runs beat will send for the schedule, as it will send them.

        The same rules beat applies (see :func:`bridge.decisions.forecast`):
        start and end bounds, remaining runs, jitter (each run's window and
        its exact time), an owed retry or held occurrence, and what beat will
        catch up of occurrences already overdue. ``end`` says why no more
        follow: the schedule is paused, broken or finishes, waits for an open
        run to end, or has a fixed delay, whose later runs depend on when
        each run completes.
        """
        count = whole_number("count", count, high=MAX_FORECAST)
        with self.database.session() as session:
            row = self._row(session, name)
            if not row.enabled:
                return Forecast([], _disabled_note(row.note, row.broken))
            state = state_of(row)
            nextrun = row.nextrun
        if nextrun is None:
            waiting = NOTE_RUNNING_RUN if state.fixed_delay else NOTE_OPEN_RUN
            return Forecast([], waiting)
        return forecast(state, nextrun, now or utcnow(), count)

    def next_runs(
        self, name: str, count: int = 5, now: datetime | None = None
    ) -> builtins.list[datetime]:
        """When beat will send the schedule's next ``count`` runs (see :meth:`forecast`)."""
        return [run.fire_at for run in self.forecast(name, count, now).runs]

    # -- helpers -------------------------------------------------------------------

    def _row(self, session: Session, name: str) -> PeriodicTask:
        row = session.scalar(select(PeriodicTask).where(PeriodicTask.name == name))
        if row is None:
            raise ScheduleNotFound(name)
        return row

    def _runs(self, run_ids: Collection[str]) -> builtins.list[Run]:
        with self.database.session() as session:
            return [Run.of(session.get_one(TaskExecution, run_id)) for run_id in run_ids]

    def _sender(self) -> Celery:
        """The app to send with, its broker's library known to be there before anything
        is written."""
        if self.app is None:
            raise ValidationError("app", None, "a Celery app to send the run with")
        check_broker(self.app)
        return self.app

    def _make_way(
        self, app: Celery, schedule: Schedule, overlap: Overlap, command: str, reason: str
    ) -> None:
        """Apply a manual run's overlap to the schedule's open runs: refuse, revoke or ignore."""
        if overlap is Overlap.ALLOW:
            return
        store = Store(self.database)
        open_runs = store.open_runs(schedule.id)
        if not open_runs:
            return
        if overlap is Overlap.SKIP:
            blocking = open_runs[0]
            raise RunSkipped(command, schedule.name, blocking.id, blocking.status)
        run_ids = [run.id for run in open_runs]
        # Recorded first, so the record says why rather than "terminated".
        store.finish_runs(run_ids, RunStatus.REVOKED, utcnow(), reason)
        broker.revoke(app, run_ids)

    def _send(
        self,
        app: Celery,
        schedule: Schedule,
        payload: Payload,
        run_id: str,
        plan_time: datetime,
        trigger: Trigger,
        command: str,
    ) -> None:
        """Publish a recorded run and mark it ``SENT``.

        A broker error marks the record ``FAILURE`` instead, so that it does
        not stay ``PENDING`` and block the schedule's overlap check, and
        raises :class:`~bridge.errors.SendFailed`.
        """
        store = Store(self.database)
        # A run sent by hand carries no expiry of the policy, only its options'.
        expires = expires_at(payload, utcnow(), None)
        try:
            broker.publish(
                app,
                payload,
                run_id=run_id,
                schedule_id=schedule.id,
                schedule_name=schedule.name,
                plan_time=plan_time,
                trigger=trigger,
                expires=expires,
            )
        except Exception as exc:
            reason = f"could not send: {type(exc).__name__}: {exc}".splitlines()[0]
            store.finish_runs([run_id], RunStatus.FAILURE, utcnow(), reason)
            raise SendFailed(schedule.name, reason, command) from exc
        store.mark_sent([Sent(schedule.id, run_id, expires)], utcnow())

    def _default_timezone(self) -> str:
        return (self.app.conf.timezone if self.app is not None else None) or "UTC"

    def _known_tasks(self) -> Collection[str] | None:
        if self.app is None:
            return None
        self.app.loader.import_default_modules()
        return set(self.app.tasks.keys())


def _disabled_note(note: str | None, broken: bool) -> str:
    """Why a disabled schedule has no run to come: its own note, said as paused unless
    it finished or broke."""
    if broken or note in FINISHED_NOTES:
        return note or "broken"
    return f"paused: {note}" if note else "paused"


def _payload(schedule: Schedule) -> Payload:
    return Payload.decode(schedule.task, schedule.args, schedule.kwargs, schedule.options)


def _manual_overlap(value: str | None) -> Overlap:
    """The overlap of a manual run or a backfill; ``allow`` unless told otherwise."""
    if value is None:
        return Overlap.ALLOW
    mode = next((o for o in MANUAL_OVERLAPS if o.value == value), None)
    if mode is None:
        raise ValidationError("overlap", value, "allow, skip or replace for a manual run")
    return mode


def _occurrences(
    timer: Timer, first: datetime, last: datetime, limit: int, given_end: Any
) -> builtins.list[datetime]:
    """The timer's occurrences in [first, last]; more than ``limit`` is refused before
    any is written, after looking at no more than ``limit + 1`` of them."""
    earliest = first_at_or_after(timer, first)
    found = [] if earliest is None else list(islice(occurrences(timer, earliest, last), limit + 1))
    if len(found) > limit:
        raise ValidationError(
            "to",
            given_end,
            f"a range of at most {limit} occurrences (it has more; raise --limit to allow more)",
        )
    return found


def _with_queue(options: Mapping[str, Any] | str | None, queue: str | None) -> Any:
    """``options`` with ``queue`` set in it, when a queue is given."""
    if queue is None:
        return options
    if not queue.strip():
        raise ValidationError("queue", queue, "a queue name")
    decoded: dict[str, Any] = parse_json("options", options or {}, dict, "a JSON object")
    return {**decoded, "queue": queue}


def _instant(field: str, value: Any) -> datetime:
    """An aware datetime, or ISO-8601 text with a UTC offset, in UTC."""
    if not isinstance(value, str):
        return _aware(field, value)
    try:
        parsed: datetime | None = datetime.fromisoformat(value.strip())
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValidationError(
            field, value, "an ISO-8601 time with a UTC offset, such as '2026-12-01T09:00:00+01:00'"
        )
    return parsed.astimezone(UTC)


def _aware(field: str, value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError(field, value, "a datetime with a UTC offset")
    if value.tzinfo is None:
        raise ValidationError(field, value.isoformat(), "a time with a UTC offset")
    return value.astimezone(UTC)


__all__ = ["Backfill", "Bridge", "Instance", "Run", "Schedule", "Status"]
