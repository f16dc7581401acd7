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
import uuid
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from itertools import islice
from typing import Any, Unpack

from celery import Celery

from bridge import sending
from bridge.broker import check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import RunSkipped, SendFailed, ValidationError
from bridge.manage.views import Backfill, Instance, Run, Schedule, Status
from bridge.rules.decisions import (
    FINISHED_NOTES,
    Forecast,
    first_at_or_after,
    forecast,
    occurrences,
)
from bridge.rules.definition import (
    build_definition,
    check_name,
    require_occurrence,
    with_queue,
)
from bridge.rules.edits import FRESH_STATE, retimes
from bridge.rules.fire import state_of
from bridge.rules.kinds import Source, Trigger
from bridge.rules.policy import Overlap, Policies, PolicyFields
from bridge.rules.runs import Envelope, Payload, expires_at, new_run
from bridge.rules.timers import Timer, parse_timer
from bridge.rules.values import aware, required_instant, whole_number
from bridge.storage.database import Database, database_for
from bridge.storage.runs import Sent
from bridge.storage.schedules import ScheduleStore

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
        self.store = ScheduleStore(self.database)

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
        ``start=...``, ``max_failures=3``, ...; see :class:`~bridge.rules.policy.PolicyFields`);
        those left out take their defaults. The first run also respects
        ``start`` and ``end``: a combination with no occurrence to come is refused.
        """
        now = utcnow()
        check_name(name)
        anchor = aware("anchor", anchor) if anchor is not None else now
        if not isinstance(enabled, bool):
            raise ValidationError("enabled", enabled, "true or false")
        definition, timer_ = build_definition(
            task=task,
            timer=timer,
            timezone=timezone or self.default_timezone(),
            anchor=anchor,
            args=args,
            kwargs=kwargs,
            options=with_queue(options, queue),
            policies=policies,
            known_tasks=None if allow_unknown_task else self.known_tasks(),
        )
        first = require_occurrence(timer_, definition.policies, now, timer)
        row = self.store.insert(
            definition.new_row(
                name, anchor=anchor, first=first, enabled=enabled, source=Source.API, now=now
            )
        )
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
        with self.store.changing(name) as row:
            # A new timer starts from now (an interval's grid is anchored there).
            anchor = now if timer is not None and timer != row.timer else row.anchor
            definition, timer_ = build_definition(
                task=row.task if task is None else task,
                timer=row.timer if timer is None else timer,
                timezone=row.timezone if timezone is None else timezone,
                anchor=anchor,
                args=row.args if args is None else args,
                kwargs=row.kwargs if kwargs is None else kwargs,
                options=with_queue(row.options if options is None else options, queue),
                policies=policies,
                base=Policies.from_columns(row),
                known_tasks=None if allow_unknown_task or task is None else self.known_tasks(),
            )
            columns = definition.columns()
            retimed = retimes(row, columns)
            if not retimed and all(getattr(row, key) == value for key, value in columns.items()):
                return Schedule.of(row)
            if retimed:
                written = row.timer if timer is None else timer
                row.next_occurrence = row.nextrun = require_occurrence(
                    timer_, definition.policies, now, written
                )
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
        with self.store.changing(name) as row:
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
        with self.store.changing(name) as row:
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
            for key, value in FRESH_STATE.items():
                setattr(row, key, value)
            row.nextrun = row.next_occurrence
            row.enabled = True
            row.note = None
            row.updated_at = now
            return Schedule.of(row)

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        self.store.remove(name)

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
        self.store.record_manual_run(
            new_run(schedule.id, schedule.task, now, Trigger.MANUAL, now, run_id), now
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
        first, last = required_instant("from", start), required_instant("to", end)
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
            if not self.store.record_if_new(record):
                continue
            self._send(app, schedule, payload, record["id"], plan, Trigger.BACKFILL, "backfill")
            sent.append(record["id"])
        return Backfill(created=self._runs(sent), existing=len(plans) - len(sent))

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Schedule:
        return Schedule.of(self.store.get(name))

    def list(self) -> builtins.list[Schedule]:
        return [Schedule.of(row) for row in self.store.all()]

    def status(self, now: datetime | None = None) -> Status:
        """The live beat instances, the due rows nobody holds and the worst lateness."""
        now = now or utcnow()
        lease_start = now - timedelta(seconds=self.settings.lease_seconds)
        late = self.store.lateness(now, lease_start)
        return Status(
            instances=[Instance.of(row) for row in late.instances],
            due_unclaimed=late.due_unclaimed,
            worst_lateness=(
                None if late.oldest_due is None else (now - late.oldest_due).total_seconds()
            ),
        )

    def history(self, name: str, limit: int = 20) -> builtins.list[Run]:
        """The schedule's runs, newest first."""
        limit = whole_number("limit", limit)
        return [Run.of(row) for row in self.store.history(name, limit)]

    def forecast(self, name: str, count: int = 5, now: datetime | None = None) -> Forecast:
        """The next ``count`` runs beat will send for the schedule, as it will send them.

        The same rules beat applies (see :func:`bridge.rules.decisions.forecast`):
        start and end bounds, remaining runs, jitter (each run's window and
        its exact time), an owed retry or held occurrence, and what beat will
        catch up of occurrences already overdue. ``end`` says why no more
        follow: the schedule is paused, broken or finishes, waits for an open
        run to end, or has a fixed delay, whose later runs depend on when
        each run completes.
        """
        count = whole_number("count", count, high=MAX_FORECAST)
        row = self.store.get(name)
        if not row.enabled:
            return Forecast([], _disabled_note(row.note, row.broken))
        state = state_of(row)
        if row.nextrun is None:
            waiting = NOTE_RUNNING_RUN if state.fixed_delay else NOTE_OPEN_RUN
            return Forecast([], waiting)
        return forecast(state, row.nextrun, now or utcnow(), count)

    def next_runs(
        self, name: str, count: int = 5, now: datetime | None = None
    ) -> builtins.list[datetime]:
        """When beat will send the schedule's next ``count`` runs (see :meth:`forecast`)."""
        return [run.fire_at for run in self.forecast(name, count, now).runs]

    # -- the app's defaults ----------------------------------------------------------

    def default_timezone(self) -> str:
        """The zone of a schedule that names none: the app's ``timezone``, else UTC."""
        return (self.app.conf.timezone if self.app is not None else None) or "UTC"

    def known_tasks(self) -> Collection[str] | None:
        """The app's registered task names (None without an app: any name is taken)."""
        if self.app is None:
            return None
        self.app.loader.import_default_modules()
        return set(self.app.tasks.keys())

    # -- helpers -------------------------------------------------------------------

    def _runs(self, run_ids: Collection[str]) -> builtins.list[Run]:
        return [Run.of(row) for row in self.store.runs(run_ids)]

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
        open_runs = self.store.open_runs(schedule.id)
        if not open_runs:
            return
        if overlap is Overlap.SKIP:
            blocking = open_runs[0]
            raise RunSkipped(command, schedule.name, blocking.id, blocking.status)
        sending.revoke(app, self.store, [run.id for run in open_runs], reason)

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

        A message that cannot be sent, whatever the reason, marks the record
        ``FAILURE`` instead, so that it does not stay ``PENDING`` and block
        the schedule's overlap check, and raises :class:`~bridge.errors.SendFailed`.
        """
        # A run sent by hand carries no expiry of the policy, only its options'.
        expires = expires_at(payload, utcnow(), None)
        try:
            sending.publish_or_fail(
                app,
                self.store,
                payload,
                Envelope(run_id, schedule.id, schedule.name, plan_time, trigger, expires),
            )
        except sending.NotSent as exc:
            raise SendFailed(schedule.name, exc.reason, command) from exc
        self.store.mark_sent([Sent(schedule.id, run_id, expires)], utcnow())


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


__all__ = ["Backfill", "Bridge", "Instance", "Run", "Schedule", "Status"]
