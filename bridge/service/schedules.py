"""Schedules created, changed, paused, resumed, silenced and removed by operators.

Each change checks every value through the rules before it writes, so that a
refused change writes nothing; writes through :class:`~bridge.service.edits.Edits`,
with its audit entry in the same transaction; and reads the schedule back,
judged, outside that transaction (judging its health reads its runs, which
SQLite lets no other connection read meanwhile). The app's facts a change
needs (its registered tasks, its time zone) come from the caller, which has
the app: this layer does not import Celery.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.clock import utcnow
from bridge.errors import StateConflict, ValidationError
from bridge.rules.decisions import FINISHED_NOTES
from bridge.rules.definition import (
    build_definition,
    check_label,
    check_labels,
    check_name,
    check_note,
    require_occurrence,
    with_queue,
)
from bridge.rules.edits import FRESH_STATE, retimes
from bridge.rules.kinds import Source
from bridge.rules.policy import Policies, PolicyFields, duration
from bridge.rules.timers import parse_timer
from bridge.rules.values import aware, flag, lookup_text
from bridge.service.calendars import Calendars
from bridge.service.edits import Edits
from bridge.service.readings import Readings
from bridge.service.views import Schedule
from bridge.storage.audit import Change
from bridge.storage.database import Database

#: Where :meth:`Schedules.resume` restarts a schedule.
RESUME_FROM = ("now", "catchup")
#: ``silenced_until`` of a schedule silenced until someone unsilences it.
SILENCED_FOREVER = datetime(9999, 1, 1, tzinfo=UTC)
#: What an edit's ``signature`` says to send the task alone again.
CLEARED = "none"

#: The app's registered task names, asked only when a change names a task (reading them
#: imports the app's modules); None: any name is taken.
KnownTasks = Callable[[], Collection[str] | None]


class Schedules:
    """Operators' changes of schedules, checked, against one database; each returns the
    schedule as it became, judged by ``readings``."""

    def __init__(self, database: Database, readings: Readings, calendars: Calendars) -> None:
        self.edits = Edits(database)
        self.readings = readings
        self.calendars = calendars

    def add(
        self,
        name: str,
        *,
        task: str | None,
        timer: str,
        signature: Any,
        args: Any,
        kwargs: Any,
        timezone: str | None,
        queue: str | None,
        options: Mapping[str, Any] | str | None,
        enabled: bool,
        anchor: datetime | None,
        allow_unknown_task: bool,
        labels: Sequence[str] | str,
        policies: PolicyFields,
        known_tasks: KnownTasks,
        default_timezone: Callable[[], str],
        actor: str,
    ) -> Schedule:
        """Create a schedule (see :meth:`bridge.manage.api.Bridge.add`)."""
        now = utcnow()
        check_name(name)
        anchor = aware("anchor", anchor) if anchor is not None else now
        flag("enabled", enabled)
        flag("allow_unknown_task", allow_unknown_task)
        checked_labels = check_labels(labels)
        definition, timer_ = build_definition(
            task=task,
            timer=timer,
            timezone=default_timezone() if timezone is None else timezone,
            anchor=anchor,
            args=args,
            kwargs=kwargs,
            options=with_queue(options, queue),
            policies=policies,
            known_tasks=None if allow_unknown_task else known_tasks(),
            known_calendars=self._calendar_names(policies),
            signature=signature,
        )
        first = require_occurrence(timer_, definition.policies, now, timer)
        row = self.edits.insert(
            definition.new_row(
                name, anchor=anchor, first=first, enabled=enabled, source=Source.API, now=now
            ),
            checked_labels,
            Change(actor, "create"),
        )
        return self.readings.judged([row], now)[0]

    def edit(
        self,
        name: str,
        *,
        task: str | None,
        timer: str | None,
        signature: Any,
        args: Any,
        kwargs: Any,
        timezone: str | None,
        queue: str | None,
        options: Mapping[str, Any] | str | None,
        allow_unknown_task: bool,
        labels: Sequence[str] | str | None,
        policies: PolicyFields,
        known_tasks: KnownTasks,
        actor: str,
    ) -> Schedule:
        """Change the fields given (see :meth:`bridge.manage.api.Bridge.edit`)."""
        now = utcnow()
        lookup_text("name", name)
        flag("allow_unknown_task", allow_unknown_task)
        wanted_labels = None if labels is None else check_labels(labels)
        # Read before the change's transaction, which SQLite lets no other connection read.
        known_calendars = self._calendar_names(policies)
        with self.edits.changing(name, Change(actor, "edit"), now) as editing:
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
                else known_tasks(),
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
        return self.readings.get(name)

    def pause(self, name: str, note: str | None, actor: str) -> Schedule:
        """Stop firing the schedule (see :meth:`bridge.manage.api.Bridge.pause`)."""
        lookup_text("name", name)
        note = check_note(note)
        now = utcnow()
        with self.edits.changing(name, Change(actor, "pause", note), now) as editing:
            row = editing.row
            if not row.enabled and (note is None or note == row.note):
                shown = f"paused: {row.note}" if row.note else "paused"
                raise StateConflict(
                    "name", name, f"a schedule that is not paused already (it is {shown})"
                )
            row.enabled = False
            row.note = note
            row.updated_at = now
        return self.readings.get(name)

    def resume(self, name: str, from_: str, actor: str) -> Schedule:
        """Fire the schedule again (see :meth:`bridge.manage.api.Bridge.resume`)."""
        _check_resume_from(from_)
        now = utcnow()
        lookup_text("name", name)
        change = Change(actor, "resume", f"from {from_}")
        with self.edits.changing(name, change, now) as editing:
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
        return self.readings.get(name)

    def pause_label(self, label: str, note: str | None, actor: str) -> list[Schedule]:
        """Pause every enabled schedule carrying ``label``, each as :meth:`pause` does; the
        schedules paused."""
        note = check_note(note)
        paused = []
        for name in self.readings.store.names_with_label(check_label(label)):
            if not self.readings.get(name).enabled:
                continue  # paused already, broken or finished: left as it is
            try:
                paused.append(self.pause(name, note, actor))
            except StateConflict:
                continue  # paused meanwhile by someone else
        return paused

    def resume_label(self, label: str, from_: str, actor: str) -> list[Schedule]:
        """Resume every paused or broken schedule carrying ``label``, each as :meth:`resume`
        does, a finished one left as it is; the schedules resumed."""
        _check_resume_from(from_)
        resumed = []
        for name in self.readings.store.names_with_label(check_label(label)):
            schedule = self.readings.get(name)
            if (schedule.enabled and not schedule.broken) or schedule.note in FINISHED_NOTES:
                continue
            try:
                resumed.append(self.resume(name, from_, actor))
            except StateConflict:
                continue  # resumed meanwhile by someone else
        return resumed

    def remove(self, name: str, actor: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        self.edits.remove(lookup_text("name", name), Change(actor, "delete"), utcnow())

    def silence(self, name: str, for_: str | float | timedelta | None, actor: str) -> Schedule:
        """Send no alert about the schedule for ``for_``, or until :meth:`unsilence` when
        None."""
        now = utcnow()
        until = SILENCED_FOREVER if for_ is None else now + duration("for", for_)
        note = "until unsilenced" if for_ is None else f"until {until.isoformat()}"
        lookup_text("name", name)
        with self.edits.changing(name, Change(actor, "silence", note), now) as editing:
            editing.row.silenced_until = until
        return self.readings.get(name)

    def unsilence(self, name: str, actor: str) -> Schedule:
        """Send the schedule's alerts again."""
        change = Change(actor, "unsilence")
        with self.edits.changing(lookup_text("name", name), change, utcnow()) as editing:
            editing.row.silenced_until = None
        return self.readings.get(name)

    def _calendar_names(self, policies: Mapping[str, Any]) -> Collection[str] | None:
        """The calendars a schedule's ``skip_calendars`` may name, read when it names some."""
        return self.calendars.names() if policies.get("skip_calendars") else None


def _check_resume_from(from_: str) -> None:
    """Refuse a restart point other than those of :data:`RESUME_FROM`."""
    if from_ not in RESUME_FROM:
        raise ValidationError("from", from_, " or ".join(RESUME_FROM))


def _edited_task(stored: str, task: str | None, signature: Any, cleared: bool) -> str | None:
    """The task an edit names: the one given; else none when a new canvas names it, or the
    stored one (a canvas's first task, which a canvas given or kept names again)."""
    if task is not None:
        return task
    return stored if cleared or signature is None else None
