"""Bulk import and export of schedules as JSON Lines: ``bridge import`` and ``bridge export``.

A line is one JSON object with the fields of ``bridge add``: ``name``,
``task`` (or a ``signature`` naming it) and ``timer`` (required), ``args``,
``kwargs``, ``timezone``, ``queue``, ``options``, ``enabled``, ``anchor``,
``labels`` and every policy keyword of :class:`~bridge.rules.policy.PolicyFields`.
A line is a complete definition, not a patch: a field left out takes the
default ``add`` gives it, so importing a file makes each schedule it names
exactly what its line says.

Import checks each line in Python, with no database connection, through the
same checks as :meth:`bridge.manage.api.Bridge.add`, then writes in batches: one
``SELECT`` of the batch's names, one multi-row ``INSERT`` of the new
schedules and one ``executemany`` ``UPDATE`` per kind of change, so that a
hundred thousand lines take seconds rather than a transaction each.

How an existing schedule is updated follows ``edit``, ``pause`` and ``resume``:

* a new timer, time zone, start, end or anchor moves the cursor to the first
  occurrence after now (a new interval timer counts from now unless the line
  gives an ``anchor``); other changes leave it;
* ``enabled: false`` on an enabled schedule pauses it; ``enabled: true`` (the
  default) on a paused, broken or finished one resumes it from now;
* ``remaining`` is a countdown beat moves, so, as in ``beat_schedule`` sync,
  it is not compared: the line's value is taken when the line creates the
  schedule or changes something else, and importing the same file twice
  leaves the countdown alone.

One difference from ``add``: a line with ``enabled: false`` may have no
occurrence to come (a one-shot in the past, an end that has passed). That is
how a finished schedule exports, and it imports as a paused schedule with no
next run, so that an export always imports again.

Every schedule created or changed gets its entry in the audit log, in the
batch's transaction, naming the importing user.

Export writes what recreates each schedule and nothing of its runtime state
(cursor, counters, notes, marks): the fields whose value differs from
``add``'s default, plus ``timezone`` always (the default depends on the app)
and ``anchor`` for interval timers (it fixes their phase). Names are in
code-point order on both databases. Exporting, importing the export into an
empty database and exporting again gives the same text; importing an export
into the database it came from reports every schedule unchanged.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, NamedTuple

from bridge.clock import utcnow
from bridge.errors import ValidationError
from bridge.manage.api import Bridge
from bridge.rules.audit import AUDITED_COLUMNS, difference, snapshot
from bridge.rules.calendars import Calendar
from bridge.rules.definition import (
    Definition,
    build_definition,
    check_labels,
    check_name,
    check_timer,
    next_in_bounds,
    require_occurrence,
    with_queue,
)
from bridge.rules.edits import FRESH_STATE, MOVING_COLUMNS, retimes
from bridge.rules.kinds import Source
from bridge.rules.policy import POLICY_COLUMNS, POLICY_NAMES, Policies
from bridge.rules.timers import Timer, format_duration
from bridge.rules.values import flag, json_or_text, required_instant
from bridge.storage import audit
from bridge.storage.bulk import Changes, RowValues, ScheduleImport, rows_by_name

#: The fields a line may have besides the policies, in the order export writes them.
#: ``queue`` is merged into ``options`` (as ``add --queue`` does), so export never writes it.
DEFINITION_FIELDS = (
    "name",
    "task",
    "timer",
    "timezone",
    "anchor",
    "signature",
    "args",
    "kwargs",
    "options",
    "queue",
    "enabled",
    "labels",
)
LINE_FIELDS = (*DEFINITION_FIELDS, *POLICY_NAMES)

#: Lines checked and written together: a few statements per batch.
BATCH_SIZE = 2000
#: How much of an unreadable line a refusal repeats.
SHOWN_CHARS = 80

#: One line of an import: text, or bytes as read from a file (decoded as UTF-8).
Line = str | bytes
#: The columns an import compares with its line: the definition (but the
#: countdown), the anchor and the enabled flag. Export reads these too, and an
#: import from another scheduler compares them with its entries.
COMPARED_COLUMNS = tuple(
    column
    for column in (
        *("task", "timer", "timezone", "args", "kwargs", "options", "signature"),
        *Policies().columns(),
        *("anchor", "enabled"),
    )
    if column not in MOVING_COLUMNS
)
#: What a new schedule has for the fields export leaves out when equal.
_DEFAULTS: dict[str, Any] = {"args": [], "kwargs": {}, "options": {}, "enabled": True}
#: The columns an import reads of an existing row: those it compares, and those the
#: audit log shows before and after.
READ_COLUMNS = tuple(dict.fromkeys((*COMPARED_COLUMNS, *AUDITED_COLUMNS)))


# -- one line ---------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """What checking a line needs besides its text; no database connection."""

    #: The instant the batch is imported at: new anchors, first occurrences, timestamps.
    now: datetime
    #: The zone of a line that names none (the app's ``timezone``, else UTC).
    default_timezone: str
    #: The app's registered task names, or None to accept any task name.
    known_tasks: Collection[str] | None
    #: The calendars a line's ``skip_calendars`` may name.
    known_calendars: Collection[str] = ()


@dataclass(frozen=True)
class Entry:
    """A valid line: the schedule's normalised definition, ready to compare and write."""

    line: int
    name: str
    definition: Definition
    enabled: bool
    #: The anchor the line gives, or None to keep the schedule's (or take now).
    anchor: datetime | None
    #: The timer as the line wrote it, repeated by a refusal.
    given_timer: Any
    #: The parsed timer, counting from ``anchor`` or, without one, from the import's now.
    timer: Timer
    #: The first occurrence after now for that timer (None: a disabled line with none to come).
    first: datetime | None
    labels: tuple[str, ...] = ()

    def occurrence(self, anchor: datetime, now: datetime) -> datetime | None:
        """The first occurrence after ``now`` with the timer counted from ``anchor``."""
        timer = self.timer
        if anchor != (self.anchor or now):
            timer = check_timer(self.definition.timer, self.definition.timezone, anchor)
        return _first_occurrence(
            timer, self.definition.policies, self.enabled, now, self.given_timer
        )

    def new_row(self, now: datetime) -> dict[str, Any]:
        """The ``periodic_task`` values ``add`` would write for this line (without labels)."""
        return self.definition.new_row(
            self.name,
            anchor=self.anchor or now,
            # A disabled line may have no occurrence to come: new_row then
            # leaves the cursor empty, as a finished schedule's is.
            first=self.first,  # type: ignore[arg-type]
            enabled=self.enabled,
            source=Source.API,
            now=now,
        )

    def changes(self, row: RowValues, now: datetime) -> dict[str, Any] | None:
        """The column values that bring ``row`` to this line, or None when it already matches.

        Raises :class:`ValidationError` when the new timing leaves an enabled
        schedule no occurrence to come, as ``edit`` and ``resume`` do.
        """
        columns = self.definition.columns()
        # edit's rule: a new timer starts from now, anything else keeps the grid.
        anchor = self.anchor or (now if columns["timer"] != row["timer"] else row["anchor"])
        wanted = {**columns, "anchor": anchor, "enabled": self.enabled}
        relabelled = tuple(row.get("labels", ())) != self.labels
        if all(row[key] == wanted[key] for key in COMPARED_COLUMNS) and not relabelled:
            return None
        changes: dict[str, Any] = {**columns, "updated_at": now}
        if relabelled:
            changes["labels"] = self.labels
        resumed = self.enabled and not row["enabled"]
        if resumed or retimes(row, wanted):
            first = self.occurrence(anchor, now)
            changes.update(anchor=anchor, next_occurrence=first, nextrun=first)
        if resumed:
            changes.update(FRESH_STATE, enabled=True, note=None)
        elif row["enabled"] and not self.enabled:
            changes.update(enabled=False, note=None)
        return changes


def parse_line(text: Line, line: int, rules: Rules) -> Entry:
    """Check one line as ``add`` checks its arguments; raises :class:`ValidationError`.

    Bytes are decoded by the JSON reader (UTF-8, with or without a byte order
    mark), so a line that is not valid UTF-8 is refused like any other bad line.
    """
    try:
        fields = json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError included; nested too deep
        fields = None
    if not isinstance(fields, dict):
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        if len(shown) > SHOWN_CHARS:
            shown = shown[:SHOWN_CHARS] + "..."
        raise ValidationError("json", shown, "a JSON object with a schedule's fields")
    unknown = sorted(set(fields) - set(LINE_FIELDS))
    if unknown:
        raise ValidationError("field", unknown[0], f"one of {', '.join(LINE_FIELDS)}")
    name = check_name(fields.get("name"))
    enabled = flag("enabled", fields.get("enabled", True))
    anchor = None if fields.get("anchor") is None else required_instant("anchor", fields["anchor"])
    definition, timer = build_definition(
        task=fields.get("task"),
        timer=fields.get("timer"),
        timezone=rules.default_timezone if fields.get("timezone") is None else fields["timezone"],
        anchor=anchor or rules.now,
        args=fields.get("args") or [],
        kwargs=fields.get("kwargs"),
        options=with_queue(fields.get("options"), fields.get("queue")),
        policies={key: fields[key] for key in POLICY_NAMES if key in fields},
        known_tasks=rules.known_tasks,
        known_calendars=rules.known_calendars,
        signature=fields.get("signature"),
    )
    labels = check_labels(fields.get("labels") or ())
    given_timer = fields.get("timer")
    first = _first_occurrence(timer, definition.policies, enabled, rules.now, given_timer)
    return Entry(line, name, definition, enabled, anchor, given_timer, timer, first, labels)


def _first_occurrence(
    timer: Timer, policies: Policies, enabled: bool, now: datetime, given_timer: Any
) -> datetime | None:
    """The first occurrence after ``now`` within the bounds.

    An enabled schedule must have one (refused with ``add``'s message
    otherwise); a disabled one may have none.
    """
    bounds = Policies(start=policies.start, end=policies.end)
    return _bounded_first_occurrence(timer, bounds, enabled, now, given_timer)


@functools.lru_cache(maxsize=4096)
def _bounded_first_occurrence(
    timer: Timer, bounds: Policies, enabled: bool, now: datetime, given_timer: Any
) -> datetime | None:
    """:func:`_first_occurrence`, remembered: the lines of a batch share one ``now``, and a
    file repeats a few timers and bounds, so most lines find the search already done."""
    if enabled:
        return require_occurrence(timer, bounds, now, given_timer)
    return next_in_bounds(timer, bounds, now)


# -- import ---------------------------------------------------------------------------


class Refusal(NamedTuple):
    """A line that was not imported, and why."""

    line: int
    reason: str


@dataclass
class ImportReport:
    """What an import did, or would have done when nothing was written."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    #: Whether the changes counted were committed (False for a dry run, or an
    #: all-or-nothing import that refused a line).
    written: bool = False
    #: Calendars the file made or changed (its calendar lines; unchanged ones not counted).
    calendars: int = 0

    def summary(self) -> str:
        counts = (
            f"created {self.created}, updated {self.updated}, "
            f"unchanged {self.unchanged}, refused {len(self.refusals)}"
        )
        return f"{counts}, calendars saved {self.calendars}" if self.calendars else counts


#: A line that holds a calendar names it under this key: ``bridge export`` writes one per
#: calendar, before the schedules, which may skip it.
CALENDAR_KEY = "calendar"
CALENDAR_FIELDS = (CALENDAR_KEY, "dates", "ranges", "cron", "timezone")


def calendar_fields(calendar: Calendar) -> dict[str, Any]:
    """The line that recreates ``calendar`` (the fields of ``bridge calendar add``)."""
    shown = calendar.to_json()
    kind = calendar.kind.value
    return {CALENDAR_KEY: calendar.name, kind: shown[kind], "timezone": shown["timezone"]}


@dataclass
class _CalendarLines:
    """The calendar lines of an import: each checked as ``calendar add --replace`` checks
    its arguments, its name known to the schedule lines after it, and written as read (or,
    all or nothing, once every line is checked and none refused, before the schedules are
    committed); an unchanged one is left."""

    bridge: Bridge
    #: The calendars stored before the import, by name.
    stored: dict[str, Calendar]
    #: The names a schedule line may skip: those stored and those the file made so far.
    known: set[str]
    write_now: bool
    held: list[Calendar] = field(default_factory=list)
    first_line: dict[str, int] = field(default_factory=dict)

    def take(self, fields: Mapping[str, Any], line: int, report: ImportReport) -> None:
        unknown = sorted(set(fields) - set(CALENDAR_FIELDS))
        if unknown:
            raise ValidationError(
                "field", unknown[0], f"one of {', '.join(CALENDAR_FIELDS)} (a calendar's line)"
            )
        calendar = self.bridge.build_calendar(
            fields[CALENDAR_KEY],
            dates=fields.get("dates"),
            ranges=fields.get("ranges"),
            cron=fields.get("cron"),
            timezone=fields.get("timezone"),
        )
        repeated = _repeated(self.first_line, CALENDAR_KEY, calendar.name, line)
        if repeated is not None:
            raise repeated
        self.known.add(calendar.name)
        if self.stored.get(calendar.name) == calendar:
            return
        report.calendars += 1
        if self.write_now:
            self.bridge.save_calendar(calendar, replace=True)
        else:
            self.held.append(calendar)

    def write_held(self) -> None:
        for calendar in self.held:
            self.bridge.save_calendar(calendar, replace=True)


@dataclass
class _Plan(Changes):
    """One batch's changes, and its counts until they are committed."""

    unchanged: int = 0
    refusals: list[Refusal] = field(default_factory=list)

    def count_into(self, report: ImportReport) -> None:
        report.created += len(self.creates)
        report.updated += len(self.updates)
        report.unchanged += self.unchanged
        report.refusals.extend(self.refusals)


def import_schedules(
    bridge: Bridge,
    lines: Iterable[Line],
    *,
    allow_unknown_task: bool = False,
    all_or_nothing: bool = False,
    dry_run: bool = False,
) -> ImportReport:
    """Create or update a schedule for each line of ``lines``; blank lines are skipped.

    A refused line does not stop the others. By default each batch of valid
    lines is committed as it is checked; ``all_or_nothing`` writes in one
    transaction that is rolled back if any line is refused (on SQLite that
    transaction holds the write lock, and so holds beat, for the whole
    import). ``dry_run`` reads the table to say what each line would do and
    writes nothing.
    """
    report = ImportReport()
    default_timezone = bridge.default_timezone()
    known_tasks = None if allow_unknown_task else bridge.known_tasks()
    stored = {info.name: info.calendar for info in bridge.calendars()}
    calendars = _CalendarLines(
        bridge, stored, set(bridge.calendar_names()), not (dry_run or all_or_nothing)
    )
    first_line: dict[str, int] = {}
    writer = ScheduleImport(bridge.database, READ_COLUMNS, all_or_nothing and not dry_run)
    with writer.begun():
        for batch in _batches(lines):
            now = utcnow()
            rules = Rules(now, default_timezone, known_tasks, calendars.known)
            entries = _check(batch, rules, report, calendars)
            entries = _first_of_each_name(entries, first_line, report)
            if entries:
                plan = functools.partial(_plan, entries, now, bridge.actor)
                names = [entry.name for entry in entries]
                changes = writer.batch(names, plan, write=not dry_run)
                assert isinstance(changes, _Plan)
                changes.count_into(report)
        if report.refusals:
            writer.undo()
        elif not dry_run:
            # All or nothing: the calendars go in before the schedules that may skip them
            # are committed, so that beat never meets a schedule naming one not there yet.
            calendars.write_held()
    report.refusals.sort()
    report.written = not dry_run and not (all_or_nothing and report.refusals)
    return report


def _batches(lines: Iterable[Line]) -> Iterator[list[tuple[int, Line]]]:
    numbered = ((number, text.strip()) for number, text in enumerate(lines, 1) if text.strip())
    while batch := list(islice(numbered, BATCH_SIZE)):
        yield batch


def _check(
    batch: Sequence[tuple[int, Line]],
    rules: Rules,
    report: ImportReport,
    calendars: _CalendarLines,
) -> list[Entry]:
    entries = []
    for number, text in batch:
        try:
            fields = _calendar_of(text)
            if fields is None:
                entries.append(parse_line(text, number, rules))
            else:
                calendars.take(fields, number, report)
        except ValidationError as exc:
            report.refusals.append(Refusal(number, str(exc)))
    return entries


def _calendar_of(text: Line) -> dict[str, Any] | None:
    """The fields of a calendar's line, or None for any other line (which :func:`parse_line`
    reads, and refuses if it is no JSON object). Only a line that says ``"calendar"`` is
    decoded here: the schedule lines are most of a file."""
    said = b'"calendar"' in text if isinstance(text, bytes) else '"calendar"' in text
    if not said:
        return None
    try:
        fields = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return fields if isinstance(fields, dict) and CALENDAR_KEY in fields else None


def _first_of_each_name(
    entries: Sequence[Entry], first_line: dict[str, int], report: ImportReport
) -> list[Entry]:
    """Refuse a name given by an earlier line: which line wins would otherwise be a guess."""
    kept = []
    for entry in entries:
        repeated = _repeated(first_line, "name", entry.name, entry.line)
        if repeated is None:
            kept.append(entry)
        else:
            report.refusals.append(Refusal(entry.line, str(repeated)))
    return kept


def _repeated(
    first_line: dict[str, int], field: str, name: str, line: int
) -> ValidationError | None:
    """The refusal of ``name`` on ``line`` when an earlier line gave it (``first_line``
    keeps the line of each name's first); None for its first."""
    earlier = first_line.setdefault(name, line)
    if earlier == line:
        return None
    return ValidationError(field, name, f"a name no earlier line has (line {earlier} has it)")


def _plan(
    entries: Sequence[Entry], now: datetime, actor: str, rows: Mapping[str, RowValues]
) -> _Plan:
    """What a batch of lines does to the rows of their names as they are now, and the
    audit entries of the changes, made by ``actor``."""
    plan = _Plan()
    for entry in entries:
        row = rows.get(entry.name)
        if row is None:
            created = entry.new_row(now)
            plan.creates.append({**created, "labels": entry.labels})
            shown = {**dict.fromkeys(AUDITED_COLUMNS), **created}  # what it does not set is unset
            plan.audit.append(
                audit_entry(actor, "create", now, entry.name, None, shown, entry.labels)
            )
            continue
        try:
            changes = entry.changes(row, now)
        except ValidationError as exc:
            plan.refusals.append(Refusal(entry.line, str(exc)))
            continue
        if changes is None:
            plan.unchanged += 1
        else:
            plan.updates.append({"row_id": row["id"], **changes})
            labels: Sequence[str] = changes["labels"] if "labels" in changes else row["labels"]
            changed = {**row, **changes}
            plan.audit.append(audit_entry(actor, "edit", now, entry.name, row, changed, labels))
    return plan


def audit_entry(
    actor: str,
    action: str,
    now: datetime,
    name: str,
    row: RowValues | None,
    values: RowValues,
    labels: Sequence[str],
) -> dict[str, Any]:
    """The audit entry of a line, or another scheduler's entry, that created (``row``
    None) or changed a schedule."""
    after = snapshot(values, labels)
    before: dict[str, Any] | None = None
    if row is not None:
        before, after = difference(snapshot(row, row["labels"]), after)
    change = audit.Change(actor, action, "bridge import")
    return audit.entry(change, now, None if row is None else row["id"], name, before, after)


# -- export ---------------------------------------------------------------------------


def export_fields(row: RowValues) -> dict[str, Any]:
    """The line that recreates ``row``: its definition, without runtime state or defaults.

    Written from the stored values without checking them, so that a row
    someone broke by hand still exports (and its import then says what is wrong).
    """
    line: dict[str, Any] = {
        "name": row["name"],
        "task": row["task"],
        "timer": row["timer"],
        "timezone": row["timezone"],
    }
    if row["timer"].startswith("every "):
        line["anchor"] = row["anchor"].astimezone(UTC).isoformat()
    for key in ("args", "kwargs", "options", "enabled"):
        value = row[key] if key == "enabled" else json_or_text(row[key])
        if value != _DEFAULTS[key]:
            line[key] = value
    if row.get("signature") is not None:
        line["signature"] = json_or_text(row["signature"])
    if row.get("labels"):
        line["labels"] = list(row["labels"])
    defaults = Policies().columns()
    for name, column in POLICY_COLUMNS.items():
        value = row[column]
        if value is None or value == defaults[column] or (column in MOVING_COLUMNS and not value):
            continue  # a spent countdown (0) is state: the schedule is disabled instead
        line[name] = _policy_text(value)
    return line


def export_line(row: RowValues) -> str:
    return json.dumps(export_fields(row), ensure_ascii=False)


def _policy_text(value: Any) -> Any:
    """A policy column as a line writes it: durations as ``1h30m``, times as ISO-8601 UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, float):  # catchup_window and jitter, stored in seconds
        try:
            return format_duration(timedelta(seconds=value))
        except ValueError:  # a fraction of a second, given through the API
            return value
    return value


def export_schedules(bridge: Bridge) -> Iterator[str]:
    """One line per calendar, then one per schedule, each in code-point order of names:
    a schedule line that skips a calendar comes after the calendar's."""
    for info in bridge.calendars():
        yield json.dumps(calendar_fields(info.calendar), ensure_ascii=False)
    for row in rows_by_name(bridge.database, (*COMPARED_COLUMNS, "remaining")):
        yield export_line(row)


__all__ = [
    "CALENDAR_FIELDS",
    "CALENDAR_KEY",
    "COMPARED_COLUMNS",
    "LINE_FIELDS",
    "READ_COLUMNS",
    "Entry",
    "ImportReport",
    "Refusal",
    "Rules",
    "audit_entry",
    "calendar_fields",
    "export_fields",
    "export_line",
    "export_schedules",
    "import_schedules",
    "parse_line",
]
