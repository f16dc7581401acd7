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
from datetime import UTC, datetime
from typing import Any, Self

from celery import Celery
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import dispatch
from .config import Settings
from .database import Database, database_for
from .errors import DuplicateSchedule, ScheduleNotFound, SendFailed, ValidationError
from .models import PeriodicTask, RunStatus, Source, TaskExecution, Trigger, utcnow
from .policy import Overlap
from .spec import build_definition, check_name, parse_json
from .store import Store
from .timers import Timer, parse_timer, upcoming


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
    overlap: str
    enabled: bool
    nextrun: datetime | None
    anchor: datetime
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
    worker: str | None
    marked: datetime | None


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
    started_at: datetime | None
    finished_at: datetime | None
    runtime: float | None
    worker: str | None
    result: str | None
    error: str | None
    traceback: str | None


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
        overlap: str = Overlap.SKIP.value,
        enabled: bool = True,
        anchor: datetime | None = None,
        allow_unknown_task: bool = False,
    ) -> Schedule:
        """Create a schedule; its first run is the timer's first occurrence after now."""
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
            overlap=overlap,
            known_tasks=None if allow_unknown_task else self._known_tasks(),
        )
        nextrun = _next_occurrence(timer_, now, timer)
        row = PeriodicTask(
            **definition.new_row(
                name, anchor=anchor, nextrun=nextrun, enabled=enabled, source=Source.API, now=now
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
        overlap: str | None = None,
        allow_unknown_task: bool = False,
    ) -> Schedule:
        """Change some fields; a new timer or zone moves ``nextrun`` to its next occurrence."""
        now = utcnow()
        with self.database.session() as session:
            row = self._row(session, name)
            # A new timer starts from now (an interval's grid is anchored there).
            anchor = now if timer is not None and timer != row.timer else row.anchor
            merged_options = row.options if options is None else options
            definition, timer_ = build_definition(
                task=row.task if task is None else task,
                timer=row.timer if timer is None else timer,
                timezone=row.timezone if timezone is None else timezone,
                anchor=anchor,
                args=row.args if args is None else args,
                kwargs=row.kwargs if kwargs is None else kwargs,
                options=_with_queue(merged_options, queue),
                overlap=row.overlap if overlap is None else overlap,
                known_tasks=None if allow_unknown_task or task is None else self._known_tasks(),
            )
            if definition.timer != row.timer or definition.timezone != row.timezone:
                row.nextrun = _next_occurrence(timer_, now, timer)
                row.anchor = anchor
            for key, value in definition.columns().items():
                setattr(row, key, value)
            row.updated_at = now
            return Schedule.of(row)

    def pause(self, name: str, note: str | None = None) -> Schedule:
        """Stop firing the schedule until it is resumed; ``note`` says why."""
        with self.database.session() as session:
            row = self._row(session, name)
            row.enabled = False
            row.note = note
            row.updated_at = utcnow()
            return Schedule.of(row)

    def resume(self, name: str) -> Schedule:
        """Fire the schedule again from its next occurrence; clears the note and a broken flag."""
        now = utcnow()
        with self.database.session() as session:
            row = self._row(session, name)
            timer_ = parse_timer(row.timer, row.timezone, row.anchor)
            row.nextrun = _next_occurrence(timer_, now, row.timer)
            row.enabled = True
            row.note = None
            row.broken = False
            row.updated_at = now
            return Schedule.of(row)

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        with self.database.session() as session:
            self._row(session, name)
            session.execute(delete(PeriodicTask).where(PeriodicTask.name == name))

    def run(self, name: str) -> Run:
        """Send a run now (``trigger=manual``), whatever the timer says."""
        if self.app is None:
            raise ValidationError("app", None, "a Celery app to send the run with")
        now = utcnow()
        schedule = self.get(name)
        payload = dispatch.Payload.decode(
            schedule.task, schedule.args, schedule.kwargs, schedule.options
        )
        run_id = str(uuid.uuid4())
        with self.database.session() as session:
            session.add(
                TaskExecution(
                    **dispatch.new_run(schedule.id, schedule.task, now, Trigger.MANUAL, now, run_id)
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
        store = Store(self.database)
        try:
            dispatch.publish(
                self.app,
                payload,
                run_id=run_id,
                schedule_id=schedule.id,
                schedule_name=schedule.name,
                plan_time=now,
                trigger=Trigger.MANUAL,
            )
        except Exception as exc:
            # The record must not stay PENDING, blocking the schedule's overlap check.
            reason = f"could not send: {type(exc).__name__}: {exc}".splitlines()[0]
            store.finish_runs([run_id], RunStatus.FAILURE, utcnow(), reason)
            raise SendFailed(name, reason) from exc
        store.mark_sent(run_id, utcnow())
        with self.database.session() as session:
            return Run.of(session.get_one(TaskExecution, run_id))

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Schedule:
        with self.database.session() as session:
            return Schedule.of(self._row(session, name))

    def list(self) -> builtins.list[Schedule]:
        with self.database.session() as session:
            rows = session.scalars(select(PeriodicTask).order_by(PeriodicTask.name))
            return [Schedule.of(row) for row in rows]

    def history(self, name: str, limit: int = 20) -> builtins.list[Run]:
        """The schedule's runs, newest first."""
        if limit < 1:
            raise ValidationError("limit", limit, "a whole number of at least 1")
        with self.database.session() as session:
            schedule_id = self._row(session, name).id
            rows = session.scalars(
                select(TaskExecution)
                .where(TaskExecution.periodic_task_id == schedule_id)
                .order_by(TaskExecution.plan_time.desc(), TaskExecution.attempt.desc())
                .limit(limit)
            )
            return [Run.of(row) for row in rows]

    def next_runs(
        self, name: str, count: int = 5, now: datetime | None = None
    ) -> builtins.list[datetime]:
        """The next ``count`` fire times of the schedule's timer after ``now``."""
        if count < 1:
            raise ValidationError("count", count, "a whole number of at least 1")
        schedule = self.get(name)
        timer_ = parse_timer(schedule.timer, schedule.timezone, schedule.anchor)
        return upcoming(timer_, now or utcnow(), count)

    # -- helpers -------------------------------------------------------------------

    def _row(self, session: Session, name: str) -> PeriodicTask:
        row = session.scalar(select(PeriodicTask).where(PeriodicTask.name == name))
        if row is None:
            raise ScheduleNotFound(name)
        return row

    def _default_timezone(self) -> str:
        return (self.app.conf.timezone if self.app is not None else None) or "UTC"

    def _known_tasks(self) -> Collection[str] | None:
        if self.app is None:
            return None
        self.app.loader.import_default_modules()
        return set(self.app.tasks.keys())


def _next_occurrence(timer: Timer, now: datetime, given: Any) -> datetime:
    """The timer's next occurrence after now; a timer that has none is refused."""
    nextrun = timer.next_after(now)
    if nextrun is None:
        raise ValidationError("timer", given, "a timer with an occurrence in the future")
    return nextrun


def _with_queue(options: Mapping[str, Any] | str | None, queue: str | None) -> Any:
    """``options`` with ``queue`` set in it, when a queue is given."""
    if queue is None:
        return options
    if not queue.strip():
        raise ValidationError("queue", queue, "a queue name")
    decoded: dict[str, Any] = parse_json("options", options or {}, dict, "a JSON object")
    return {**decoded, "queue": queue}


def _aware(field: str, value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError(field, value, "a datetime with a UTC offset")
    if value.tzinfo is None:
        raise ValidationError(field, value.isoformat(), "a time with a UTC offset")
    return value.astimezone(UTC)


__all__ = ["Bridge", "Run", "Schedule"]
