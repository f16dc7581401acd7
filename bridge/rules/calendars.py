"""Calendars: named days and times on which a schedule's occurrences are not sent.

A calendar is one of three kinds, each read on the wall clock of its zone:

* ``dates``: whole local days (``2026-12-24,2026-12-25``);
* ``ranges``: spans of local time, ``START/END``, each a date (a whole day: the range
  covers START's day to END's day, both included) or a date and time (from START up to,
  not including, END), as maintenance windows are written;
* ``cron``: the minutes a five-field cron expression matches (``* * 25 12 *`` is the
  whole of Christmas Day, ``* 2-3 * * sun`` two hours each Sunday night).

A schedule names the calendars it skips (its ``skip_calendars`` policy); an occurrence
that falls on any of them is not sent and is counted as ``excluded``
(:func:`bridge.rules.decisions.decide`), so the forecast and ``next`` leave it out as
beat does. Pure: values in, values or a :class:`~bridge.errors.ValidationError` out.
"""

from __future__ import annotations

import enum
import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bridge.errors import ValidationError
from bridge.rules.timers import CronFields, CronTimer, parse_timer

#: A calendar's name: a word a schedule lists among others, separated by commas.
NAME_EXPECTED = (
    "a calendar name of 1 to 100 letters, digits or _.- (starting with a letter or digit), "
    "other than 'none'"
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: The most dates or ranges one calendar holds: a decade of holidays fits many times over.
ENTRIES_MAX = 2000
#: The most calendars one schedule skips.
SKIPPED_MAX = 20

DATES_EXPECTED = f"1 to {ENTRIES_MAX} dates as YYYY-MM-DD, a list or separated by commas"
RANGES_EXPECTED = (
    f"1 to {ENTRIES_MAX} ranges START/END, each a date (YYYY-MM-DD, the whole day) or a local "
    "date and time (YYYY-MM-DDTHH:MM), the end after the start; a lone date is that day"
)
CRON_EXPECTED = (
    "a 5-field cron expression whose matching minutes are excluded, such as "
    "'* * 25 12 *' (the whole of 25 December)"
)
SKIPPED_EXPECTED = f"up to {SKIPPED_MAX} calendar names, a list or separated by commas, or 'none'"

_DAY = timedelta(days=1)


class CalendarKind(enum.StrEnum):
    """How a calendar says which times it holds."""

    DATES = "dates"
    RANGES = "ranges"
    CRON = "cron"


def check_calendar_name(value: Any, field_name: str = "name") -> str:
    """A calendar's name, as a schedule's ``skip_calendars`` lists it (not ``none``, which
    there means no calendar)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or value.lower() == "none":
        raise ValidationError(field_name, value, NAME_EXPECTED)
    return value


def check_skipped(value: Any) -> tuple[str, ...]:
    """The calendars a schedule skips, as stored: unique names in the order given. A list,
    or one text separated by commas; ``'none'`` or nothing clears them."""
    given = value
    if isinstance(value, str):
        value = [] if value.strip().lower() == "none" else value.split(",")
    if not isinstance(value, list | tuple):
        raise ValidationError("skip_calendars", given, SKIPPED_EXPECTED)
    names: list[str] = []
    for name in value:
        if not isinstance(name, str):
            raise ValidationError("skip_calendars", given, SKIPPED_EXPECTED)
        name = name.strip()
        if not name:
            continue
        check_calendar_name(name, "skip_calendars")
        if name not in names:
            names.append(name)
    if len(names) > SKIPPED_MAX:
        raise ValidationError("skip_calendars", given, SKIPPED_EXPECTED)
    return tuple(names)


#: What a schedule's ``skip_calendars`` must name.
KNOWN_EXPECTED = "the name of a calendar (see bridge calendar ls)"


def require_known(names: Iterable[str], known: Collection[str]) -> None:
    """Refuse, naming ``skip_calendars``, the first of ``names`` not among ``known``."""
    for name in names:
        if name not in known:
            raise ValidationError("skip_calendars", name, KNOWN_EXPECTED)


def calendars_named(
    names: Sequence[str], calendars: Mapping[str, Calendar]
) -> tuple[Calendar, ...]:
    """The calendars ``names`` read from ``calendars``, in order; refused naming
    ``skip_calendars`` for one that is not there."""
    require_known(names, calendars)
    return tuple(calendars[name] for name in names)


def names_text(names: tuple[str, ...]) -> str | None:
    """Calendar names as ``periodic_task.skip_calendars`` keeps them: separated by commas,
    NULL for none."""
    return ",".join(names) or None


def names_of(text: str | None) -> tuple[str, ...]:
    """The calendar names a ``skip_calendars`` column holds."""
    return tuple(text.split(",")) if text else ()


@dataclass(frozen=True)
class Calendar:
    """A named calendar, checked: :meth:`excludes` answers for any instant."""

    name: str
    kind: CalendarKind
    #: What it holds, as the user writes it, normalised: dates, ranges, or one expression.
    entries: tuple[str, ...]
    zone: ZoneInfo
    _dates: frozenset[date] = field(default=frozenset(), repr=False, compare=False)
    #: The ranges' starts and ends (naive local wall times), sorted by start.
    _starts: tuple[datetime, ...] = field(default=(), repr=False, compare=False)
    _ends: tuple[datetime, ...] = field(default=(), repr=False, compare=False)
    _cron: CronFields | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, name: Any, kind: Any, entries: Any, zone: ZoneInfo) -> Calendar:
        """Check a calendar's parts, read in ``zone`` (checked by the caller, as a
        schedule's is); a bad one raises :class:`ValidationError` naming it (``name``,
        ``kind``, ``dates``, ``ranges`` or ``cron``)."""
        name = check_calendar_name(name)
        try:
            kind = CalendarKind(kind)
        except ValueError:
            raise ValidationError("kind", kind, "one of dates|ranges|cron") from None
        if kind is CalendarKind.DATES:
            dates = _dates(entries)
            texts = tuple(day.isoformat() for day in sorted(dates))
            return cls(name, kind, texts, zone, _dates=frozenset(dates))
        if kind is CalendarKind.RANGES:
            spans = sorted(_ranges(entries))
            texts = tuple(text for _, _, text in spans)
            merged = _merged([(start, end) for start, end, _ in spans])
            return cls(
                name,
                kind,
                texts,
                zone,
                _starts=tuple(start for start, _ in merged),
                _ends=tuple(end for _, end in merged),
            )
        expression, fields = _cron(entries)
        return cls(name, kind, (expression,), zone, _cron=fields)

    def excludes(self, moment: datetime) -> bool:
        """Whether the instant ``moment`` (aware) falls on this calendar."""
        wall = moment.astimezone(self.zone).replace(tzinfo=None)
        if self.kind is CalendarKind.DATES:
            return wall.date() in self._dates
        if self.kind is CalendarKind.RANGES:
            at = bisect_right(self._starts, wall) - 1
            return at >= 0 and wall < self._ends[at]
        assert self._cron is not None
        fields = self._cron
        return (
            wall.minute in fields.minutes
            and wall.hour in fields.hours
            and fields.matches_day(wall.date())
        )

    def to_json(self) -> dict[str, Any]:
        """The calendar as the API answers it and ``bridge calendar add`` takes it."""
        entries: Any = self.entries[0] if self.kind is CalendarKind.CRON else list(self.entries)
        return {
            "name": self.name,
            "kind": self.kind.value,
            self.kind.value: entries,
            "timezone": self.zone.key,
        }


def excluded_by(calendars: Sequence[Calendar], moment: datetime) -> Calendar | None:
    """The first of ``calendars`` that ``moment`` falls on, or None."""
    return next((calendar for calendar in calendars if calendar.excludes(moment)), None)


# -- the checks of each kind ------------------------------------------------------------


def _items(value: Any, field_name: str, expected: str) -> list[str]:
    """A list of texts, or one text separated by commas; 1 to ENTRIES_MAX of them."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValidationError(field_name, value, expected)
    items = [item.strip() for item in value if item.strip()]
    if not 1 <= len(items) <= ENTRIES_MAX:
        raise ValidationError(field_name, value, expected)
    return items


def _date(text: str) -> date | None:
    if len(text) != 10:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def _dates(value: Any) -> set[date]:
    days = set()
    for item in _items(value, "dates", DATES_EXPECTED):
        day = _date(item)
        if day is None:
            raise ValidationError("dates", item, DATES_EXPECTED)
        days.add(day)
    return days


def _range_end(text: str, start: bool) -> datetime | None:
    """A range's start or end as a naive local wall time: a date is its day's start, or,
    as an end, the next day's (the day is included)."""
    day = _date(text)
    if day is not None:
        try:
            return datetime.combine(day + (timedelta(0) if start else _DAY), time())
        except OverflowError:  # the end of 9999-12-31 is after the last date there is
            return None
    if not 16 <= len(text) <= 19 or text[10] not in "Tt ":
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if moment.tzinfo is not None else moment


def _ranges(value: Any) -> list[tuple[datetime, datetime, str]]:
    spans = []
    for item in _items(value, "ranges", RANGES_EXPECTED):
        parts = item.split("/") if "/" in item else [item, item]
        if len(parts) != 2:
            raise ValidationError("ranges", item, RANGES_EXPECTED)
        first, last = (part.strip() for part in parts)
        start, end = _range_end(first, True), _range_end(last, False)
        if start is None or end is None or end <= start:
            raise ValidationError("ranges", item, RANGES_EXPECTED)
        spans.append((start, end, f"{first}/{last}"))
    return spans


def _merged(spans: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping or touching spans (sorted by start) made one, so that one search finds
    whether a time is in any."""
    merged: list[tuple[datetime, datetime]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _cron(value: Any) -> tuple[str, CronFields]:
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or "@" in value or len(value) > 200:
        raise ValidationError("cron", value, CRON_EXPECTED)
    try:
        timer = parse_timer(value)
    except ValueError:  # a syntax error, or a timer of another kind that wants more
        raise ValidationError("cron", value, CRON_EXPECTED) from None
    if not isinstance(timer, CronTimer):
        raise ValidationError("cron", value, CRON_EXPECTED)
    return timer.text, timer.fields
