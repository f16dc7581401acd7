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
import getpass
import secrets
import socket
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Unpack

from celery import Celery

from bridge.broker import Publisher, check_broker, queue_lengths
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import IncidentNotFound, RunSkipped, SendFailed, StateConflict, ValidationError
from bridge.rules import paging
from bridge.rules.calendars import (
    Calendar,
    CalendarKind,
    calendars_named,
    excluded_by,
    names_of,
    names_text,
)
from bridge.rules.canvas import stored_canvas
from bridge.rules.decisions import (
    FINISHED_NOTES,
    Forecast,
    Way,
    displaced,
    endable,
    first_at_or_after,
    forecast,
    manual_overlap,
    occurrences,
    overlap_way,
)
from bridge.rules.definition import (
    build_definition,
    check_label,
    check_labels,
    check_name,
    check_note,
    check_timer,
    check_timezone,
    require_occurrence,
    stored_timezone,
    with_queue,
)
from bridge.rules.edits import FRESH_STATE, retimes
from bridge.rules.fire import state_of
from bridge.rules.health import State, health_of, states_counted, watched
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus, Source, Trigger
from bridge.rules.policy import Overlap, Policies, PolicyFields, ReplaceWith, duration
from bridge.rules.retention import Limits, to_look_at
from bridge.rules.runs import Envelope, Payload, expires_at, new_run, run_id_for
from bridge.rules.stats import spread, success_rate
from bridge.rules.timers import Timer, load_zone, parse_timer
from bridge.rules.tokens import (
    TOKEN_PREFIX,
    Role,
    check_role,
    check_token_name,
    digest,
    expiry,
    may_be_named_token,
    session_end,
)
from bridge.rules.values import (
    aware,
    column_of,
    flag,
    instant,
    lookup_text,
    required_instant,
    seconds,
    whole_number,
)
from bridge.rules.words import timer_words
from bridge.service import sending
from bridge.service.calendars import Calendars
from bridge.service.calendars import read as read_calendar
from bridge.service.edits import Edits
from bridge.service.incidents import Acknowledgements
from bridge.service.tokens import Tokens
from bridge.service.views import (
    AuditRecord,
    Backfill,
    CalendarInfo,
    Gap,
    IncidentRecord,
    Instance,
    LabelRate,
    Page,
    Preview,
    Run,
    Schedule,
    SchedulerHealth,
    Stats,
    Status,
    Timeline,
    TimerGroup,
    Token,
    Worker,
    upcoming_json,
)
from bridge.storage.audit import AuditStore, Change
from bridge.storage.database import (
    Database,
    DatabaseError,
    database_for,
    error_reason,
    is_conflict,
    shown_url,
)
from bridge.storage.health import HealthStore
from bridge.storage.history import PAGE_KEY, HistoryStore, RunFilter
from bridge.storage.incidents import IncidentStore
from bridge.storage.overview import ENDED_COLUMNS, Overview, OverviewStore
from bridge.storage.retention import Pruned, Retention
from bridge.storage.runs import RunsSeen, Sent
from bridge.storage.schedules import SORTS, ScheduleFilter, ScheduleStore
from bridge.storage.tokens import TokenStore
from bridge.version import __version__

#: The most runs :meth:`Bridge.forecast` (``bridge next``) looks ahead.
MAX_FORECAST = 1000
#: Why a fixed-delay schedule whose run is under way has no next run yet.
NOTE_RUNNING_RUN = "after the running run completes"
#: Why a schedule whose owed work waits for an open run has no next run yet.
NOTE_OPEN_RUN = "when its open run ends"
#: Where :meth:`Bridge.resume` restarts a schedule.
RESUME_FROM = ("now", "catchup")
#: The statuses of a run that :meth:`Bridge.retry` sends again.
RETRIABLE = (RunStatus.FAILURE, RunStatus.LOST, RunStatus.REVOKED)
#: The latest runs of a window whose durations and start delays :meth:`Bridge.stats` reads.
STATS_SAMPLE = 10_000
#: The rows of a page when none is asked for.
PAGE_DEFAULT = 100
#: The states a list of schedules can be narrowed to (``ls --state``, the dashboard's
#: filter), and the filter of :meth:`Bridge.schedules` each one means.
STATE_FILTERS: dict[str, dict[str, bool]] = {
    "enabled": {"enabled": True},
    "paused": {"paused": True},
    "finished": {"finished": True},
    "broken": {"broken": True},
    "late": {"late": True},
    "failing": {"failing": True},
}
#: The timers (with their zones) :meth:`Bridge.timeline` draws at most: those most schedules
#: share. Schedules under others are counted as left out.
TIMELINE_GROUPS = 200
#: The fires :meth:`Bridge.timeline` works out at most, across its timers: a day of a
#: timer firing every second is 86,400. Timers beyond are left out.
TIMELINE_FIRES = 200_000
#: The labels :meth:`Bridge.label_rates` gives at most, by name.
LABELS_RATED = 200
#: Schedules :meth:`Bridge.prune` reads at a time.
PRUNE_SLICE = 500
#: ``silenced_until`` of a schedule silenced until someone unsilences it.
SILENCED_FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


def default_actor(surface: str = "python") -> str:
    """Who changes schedules from this process, for the audit log: ``surface:user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "unknown"
    return f"{surface}:{user}@{socket.gethostname()}"


class Bridge:
    """Management of schedules, against the database the app's settings name."""

    def __init__(
        self,
        app: Celery | None = None,
        *,
        database_url: str | None = None,
        settings: Settings | None = None,
        actor: str | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or Settings.from_app(app)
        self.database: Database = database_for(database_url or self.settings.database_url)
        self.store = ScheduleStore(self.database)
        self.edits = Edits(self.database)
        self.history_store = HistoryStore(self.database)
        self.audit_store = AuditStore(self.database)
        self.overview_store = OverviewStore(self.database)
        self.incident_store = IncidentStore(self.database)
        self.health_store = HealthStore(self.database)
        self.retention = Retention(self.database)
        self.token_store = TokenStore(self.database)
        self.token_changes = Tokens(self.database)
        self.acknowledgements = Acknowledgements(self.database)
        self.calendar_book = Calendars(self.database)
        self.calendar_store = self.calendar_book.store
        #: Who the audit log says made the changes of this object: ``cli:alice@host``, ...
        self.actor = actor or default_actor()

    def acting_as(self, actor: str) -> Bridge:
        """This bridge, with its changes logged as made by ``actor`` (a request's caller)."""
        other = object.__new__(Bridge)
        other.__dict__.update(self.__dict__, actor=actor)
        return other

    def _change(self, action: str, note: str | None = None) -> Change:
        return Change(self.actor, action, note)

    # -- schema -------------------------------------------------------------

    def migrate(self) -> tuple[str | None, str | None]:
        """Create or upgrade the bridge's tables; safe to repeat and to run concurrently.
        Returns the schema revision before (None: no tables) and after."""
        return self.database.migrate()

    def check_schema(self) -> None:
        """Refuse (:class:`~bridge.storage.database.SchemaMismatch`, one line naming both
        revisions and what to run) when the store's schema is not one this release may
        run against: behind it, ahead of it, or missing."""
        self.database.require_schema(__version__)

    # -- changes --------------------------------------------------------------

    def add(
        self,
        name: str,
        *,
        task: str | None = None,
        timer: str,
        signature: Any = None,
        args: Any = (),
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        enabled: bool = True,
        anchor: datetime | None = None,
        allow_unknown_task: bool = False,
        labels: Sequence[str] | str = (),
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Create a schedule; its first run is the timer's first occurrence after now.

        ``policies`` are the scheduling policies (``overlap="allow"``,
        ``start=...``, ``max_failures=3``, ...; see :class:`~bridge.rules.policy.PolicyFields`);
        those left out take their defaults. The first run also respects
        ``start`` and ``end``: a combination with no occurrence to come is refused.

        ``signature`` sends a Celery canvas instead of ``task``: a signature with its
        options, a chain, a group or a chord (``chain(a.s(), b.s())``, or its JSON
        form), every task of which is checked as ``task`` is. One run covers it all.
        """
        now = utcnow()
        check_name(name)
        anchor = aware("anchor", anchor) if anchor is not None else now
        flag("enabled", enabled)
        flag("allow_unknown_task", allow_unknown_task)
        checked_labels = check_labels(labels)
        definition, timer_ = build_definition(
            task=task,
            timer=timer,
            timezone=self.default_timezone() if timezone is None else timezone,
            anchor=anchor,
            args=args,
            kwargs=kwargs,
            options=with_queue(options, queue),
            policies=policies,
            known_tasks=None if allow_unknown_task else self.known_tasks(),
            known_calendars=self._calendar_names(policies),
            signature=signature,
        )
        first = require_occurrence(timer_, definition.policies, now, timer)
        row = self.edits.insert(
            definition.new_row(
                name, anchor=anchor, first=first, enabled=enabled, source=Source.API, now=now
            ),
            checked_labels,
            self._change("create"),
        )
        return self._judged([row], now)[0]

    def edit(
        self,
        name: str,
        *,
        task: str | None = None,
        timer: str | None = None,
        signature: Any = None,
        args: Any = None,
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        allow_unknown_task: bool = False,
        labels: Sequence[str] | str | None = None,
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Change the fields given; a field left out or given as None keeps its value.

        ``signature="none"`` makes a schedule that sends a canvas send its ``task``
        (given with it) alone again.

        A new timer, time zone, start or end moves the next run to the first
        occurrence after now that the new values allow; any other change
        leaves it. ``"none"`` clears an optional policy (``end="none"``). Values
        equal to the stored ones (or none given) write nothing: ``updated_at``
        stays as it was. ``labels`` replace the schedule's labels.
        """
        now = utcnow()
        lookup_text("name", name)
        flag("allow_unknown_task", allow_unknown_task)
        wanted_labels = None if labels is None else check_labels(labels)
        # Read before the change's transaction, which SQLite lets no other connection read.
        known_calendars = self._calendar_names(policies)
        with self.edits.changing(name, self._change("edit"), now) as editing:
            row = editing.row
            # A new timer starts from now (an interval's grid is anchored there).
            anchor = now if timer is not None and timer != row.timer else row.anchor
            canvas = row.signature if signature is None else signature
            cleared = canvas == CLEARED
            definition, timer_ = build_definition(
                task=_edited_task(row.task, task, signature, cleared),
                timer=row.timer if timer is None else timer,
                timezone=row.timezone if timezone is None else timezone,
                anchor=anchor,
                args=row.args if args is None else args,
                kwargs=row.kwargs if kwargs is None else kwargs,
                options=with_queue(row.options if options is None else options, queue),
                policies=policies,
                base=Policies.from_columns(row),
                known_tasks=None
                if allow_unknown_task or (task is None and signature is None)
                else self.known_tasks(),
                known_calendars=known_calendars,
                signature=None if cleared else canvas,
            )
            columns = definition.columns()
            retimed = retimes(row, columns)
            relabelled = wanted_labels is not None and wanted_labels != editing.labels
            unchanged = all(getattr(row, key) == value for key, value in columns.items())
            if retimed or relabelled or not unchanged:
                if wanted_labels is not None:
                    editing.labels = wanted_labels
                if retimed:
                    written = row.timer if timer is None else timer
                    row.next_occurrence = row.nextrun = require_occurrence(
                        timer_, definition.policies, now, written
                    )
                    row.anchor = anchor
                for key, value in columns.items():
                    setattr(row, key, value)
                row.updated_at = now
        # Read again outside the change's transaction: judging the health reads the runs.
        return self.get(name)

    def pause(self, name: str, note: str | None = None) -> Schedule:
        """Stop firing the schedule until it is resumed; ``note`` says why.

        A schedule that is not enabled (paused, broken or finished) takes a
        new note; without one, or with the note it has, pausing it again is
        refused and writes nothing.
        """
        lookup_text("name", name)
        note = check_note(note)
        now = utcnow()
        with self.edits.changing(name, self._change("pause", note), now) as editing:
            row = editing.row
            if not row.enabled and (note is None or note == row.note):
                shown = f"paused: {row.note}" if row.note else "paused"
                raise StateConflict(
                    "name", name, f"a schedule that is not paused already (it is {shown})"
                )
            row.enabled = False
            row.note = note
            row.updated_at = now
        return self.get(name)

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
        lookup_text("name", name)
        with self.edits.changing(name, self._change("resume", f"from {from_}"), now) as editing:
            row = editing.row
            if row.enabled and not row.broken:
                raise StateConflict(
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
        return self.get(name)

    def pause_label(self, label: str, note: str | None = None) -> builtins.list[Schedule]:
        """Pause every enabled schedule carrying ``label``; the schedules paused.

        Each is paused as :meth:`pause` pauses it, with its own audit entry;
        those paused already are left as they are.
        """
        note = check_note(note)
        paused = []
        for name in self.store.names_with_label(check_label(label)):
            if not self.get(name).enabled:
                continue  # paused already, broken or finished: left as it is
            try:
                paused.append(self.pause(name, note))
            except StateConflict:
                continue  # paused meanwhile by someone else
        return paused

    def resume_label(self, label: str, from_: str = "now") -> builtins.list[Schedule]:
        """Resume every paused or broken schedule carrying ``label``; the schedules resumed.

        A finished schedule (no occurrence left) is left as it is.
        """
        if from_ not in RESUME_FROM:
            raise ValidationError("from", from_, " or ".join(RESUME_FROM))
        resumed = []
        for name in self.store.names_with_label(check_label(label)):
            schedule = self.get(name)
            if (schedule.enabled and not schedule.broken) or schedule.note in FINISHED_NOTES:
                continue
            try:
                resumed.append(self.resume(name, from_))
            except StateConflict:
                continue  # resumed meanwhile by someone else
        return resumed

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        self.edits.remove(lookup_text("name", name), self._change("delete"), utcnow())

    def run(self, name: str, overlap: str | None = None) -> Run:
        """Send a run now (``trigger=manual``), whatever the timer says.

        ``overlap`` says what to do while a run of the schedule is open:
        ``allow`` (default) sends anyway, ``skip`` refuses with
        :class:`~bridge.errors.RunSkipped`, ``replace`` revokes the open runs
        first. The schedule's next run, remaining runs and breaker are not
        changed: they count scheduled occurrences only.
        """
        app = self._sender()
        mode = manual_overlap(overlap)
        schedule = self.get(name)
        payload = _payload(schedule)
        run_id = str(uuid.uuid4())
        self._make_way(app, schedule, mode, "run", f"replaced by manual run {run_id}")
        now = utcnow()
        self.store.record_manual_run(
            new_run(
                schedule.id, schedule.task, now, Trigger.MANUAL, now, run_id, ends=payload.ends
            ),
            now,
            self._change("run", None if overlap is None else f"overlap {mode.value}"),
            schedule.name,
        )
        self._send(app, schedule, payload, run_id, now, Trigger.MANUAL, "run")
        return self.run_info(run_id)

    def cancel(self, run_id: str, *, terminate: bool = False, note: str | None = None) -> Run:
        """End an open run ``REVOKED`` and revoke its message on every worker.

        A run not yet started is discarded by the worker that receives it.
        One already executing is ended there with SIGTERM when ``terminate``
        (the prefork pool only); otherwise it carries on, and what it reports
        is not recorded: the run is final. ``note`` goes into the record's
        reason and the audit log. A run that has ended is refused.
        """
        flag("terminate", terminate)
        note = check_note(note)
        app = self._sender()
        run = self.run_info(run_id)
        if RunStatus(run.status) not in NON_FINAL_STATUSES:
            raise StateConflict("run", run_id, f"a run that has not ended (it is {run.status})")
        reason = f"cancelled by {self.actor}" + (f": {note}" if note else "")
        if not sending.revoke(app, self.store, [run_id], reason, terminate):
            ended = self.run_info(run_id)
            raise StateConflict("run", run_id, f"a run that has not ended (it is {ended.status})")
        if run.schedule is not None:
            action = "cancel" + (" (terminate)" if terminate else "")
            change = self._change(action, note)
            self.store.note_action(run.schedule_id, run.schedule, change, utcnow(), run=run_id)
        return self.run_info(run_id)

    def retry(self, run_id: str) -> Run:
        """Send a run that ended FAILURE, LOST or REVOKED again, as the next attempt of its
        occurrence (``trigger=manual``), with the schedule's current definition.

        Only the latest attempt of an occurrence can be retried, so a retry
        asked twice sends once. Like :meth:`run`, it leaves the schedule's
        cursor, counters and breaker alone.
        """
        app = self._sender()
        run = self.run_info(run_id)
        if run.schedule is None or run.plan_time is None:
            raise ValidationError("run", run_id, "a run of a schedule")
        if RunStatus(run.status) not in RETRIABLE:
            expected = ", ".join(status.value for status in RETRIABLE)
            raise StateConflict("run", run_id, f"a run that ended {expected} (it is {run.status})")
        schedule = self.get(run.schedule)
        attempt = run.attempt + 1
        retry_id = run_id_for(schedule.id, run.plan_time, attempt)
        now = utcnow()
        payload = _payload(schedule)
        record = new_run(
            schedule.id,
            schedule.task,
            run.plan_time,
            Trigger.MANUAL,
            now,
            retry_id,
            attempt,
            payload.ends,
        )
        if not self.store.record_if_new(record):
            raise StateConflict(
                "run", run_id, f"the latest attempt of its occurrence (run {retry_id} followed it)"
            )
        change = self._change("retry")
        self.store.note_action(schedule.id, schedule.name, change, now, run=retry_id, of=run_id)
        self._send(app, schedule, payload, retry_id, run.plan_time, Trigger.MANUAL, "retry")
        return self.run_info(retry_id)

    def retriable(self, runs: Sequence[Run]) -> set[str]:
        """The ids of those of ``runs`` that :meth:`retry` would send again: ended FAILURE,
        LOST or REVOKED, and still the latest attempt of their occurrence (a page that
        lists an attempt a retry replaced offers no retry of it, which would be refused)."""
        ended: dict[int, list[tuple[datetime, Run]]] = {}
        for run in runs:
            if RunStatus(run.status) not in RETRIABLE:
                continue
            if run.schedule_id is not None and run.plan_time is not None:
                ended.setdefault(run.schedule_id, []).append((run.plan_time, run))
        found: set[str] = set()
        for schedule_id, plans in ended.items():
            latest = self.history_store.latest_attempts(schedule_id, [plan for plan, _ in plans])
            found.update(run.id for plan, run in plans if latest.get(plan) == run.attempt)
        return found

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
        repeating a backfill is safe. Nor is an occurrence at or before the
        schedule's ``pruned_through``, whose record retention may have
        deleted. ``end`` may not be later than now; later occurrences are
        beat's to send. A range of more than ``limit``
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
        mode = manual_overlap(overlap)
        schedule = self.get(name)
        timer_ = parse_timer(schedule.timer, schedule.timezone, schedule.anchor)
        if schedule.fixed_delay:
            raise ValidationError(
                "timer",
                schedule.timer,
                "a timer with fixed occurrences (a fixed-delay timer has none to backfill)",
            )
        plans = _occurrences(timer_, first, last, limit, end)
        calendars = self._calendars_of(schedule.skip_calendars)
        on_calendars = {plan for plan in plans if excluded_by(calendars, plan) is not None}
        plans = [plan for plan in plans if plan not in on_calendars]
        payload = _payload(schedule)
        self._make_way(app, schedule, mode, "backfill", "replaced by a backfill")
        sent: builtins.list[str] = []
        pruned = self.store.get(name).pruned_through
        for plan in plans:
            if pruned is not None and plan <= pruned:
                continue  # its record may have been pruned: it cannot be told from a new one
            record = new_run(
                schedule.id, schedule.task, plan, Trigger.BACKFILL, utcnow(), ends=payload.ends
            )
            if not self.store.record_if_new(record):
                continue
            self._send(app, schedule, payload, record["id"], plan, Trigger.BACKFILL, "backfill")
            sent.append(record["id"])
        if sent:
            range_ = {"from": first.isoformat(), "to": last.isoformat(), "runs": len(sent)}
            change = self._change("backfill")
            self.store.note_action(schedule.id, schedule.name, change, utcnow(), **range_)
        return Backfill(
            created=self._runs(sent), existing=len(plans) - len(sent), excluded=len(on_calendars)
        )

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Schedule:
        """The schedule called ``name``, with its health."""
        return self._judged([self.store.get(lookup_text("name", name))])[0]

    def named(self, names: Collection[str]) -> builtins.list[Schedule]:
        """The schedules called ``names`` that exist, by name, each with its health judged:
        one read for them all, for a page of them that another listing chose."""
        if not names:
            return []
        return self._judged(self.store.named(names))

    def list(self) -> builtins.list[Schedule]:
        """Every schedule, by name, with its health."""
        return self._judged(self.store.all())

    def _judged(self, rows: Sequence[Any], now: datetime | None = None) -> builtins.list[Schedule]:
        """Views of ``rows`` (table rows), each with its health judged from its open runs at
        ``now``."""
        now = now or utcnow()
        seen = self.health_store.runs_seen([row.id for row in rows], now)
        return self._views(rows, seen, now)

    def _views(self, rows: Sequence[Any], seen: RunsSeen, now: datetime) -> builtins.list[Schedule]:
        """Views of ``rows`` (table rows or mappings of their columns), each with its health
        judged from ``seen`` at ``now``."""
        return [Schedule.of(row, self.health_of(row, seen, now)) for row in rows]

    def health_of(self, row: Any, seen: RunsSeen, now: datetime) -> State:
        """The health of the schedule ``row`` (columns or a mapping) from ``seen``, its own
        limits falling back on the app's."""
        row_id = column_of(row, "id")
        subject = watched(
            row,
            seen.runs.get(row_id, ()),
            self.settings.default_grace,
            self.settings.default_max_runtime,
            seen.last_started.get(row_id),
        )
        return health_of(subject, now)

    def schedules(
        self,
        *,
        prefix: str | None = None,
        task: str | None = None,
        enabled: bool | None = None,
        paused: bool | None = None,
        broken: bool | None = None,
        failing: bool | None = None,
        label: str | None = None,
        late: bool | None = None,
        finished: bool | None = None,
        sort: str = "name",
        cursor: str | None = None,
        limit: int = PAGE_DEFAULT,
        now: datetime | None = None,
    ) -> Page[Schedule]:
        """One page of schedules, filtered, by name or by next run, and the next page's cursor.

        ``prefix`` keeps the names starting with it; ``late`` the enabled
        schedules due for longer than ``bridge_default_grace``; ``failing``
        the enabled ones whose latest occurrence failed; ``paused`` those
        someone paused, ``finished`` those beat disabled with nothing left to
        fire. ``sort="next"`` lists the enabled schedules that have a next
        run, soonest first. ``cursor`` is the ``next`` of the page before.
        """
        if sort not in SORTS:
            raise ValidationError("sort", sort, " or ".join(SORTS))
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        now = now or utcnow()
        kinds: tuple[type, ...] = (datetime, int) if sort == "next" else (str,)
        after = None if cursor is None else paging.decode(cursor, kinds)
        flags = (
            ("enabled", enabled),
            ("paused", paused),
            ("finished", finished),
            ("broken", broken),
            ("failing", failing),
        )
        for field, value in flags:
            if value is not None:
                flag(field, value)
        where = ScheduleFilter(
            prefix=None if prefix is None else lookup_text("prefix", prefix),
            task=None if task is None else lookup_text("task", task),
            enabled=enabled,
            paused=paused,
            finished=finished,
            broken=broken,
            failing=failing,
            label=None if label is None else check_label(label),
            late_at=now if late else None,
            default_grace=self.settings.default_grace,
        )
        if late is False:
            raise ValidationError("late", late, "true, or left out")
        found = self.store.page(where, sort, after, limit + 1, now)
        items = self._views(found.rows[:limit], found.seen, now)
        key: Callable[[Any], tuple[Any, ...]] = (
            (lambda row: (row["nextrun"], row["id"]))
            if sort == "next"
            else (lambda row: (row["name"],))
        )
        return Page(items, paging.following(found.rows, limit, key))

    @property
    def grace(self) -> timedelta:
        """How long a schedule may be due before it counts as late."""
        return timedelta(seconds=self.settings.default_grace)

    def runs(
        self,
        name: str | None = None,
        *,
        status: str | Sequence[str] | None = None,
        trigger: str | Sequence[str] | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        cursor: str | None = None,
        limit: int = PAGE_DEFAULT,
    ) -> Page[Run]:
        """One page of runs, newest occurrence first and its latest attempt first: of the
        schedule ``name``, or of every schedule; filtered by status, trigger and a range
        of plan times (``since`` included, ``until`` not). ``cursor`` is the ``next`` of
        the page before."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        after = None if cursor is None else paging.decode(cursor, PAGE_KEY)
        where = RunFilter(
            schedule_id=None if name is None else self.store.id_of(lookup_text("name", name)),
            statuses=_choices("status", status, [s.value for s in RunStatus]),
            triggers=_choices("trigger", trigger, [t.value for t in Trigger]),
            since=None if since is None else instant("since", since, optional=True),
            until=None if until is None else instant("until", until, optional=True),
        )
        found = [
            Run.of(run, name) for run, name in self.history_store.page(where, after, limit + 1)
        ]
        return Page(
            found[:limit],
            paging.following(found, limit, lambda r: (r.plan_time, r.attempt, r.id)),
        )

    def run_info(self, run_id: str) -> Run:
        """One run, with its error and traceback; :class:`~bridge.errors.RunNotFound` if none."""
        if not isinstance(run_id, str):
            raise ValidationError("run", run_id, "a run id")
        run, schedule = self.history_store.get(lookup_text("run", run_id))
        return Run.of(run, schedule)

    def stats(
        self, name: str, window: str | float | timedelta = "1d", now: datetime | None = None
    ) -> Stats:
        """The schedule over the last ``window`` (``'1h'``, ``'7d'``, seconds): runs by status,
        success rate, occurrences skipped and missed, alerts, and the durations and start
        delays (p50, p95, max) of its latest runs.

        The counts come from the schedule's hourly tallies, which pruning does not
        touch: they cover whole hours, from the hour ``window`` ago falls in. The
        durations and delays come from the runs still recorded in the window.
        """
        span = duration("window", window)
        until = now or utcnow()
        schedule = self.get(name)
        found = self.history_store.window(schedule.id, until - span, until, STATS_SAMPLE)
        ended = (RunStatus.SUCCESS, RunStatus.FAILURE, RunStatus.REVOKED, RunStatus.LOST)
        tallied = {status.value: int(found.tallied[status.value.lower()]) for status in ended}
        counts = {status: count for status, count in {**tallied, **found.open}.items() if count}
        return Stats(
            schedule=schedule.name,
            window=span.total_seconds(),
            since=until - span,
            until=until,
            counts=counts,
            success_rate=success_rate(counts),
            duration=spread(found.runtimes),
            start_delay=spread(found.start_delays),
            skipped=int(found.tallied["skipped"]),
            missed=int(found.tallied["missed"]),
            alerts=int(found.tallied["alerts"]),
            totals={
                RunStatus.SUCCESS.value: schedule.success_count,
                RunStatus.FAILURE.value: schedule.failure_count,
                RunStatus.REVOKED.value: schedule.revoked_count,
                RunStatus.LOST.value: schedule.lost_count,
                "skipped": schedule.skipped_count,
                "missed": schedule.missed_count,
                "excluded": schedule.excluded_count,
                "expired": schedule.expired_count,
                "alerts": schedule.alert_count,
            },
        )

    def status(self, now: datetime | None = None) -> Status:
        """The beat instances and workers, the due rows nobody holds and the worst lateness."""
        now = now or utcnow()
        lease_start = now - timedelta(seconds=self.settings.lease_seconds)
        late = self.store.lateness(now, lease_start)
        return Status(
            instances=[Instance.of(row) for row in late.instances],
            workers=[Worker.of(row) for row in late.workers],
            due_unclaimed=late.due_unclaimed,
            worst_lateness=(
                None if late.oldest_due is None else (now - late.oldest_due).total_seconds()
            ),
            now=now,
            beat_timeout=self.settings.lease_seconds,
        )

    def health(
        self, beat_timeout: float | None = None, now: datetime | None = None
    ) -> SchedulerHealth:
        """Whether a beat ticked within ``beat_timeout`` seconds (default: the lease, past
        which its rows are taken over anyway) and the schema is one this release runs
        against."""
        schema = self.database.schema()
        problem = schema.refusal(__version__, shown_url(self.database.url))
        if problem is not None:
            # The tables may not be there to read the instances from.
            empty = Status([], [], 0, None, now or utcnow(), self.settings.lease_seconds)
            return SchedulerHealth(schema.revision, schema.head, empty, problem)
        status = self.status(now)
        if beat_timeout is not None:
            status = replace(status, beat_timeout=seconds("beat_timeout", beat_timeout))
        return SchedulerHealth(schema.revision, schema.head, status)

    # -- incidents, silence, retention ---------------------------------------------------

    def incidents(
        self, *, open_only: bool = False, cursor: str | None = None, limit: int = PAGE_DEFAULT
    ) -> Page[IncidentRecord]:
        """Incidents, newest first (``open_only``: those not closed)."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        before = None if cursor is None else paging.decode(cursor, (int,))[0]
        found = [
            IncidentRecord.of(i) for i in self.incident_store.page(open_only, before, limit + 1)
        ]
        return Page(found[:limit], paging.following(found, limit, lambda i: (i.id,)))

    def acknowledge(self, incident_id: int) -> IncidentRecord:
        """Acknowledge an incident: its alert is not repeated (its recovery still goes). The
        audit log records it (``acknowledge``, naming the incident and its kind) in the
        incident's schedule's trail; acknowledging it again changes and logs nothing."""
        number = whole_number("incident", incident_id)
        incident = self.acknowledgements.acknowledge(number, self._change("acknowledge"), utcnow())
        if incident is None:
            raise IncidentNotFound(number)
        return IncidentRecord.of(incident)

    # -- named tokens and dashboard sessions (the HTTP server's) ----------------------------

    def create_token(self, name: str, role: str, expires: str | None = None) -> tuple[Token, str]:
        """Make a named token of ``role`` (``read`` or ``admin``) that works until
        ``expires`` (a duration such as ``90d``; None: until revoked). Returns it and its
        secret, which the store does not keep: this is the one time it can be shown. The
        audit log records it (``create token``), naming the token and its role."""
        now = utcnow()
        check_token_name(name)
        checked_role = check_role(role)
        until = expiry(expires, now)
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = self.token_changes.create(
            name, checked_role.value, digest(secret), now, self._change("create token"), until
        )
        return Token.of(row), secret

    def tokens(self) -> builtins.list[Token]:
        """Every named token, revoked and expired ones too, by name."""
        return [Token.of(row) for row in self.token_store.every()]

    def revoke_token(self, name: str) -> Token:
        """Stop the token ``name`` working, and end the dashboard sessions it began. The
        audit log records it (``revoke token``) unless the token was revoked already."""
        change = self._change("revoke token")
        row = self.token_changes.revoke(lookup_text("name", name), utcnow(), change)
        if row is None:
            raise ValidationError("name", name, "the name of a token (see bridge token ls)")
        return Token.of(row)

    def token_holder(self, secret: str) -> Token | None:
        """The named token whose secret is ``secret``, while it works (not revoked, not
        expired); None otherwise."""
        if not may_be_named_token(secret):
            return None
        row = self.token_store.holder(digest(secret), utcnow())
        return None if row is None else Token.of(row)

    def begin_session(self, role: Role, token: Token | None, lifetime: timedelta) -> str:
        """Record a dashboard session of ``role``, begun with the named ``token`` (None: a
        settings token), for ``lifetime`` or until the token expires. Returns the session's
        secret, for the browser's cookie; the store keeps its digest."""
        now = utcnow()
        secret = secrets.token_urlsafe(32)
        end = session_end(now, lifetime, None if token is None else token.expires_at)
        token_id = None if token is None else token.id
        self.token_store.begin_session(digest(secret), token_id, role.value, now, end)
        return secret

    def session(self, secret: str) -> tuple[Role, Token | None] | None:
        """The role of the dashboard session ``secret`` and its named token (None: a settings
        token's session), while the session and its token last; None once either ended."""
        found = self.token_store.session_of(digest(secret), utcnow())
        if found is None:
            return None
        session, token = found
        return Role(session.role), None if token is None else Token.of(token)

    def end_session(self, secret: str) -> None:
        """End a dashboard session (sign-out): its cookie no longer signs anyone in."""
        self.token_store.end_session(digest(secret))

    def silence(self, name: str, for_: str | float | timedelta | None = None) -> Schedule:
        """Send no alert about the schedule for ``for_`` (a duration), or until
        :meth:`unsilence` when None. Its incidents are still recorded."""
        now = utcnow()
        until = SILENCED_FOREVER if for_ is None else now + duration("for", for_)
        note = "until unsilenced" if for_ is None else f"until {until.isoformat()}"
        lookup_text("name", name)
        with self.edits.changing(name, self._change("silence", note), now) as editing:
            editing.row.silenced_until = until
        return self.get(name)

    def unsilence(self, name: str) -> Schedule:
        """Send the schedule's alerts again."""
        change = self._change("unsilence")
        with self.edits.changing(lookup_text("name", name), change, utcnow()) as editing:
            editing.row.silenced_until = None
        return self.get(name)

    def prune(self, dry_run: bool = False) -> Pruned:
        """Prune every schedule's old final runs now, as beat's watchdog does over time
        (see :mod:`bridge.storage.retention`): every schedule's final runs are counted,
        a slice at a time, and those that hold runs to delete are pruned to their limits;
        with ``dry_run``, what would go is counted only."""
        limits = Limits(self.settings.history_keep_runs, self.settings.history_keep_days)
        now = utcnow()
        schedules = runs = 0
        after = 0
        while True:
            counted = self.retention.count_slice(after, PRUNE_SLICE, limits, now)
            schedules += counted.schedules
            for flagged in to_look_at(counted.counted):
                runs += self.retention.prune_schedule(flagged, now, dry_run, thorough=True)
            if counted.last_id is None:
                return Pruned(schedules, runs)
            after = counted.last_id

    def health_counts(self, now: datetime | None = None) -> dict[str, int]:
        """How many schedules are in each health state (see
        :meth:`bridge.storage.health.HealthStore.counts` and
        :func:`bridge.rules.health.states_counted`)."""
        found = self.health_store.counts(now or utcnow(), self.settings.default_grace)
        return states_counted(found)

    def recent_statuses(
        self, schedule_ids: Sequence[int], count: int = 20
    ) -> dict[int, builtins.list[tuple[datetime, str]]]:
        """The plan times and statuses of each schedule's latest ``count`` runs, oldest first."""
        return self.history_store.recent_statuses(schedule_ids, count)

    def gaps(self, name: str, since: datetime, limit: int = 100) -> builtins.list[Gap]:
        """The hours since ``since`` in which the schedule skipped or missed occurrences, with
        how many of each, newest first (at most ``limit``): what a run's history does not
        show, from the hourly tallies."""
        schedule_id = self.store.id_of(lookup_text("name", name))
        found = self.history_store.gaps(schedule_id, since, whole_number("limit", limit, low=1))
        return [Gap(hour, skipped, missed) for hour, skipped, missed in found]

    def timeline(
        self, span: timedelta = timedelta(hours=24), now: datetime | None = None
    ) -> Timeline:
        """When the enabled schedules fire over the next ``span``, gathered by timer and zone.

        Schedules that share a timer, a zone and the calendars they skip fire
        together: each group is given with how many schedules it holds and its
        timer's occurrences from the soonest next run among them, less those on
        its calendars (an interval's phase is that schedule's; start and end
        bounds, jitter and open runs of each schedule are not applied). The
        :data:`TIMELINE_GROUPS` largest groups are given, until
        :data:`TIMELINE_FIRES` occurrences are worked out: the timer that spends
        the last of them is cut short (``more``), those after it are left out.
        """
        since = now or utcnow()
        until = since + span
        groups: builtins.list[TimerGroup] = []
        left_out, budget = 0, TIMELINE_FIRES
        rows = self.store.timer_groups(until, TIMELINE_GROUPS + 1)
        book = self.calendar_book.book_for(row.skip_calendars for row in rows)
        for row in rows:
            # A calendar gone or unreadable is left out of a picture rather than refused.
            calendars = [book[name] for name in names_of(row.skip_calendars) if name in book]
            zone = stored_timezone(row.timezone)
            try:
                timer = check_timer(row.timer, zone, row.soonest)
            except ValidationError:
                timer = None
            if timer is None or len(groups) == TIMELINE_GROUPS or budget <= 0:
                left_out += row.schedules
                continue
            fires: builtins.list[datetime] = []
            looked = 0
            at: datetime | None = row.soonest
            if row.soonest < since:  # overdue: beat fires it now, its timer on from there
                fires.append(since)
                at = timer.next_after(since)
            while at is not None and at < until and looked < budget:
                looked += 1
                if excluded_by(calendars, at) is None:
                    fires.append(at)
                at = None if timer.fixed_delay else timer.next_after(at)
            budget -= max(looked, len(fires))
            more = at is not None and at < until
            groups.append(
                TimerGroup(
                    row.timer, zone, timer_words(timer), row.schedules, row.first_name, fires, more
                )
            )
        return Timeline(since, until, groups, left_out)

    def label_rates(
        self, window: str | float | timedelta = "7d", now: datetime | None = None
    ) -> builtins.list[LabelRate]:
        """Each label's runs that ended over the last ``window`` (the hourly tallies of its
        schedules, from the hour ``window`` ago falls in), by status, with their success
        rate; by label, the first :data:`LABELS_RATED` with any run."""
        span = duration("window", window)
        found = self.history_store.label_tallies((now or utcnow()) - span, LABELS_RATED)
        rates = []
        for label, tallied in found:
            counts = {status.upper(): count for status, count in tallied.items() if count}
            rates.append(LabelRate(label, counts, success_rate(counts)))
        return rates

    def overview(self, now: datetime | None = None) -> Overview:
        """What the metrics show: the first ``bridge_metrics_max_schedules`` schedules by
        name with their counters, and the totals of every schedule."""
        now = now or utcnow()
        return self.overview_store.read(self.settings.metrics_max_schedules, now - self.grace, now)

    def audit(
        self, name: str | None = None, *, cursor: str | None = None, limit: int = PAGE_DEFAULT
    ) -> Page[AuditRecord]:
        """The audit log, newest first: every change to the schedule ``name`` (deleted or
        not), or to every schedule."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        before = None if cursor is None else paging.decode(cursor, (int,))[0]
        if name is not None:
            lookup_text("name", name)
        found = [AuditRecord.of(entry) for entry in self.audit_store.trail(name, before, limit + 1)]
        return Page(found[:limit], paging.following(found, limit, lambda e: (e.id,)))

    def history(self, name: str, limit: int = 20) -> builtins.list[Run]:
        """The schedule's runs, newest first."""
        return self.runs(name, limit=whole_number("limit", limit, high=paging.PAGE_MAX)).items

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
        row = self.store.get(lookup_text("name", name))
        if not row.enabled:
            return Forecast([], _disabled_note(row.note, row.broken))
        state = state_of(row, self.calendar_book.book_for([row.skip_calendars]))
        if row.nextrun is None:
            waiting = NOTE_RUNNING_RUN if state.fixed_delay else NOTE_OPEN_RUN
            return Forecast([], waiting)
        return forecast(state, row.nextrun, now or utcnow(), count)

    def preview(
        self, timer: str, timezone: str | None = None, count: int = 5, now: datetime | None = None
    ) -> Preview:
        """The first ``count`` occurrences after now of a timer not saved yet, read in
        ``timezone`` (the app's when None or empty), with the zone read in: what the
        dashboard's form shows while they are typed. Refused as :meth:`add` refuses them
        (``timer``, ``timezone``). An interval counts from now; a fixed delay's later runs
        depend on when each ends, so only its first is given."""
        now = now or utcnow()
        count = whole_number("count", count, low=1, high=MAX_FORECAST)
        zone = check_timezone(timezone or self.default_timezone())
        timer_ = check_timer(timer, zone, now)
        found: builtins.list[datetime] = []
        at = timer_.next_after(now)  # as add's first occurrence: strictly after now
        while at is not None and len(found) < count:
            found.append(at)
            at = None if timer_.fixed_delay else timer_.next_after(at)
        return Preview(zone, found)

    def next_runs(
        self, name: str, count: int = 5, now: datetime | None = None
    ) -> builtins.list[datetime]:
        """When beat will send the schedule's next ``count`` runs (see :meth:`forecast`)."""
        return [run.fire_at for run in self.forecast(name, count, now).runs]

    # -- calendars ------------------------------------------------------------------------

    def add_calendar(
        self,
        name: str,
        *,
        dates: Sequence[str] | str | None = None,
        ranges: Sequence[str] | str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        replace: bool = False,
    ) -> CalendarInfo:
        """Make the calendar ``name`` of exactly one of ``dates`` (``YYYY-MM-DD``, whole
        days), ``ranges`` (``START/END``, dates or local times) or ``cron`` (the minutes a
        cron expression matches), read in ``timezone`` (the app's when None); with
        ``replace``, over the calendar of that name, whose schedules skip the new days
        from their next occurrence. See :mod:`bridge.rules.calendars`."""
        flag("replace", replace)
        calendar = self.build_calendar(
            name, dates=dates, ranges=ranges, cron=cron, timezone=timezone
        )
        self.save_calendar(calendar, replace)
        return self.calendar(calendar.name)

    def build_calendar(
        self,
        name: Any,
        *,
        dates: Any = None,
        ranges: Any = None,
        cron: Any = None,
        timezone: Any = None,
    ) -> Calendar:
        """The calendar :meth:`add_calendar` would make, checked; nothing is written."""
        given = [
            (kind, value)
            for kind, value in (
                (CalendarKind.DATES, dates),
                (CalendarKind.RANGES, ranges),
                (CalendarKind.CRON, cron),
            )
            if value is not None
        ]
        if len(given) != 1:
            names = [kind.value for kind, _ in given]
            raise ValidationError(
                names[-1] if names else "dates",
                " and ".join(names) or None,
                "exactly one of dates, ranges or cron",
            )
        ((kind, entries),) = given
        zone = check_timezone(self.default_timezone() if timezone is None else timezone)
        return Calendar.build(name, kind, entries, load_zone(zone))

    def save_calendar(self, calendar: Calendar, replace: bool) -> None:
        """Write a calendar :meth:`build_calendar` checked (over the one of its name with
        ``replace``), audited."""
        self.calendar_book.save(calendar, replace, utcnow(), self._change("save calendar"))

    def calendars(self) -> builtins.list[CalendarInfo]:
        """Every calendar, by name, with the schedules that skip it; one changed with SQL
        into something unreadable is left out (``calendar`` names the problem, ``remove``
        removes it)."""
        users = self.calendar_book.users()
        found = []
        for row in self.calendar_store.every():
            try:
                found.append(self._calendar_info(row, users.get(row.name, [])))
            except ValidationError:
                continue
        return found

    def calendar(self, name: str) -> CalendarInfo:
        """The calendar ``name``; :class:`~bridge.errors.CalendarNotFound` if none."""
        row = self.calendar_store.get(lookup_text("name", name))
        return self._calendar_info(row, self.calendar_book.users().get(row.name, []))

    def remove_calendar(self, name: str) -> None:
        """Delete the calendar ``name``; refused (:class:`~bridge.errors.CalendarInUse`)
        while a schedule skips it."""
        change = self._change("remove calendar")
        self.calendar_book.remove(lookup_text("name", name), utcnow(), change)

    def _calendar_info(self, row: Any, schedules: Sequence[str]) -> CalendarInfo:
        return CalendarInfo(read_calendar(row), row.created_at, row.updated_at, tuple(schedules))

    def _calendars_of(self, names: Sequence[str]) -> tuple[Calendar, ...]:
        """The calendars ``names`` (a schedule's ``skip_calendars``), read; refused naming
        ``skip_calendars`` for one that is gone."""
        return calendars_named(names, self.calendar_book.book_for([names_text(tuple(names))]))

    def calendar_names(self) -> set[str]:
        """The names of every calendar: what a schedule's ``skip_calendars`` may list."""
        return self.calendar_store.names()

    def _calendar_names(self, policies: Mapping[str, Any]) -> Collection[str] | None:
        """The calendars a schedule's ``skip_calendars`` may name, read when it names some."""
        return self.calendar_names() if policies.get("skip_calendars") else None

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

    def queues(self) -> builtins.list[str]:
        """The queues the schedules send to: the app's configured queues (its default
        among them) and those the schedules' options name. A read of every schedule's
        options that mention a queue: callers that ask often keep the answer a while."""
        configured = set(self.app.amqp.queues) if self.app is not None else set()
        in_canvases = set()
        for text in self.store.canvases_naming_a_queue():
            try:
                in_canvases |= stored_canvas(text).queues
            except ValidationError:
                continue  # written by hand: the schedule's page says what is wrong with it
        return sorted(configured | self.store.queues_named() | in_canvases)

    def queue_lengths(self, queues: Collection[str] | None = None) -> dict[str, int | None]:
        """Messages waiting in each of ``queues`` (:meth:`queues` when None), by queue;
        None where the broker does not answer (see :func:`bridge.broker.queue_lengths`).
        Empty without an app."""
        if self.app is None:
            return {}
        return queue_lengths(self.app, sorted(self.queues() if queues is None else queues))

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
        open_runs = self.store.open_runs(schedule.id)
        way = overlap_way(overlap, open_runs)
        if way is Way.SKIP:
            blocking = open_runs[0]
            raise RunSkipped(command, schedule.name, blocking.id, blocking.status)
        if way is Way.REPLACE:
            replace_with = Policies.from_columns(schedule).replace_with
            ending = displaced(open_runs, replace_with)
            terminate = replace_with is ReplaceWith.TERMINATE
            sending.revoke(app, self.store, ending, reason, terminate, endable(terminate))

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
                Publisher(app),
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


def _choices(
    field: str, given: str | Sequence[str] | None, allowed: Sequence[str]
) -> tuple[str, ...]:
    """A filter's values (one, a list, or a comma-separated text), each one of ``allowed``."""
    if given is None:
        return ()
    values = given.split(",") if isinstance(given, str) else list(given)
    for value in values:
        if value not in allowed:
            raise ValidationError(field, value, f"one of {', '.join(allowed)}")
    return tuple(values)


def _payload(schedule: Schedule) -> Payload:
    return Payload.decode(
        schedule.task, schedule.args, schedule.kwargs, schedule.options, schedule.signature
    )


#: What an edit's ``signature`` says to send the task alone again.
CLEARED = "none"


def _edited_task(stored: str, task: str | None, signature: Any, cleared: bool) -> str | None:
    """The task an edit names: the one given; else none when a new canvas names it, or the
    stored one (a canvas's first task, which a canvas given or kept names again)."""
    if task is not None:
        return task
    return stored if cleared or signature is None else None


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


#: The API, and what the front ends (the CLI, the web server) need of the storage besides
#: the views: its errors and a metrics scrape's values. They take those from here and
#: import nothing of ``bridge.storage`` (a contract in pyproject.toml).
__all__ = [
    "ENDED_COLUMNS",
    "AuditRecord",
    "Backfill",
    "Bridge",
    "CalendarInfo",
    "DatabaseError",
    "Gap",
    "Instance",
    "LabelRate",
    "Overview",
    "Page",
    "Preview",
    "Run",
    "RunsSeen",
    "Schedule",
    "Stats",
    "Status",
    "Timeline",
    "TimerGroup",
    "Token",
    "Worker",
    "error_reason",
    "is_conflict",
    "upcoming_json",
]
