"""Timer texts and the arithmetic of their occurrences.

A schedule's ``timer`` column holds one of three kinds of text:

* an interval, ``every 1h30m``: a fixed rate from the schedule's anchor;
* a one-shot, ``at 2026-12-01T09:00:00+01:00``: a single instant;
* a cron expression, ``0 9 * * mon-fri`` or a macro such as ``@daily``, read
  on the wall clock of the schedule's IANA zone.

:func:`parse_timer` turns the text into a :class:`Timer` whose methods answer
the two questions the scheduler asks: when is the first occurrence after a
given instant, and which was the latest occurrence up to a given instant (the
one to fire after downtime). Nothing here reads the clock or touches the
database; every function is handed the instants it needs, so the maths is
tested without I/O. All instants going in must be timezone-aware and all
instants coming out are in UTC.

Cron follows classic ISC/Vixie cron, including its daylight-saving rules: a
*fixed-time* job (no ``*`` in the minute or hour field) runs once per matching
wall time, at the first instant after a spring-forward gap if its wall time is
skipped and on the first pass only if its wall time is repeated; any other job
runs by real time, in both passes of a repeated hour and not at all inside a
skipped one.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bridge.errors import BridgeError
from bridge.rules.solar import parse_solar
from bridge.rules.timer_base import Timer, TimerSyntaxError, require_aware

__all__ = [
    "CeleryCronTimer",
    "CronFields",
    "CronTimer",
    "IntervalTimer",
    "OneShotTimer",
    "Timer",
    "TimerSyntaxError",
    "UnknownTimezone",
    "format_duration",
    "load_zone",
    "parse_duration",
    "parse_timer",
    "require_aware",
    "upcoming",
]

DURATION_EXPECTED = (
    "a duration such as '30s', '5m', '2h', '1d' or '1h30m': whole numbers with the units "
    "d, h, m, s in that order, each at most once, adding up to more than zero"
)
ZONE_EXPECTED = "an IANA time zone name such as 'Europe/Berlin' or 'UTC'"

_ZERO = timedelta(0)
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
# The Gregorian calendar repeats every 400 years: a day that a cron expression
# does not match within one cycle it never matches.
_CALENDAR_CYCLE = timedelta(days=146_097)


class UnknownTimezone(BridgeError, ValueError):
    """A zone name is not one of the IANA zones this installation knows."""

    expected = ZONE_EXPECTED

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown time zone {name!r}; expected {ZONE_EXPECTED}")


# --------------------------------------------------------------------------- zones

# IANA names are ASCII words joined by '/'. Checking the shape first keeps
# ZoneInfo from being pointed at arbitrary files ('/etc/passwd', '../x').
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*", re.ASCII)


def load_zone(name: str) -> ZoneInfo:
    """Return the IANA zone called ``name``, or raise :class:`UnknownTimezone`."""
    if not _ZONE_NAME.fullmatch(name):
        raise UnknownTimezone(name)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise UnknownTimezone(name) from exc


# ----------------------------------------------------------------------- durations

#: At most 15 digits a unit: more is past any bound, and past 4,300 ``int()`` refuses to read it.
_DURATION = re.compile(
    r"(?:([0-9]{1,15})d)?(?:([0-9]{1,15})h)?(?:([0-9]{1,15})m)?(?:([0-9]{1,15})s)?"
)
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def parse_duration(text: str) -> timedelta:
    """Read a compact duration such as ``1h30m``.

    Units must come in descending order and each at most once, so that every
    duration has one obvious spelling; :func:`format_duration` writes it back.
    """
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        raise TimerSyntaxError(text, "not a duration", DURATION_EXPECTED)
    seconds = sum(
        int(count or 0) * size for count, (_, size) in zip(match.groups(), _UNITS, strict=True)
    )
    if seconds == 0:
        raise TimerSyntaxError(text, "a duration of zero", DURATION_EXPECTED)
    try:
        return timedelta(seconds=seconds)
    except OverflowError as exc:
        raise TimerSyntaxError(text, "a duration too long to represent", DURATION_EXPECTED) from exc


def format_duration(delta: timedelta) -> str:
    """Write ``delta`` the way :func:`parse_duration` reads it, largest units first."""
    if delta <= _ZERO or delta % _SECOND:
        raise ValueError(f"only a positive whole number of seconds has a duration text: {delta!r}")
    remaining = delta // _SECOND
    parts = []
    for unit, size in _UNITS:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# ---------------------------------------------------------------------- wall clock


def _wall_instants(zone: ZoneInfo, wall: datetime) -> tuple[datetime, ...]:
    """Every instant at which the clocks of ``zone`` show ``wall``, in order.

    One instant normally, two inside a repeated (fall-back) interval and none
    inside a skipped (spring-forward) one.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return (first,)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return (first, second)
    return ()


def _gap_end(zone: ZoneInfo, wall: datetime) -> datetime:
    """The instant the clocks of ``zone`` jump over the skipped ``wall``.

    Inside a gap the two folds read ``wall`` with the offsets from either side
    of the jump, which brackets the transition; tz data puts transitions on
    whole seconds, so a bisection over seconds finds it exactly.
    """
    readings = (wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    low, high = sorted(readings)
    offset_after = high.astimezone(zone).utcoffset()
    while high - low > _SECOND:
        middle = low + _SECOND * ((high - low) // _SECOND // 2)
        if middle.astimezone(zone).utcoffset() == offset_after:
            high = middle
        else:
            low = middle
    return high


def _resolve_wall(zone: ZoneInfo, wall: datetime) -> datetime:
    """The one instant a wall time means for an event that happens once.

    A repeated wall time means its first pass; a skipped one means the first
    instant after the gap, so that the event is late rather than lost.
    """
    instants = _wall_instants(zone, wall)
    return instants[0] if instants else _gap_end(zone, wall)


def _repeat_length(local: datetime) -> timedelta:
    """How long the wall time of ``local`` repeats (zero unless it falls back there)."""
    first = local.replace(fold=0).astimezone(UTC)
    second = local.replace(fold=1).astimezone(UTC)
    return max(second - first, _ZERO)


# -------------------------------------------------------------------------- timers


@dataclass(frozen=True)
class IntervalTimer(Timer):
    """``every <duration>``: the instants ``anchor + k * interval`` for every integer k.

    The rate is fixed in real time: ``every 1d`` is 86 400 s even across a
    daylight-saving change, and occurrences never drift, however late they are
    asked for. The grid extends before the anchor as well (k < 0), so every
    instant has a latest occurrence; the scheduler's start bound, not the
    anchor, decides when a schedule begins.
    """

    text: str
    zone: ZoneInfo
    interval: timedelta
    anchor: datetime
    #: ``every 1h after completion``: a fixed delay. The next run is due one
    #: interval after the previous one finished, which only the run's record
    #: knows, so the scheduler sets it; the grid is used for the first run only.
    after_completion: bool = False

    @property
    def fixed_delay(self) -> bool:
        return self.after_completion

    # timedelta arithmetic is exact integer microseconds: the steps never
    # accumulate rounding, whatever the distance from the anchor.

    def next_after(self, after: datetime) -> datetime | None:
        steps = (require_aware("after", after) - self.anchor) // self.interval + 1
        return self._occurrence(steps)

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        steps = (require_aware("at", at) - self.anchor) // self.interval
        return self._occurrence(steps)

    def _occurrence(self, steps: int) -> datetime | None:
        try:
            return self.anchor + self.interval * steps
        except OverflowError:
            return None


@dataclass(frozen=True)
class OneShotTimer(Timer):
    """``at <ISO-8601 time>``: the single instant ``when``."""

    text: str
    zone: ZoneInfo
    when: datetime

    @property
    def is_one_shot(self) -> bool:
        return True

    def next_after(self, after: datetime) -> datetime | None:
        return self.when if self.when > require_aware("after", after) else None

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        return self.when if self.when <= require_aware("at", at) else None


@dataclass(frozen=True)
class CronFields:
    """The values a cron expression allows, field by field, and how to read them.

    ``weekdays`` counts from 0 = Sunday. ``either_day`` is the classic rule
    for the two day fields: when both are restricted (neither starts with
    ``*``) a day matching either one runs; otherwise a day must match both.
    ``fixed_time`` marks a job with no ``*`` in its minute or hour field,
    which decides how it behaves around daylight-saving changes.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool
    fixed_time: bool

    def matches_day(self, day: date) -> bool:
        """Whether the job runs on local date ``day``."""
        if day.month not in self.months:
            return False
        by_date = day.day in self.days
        by_weekday = day.isoweekday() % 7 in self.weekdays
        return (by_date or by_weekday) if self.either_day else (by_date and by_weekday)

    def first_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time (naive, whole minute) strictly after ``wall``."""
        start = wall.replace(second=0, microsecond=0) + _MINUTE
        for day in self._days(start.date(), _DAY):
            clock = self._earliest_clock(start) if day == start.date() else self._day_start()
            if clock is not None:
                return datetime.combine(day, clock)
        return None

    def last_at_or_before(self, wall: datetime) -> datetime | None:
        """The last matching wall time (naive, whole minute) at or before ``wall``."""
        end = wall.replace(second=0, microsecond=0)
        for day in self._days(end.date(), -_DAY):
            clock = self._latest_clock(end) if day == end.date() else self._day_end()
            if clock is not None:
                return datetime.combine(day, clock)
        return None

    def _days(self, first: date, step: timedelta) -> Iterator[date]:
        """Matching days from ``first`` on, one calendar cycle in direction ``step``."""
        day = first
        try:
            while abs(day - first) <= _CALENDAR_CYCLE:
                if day.month not in self.months:
                    day = _month_edge(day, step)
                    continue
                if self.matches_day(day):
                    yield day
                day += step
        except OverflowError:
            return

    def _day_start(self) -> time:
        return time(self.hours[0], self.minutes[0])

    def _day_end(self) -> time:
        return time(self.hours[-1], self.minutes[-1])

    def _earliest_clock(self, start: datetime) -> time | None:
        """The earliest matching time of day at or after that of ``start``."""
        index = bisect_left(self.hours, start.hour)
        if index < len(self.hours) and self.hours[index] == start.hour:
            minute = bisect_left(self.minutes, start.minute)
            if minute < len(self.minutes):
                return time(start.hour, self.minutes[minute])
            index += 1
        return time(self.hours[index], self.minutes[0]) if index < len(self.hours) else None

    def _latest_clock(self, end: datetime) -> time | None:
        """The latest matching time of day at or before that of ``end``."""
        index = bisect_right(self.hours, end.hour) - 1
        if index >= 0 and self.hours[index] == end.hour:
            minute = bisect_right(self.minutes, end.minute) - 1
            if minute >= 0:
                return time(end.hour, self.minutes[minute])
            index -= 1
        return time(self.hours[index], self.minutes[-1]) if index >= 0 else None


def _month_edge(day: date, step: timedelta) -> date:
    """The first day of the next month (step forward) or last of the previous one."""
    if step > _ZERO:
        return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return day.replace(day=1) - _DAY


@dataclass(frozen=True)
class CronTimer(Timer):
    """A cron expression evaluated on the wall clock of ``zone``.

    Matching wall times are found on the naive local calendar and then mapped
    to instants: a fixed-time job maps each to one instant (its first pass, or
    the end of a gap), any other job to every instant showing it (zero, one or
    two). Around a fall-back the instants of neighbouring wall times
    interleave -- 01:50 in the first pass comes before 01:00 in the second --
    so a search that starts inside a repeated interval weighs every matching
    wall time within the repeat's length on either side and keeps the nearest
    instant. Anywhere else the first matching wall time with a suitable
    instant is the answer, found without stepping through occurrences.
    """

    text: str
    zone: ZoneInfo
    fields: CronFields

    def next_after(self, after: datetime) -> datetime | None:
        local = require_aware("after", after).astimezone(self.zone)
        wall = local.replace(tzinfo=None)
        # In the first pass of a repeated interval the second pass, whose wall
        # times lie up to `reach` before ours, is still to come.
        reach = _repeat_length(local) if local.fold == 0 else _ZERO
        best: datetime | None = None
        candidate = self.fields.first_after(wall - reach)
        while candidate is not None:
            later = [instant for instant in self._instants(candidate) if instant > after]
            if later and (best is None or later[0] < best):
                best = later[0]
            if best is not None and candidate >= wall + reach:
                return best
            candidate = self.fields.first_after(candidate)
        return best

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        local = require_aware("at", at).astimezone(self.zone)
        wall = local.replace(tzinfo=None)
        # In the second pass of a repeated interval the first pass, whose wall
        # times lie up to `reach` after ours, is already over.
        reach = _repeat_length(local) if local.fold == 1 else _ZERO
        best: datetime | None = None
        candidate = self.fields.last_at_or_before(wall + reach)
        while candidate is not None:
            earlier = [instant for instant in self._instants(candidate) if instant <= at]
            if earlier and (best is None or earlier[-1] > best):
                best = earlier[-1]
            if best is not None and candidate <= wall - reach:
                return best
            candidate = self.fields.last_at_or_before(candidate - _MINUTE)
        return best

    def _instants(self, wall: datetime) -> tuple[datetime, ...]:
        if self.fields.fixed_time:
            return (_resolve_wall(self.zone, wall),)
        return _wall_instants(self.zone, wall)


@dataclass(frozen=True)
class CeleryCronTimer(Timer):
    """``celery <cron expression>``: a cron expression read as Celery's ``crontab`` reads it.

    Two rules differ from classic cron. A day must match *every* day field:
    ``celery 0 0 13 * fri`` runs on Friday the 13th only, where ``0 0 13 * fri``
    runs on every 13th and every Friday. And the next occurrence is, as Celery
    computes it, the first matching wall time after the wall time of the previous
    one (whole minutes), read with the previous one's fold: a wall time inside a
    spring-forward gap is read with the offset before the gap (``02:30`` in a
    one-hour gap fires at ``03:30`` of the new time), several wall times that
    the gap swallows fire once, and a repeated hour runs on its first pass only,
    whether or not the job has a ``*`` in its minute or hour field.
    """

    text: str
    zone: ZoneInfo
    fields: CronFields

    def next_after(self, after: datetime) -> datetime | None:
        local = require_aware("after", after).astimezone(self.zone)
        candidate = self.fields.first_after(local.replace(tzinfo=None))
        while candidate is not None:
            instant = candidate.replace(tzinfo=self.zone, fold=local.fold).astimezone(UTC)
            if instant > after:
                return instant
            candidate = self.fields.first_after(candidate)
        return None

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        local = require_aware("at", at).astimezone(self.zone)
        candidate = self.fields.last_at_or_before(local.replace(tzinfo=None))
        while candidate is not None:
            instant = candidate.replace(tzinfo=self.zone, fold=local.fold).astimezone(UTC)
            if instant <= at:
                return instant
            candidate = self.fields.last_at_or_before(candidate - _MINUTE)
        return None


# ------------------------------------------------------------------------- parsing


_KEYWORDED = re.compile(
    r"\s*(?P<keyword>every|at|celery|solar)(?:\s+(?P<argument>.*?))?\s*", re.I | re.S
)
#: What a ``celery ...`` timer must be.
CELERY_CRON_EXPECTED = (
    "'celery ' followed by a 5-field cron expression or '@hourly'..'@yearly', "
    "read as Celery's crontab reads it"
)


def parse_timer(text: str, zone: str | ZoneInfo = "UTC", anchor: datetime | None = None) -> Timer:
    """Read a timer text in ``zone``.

    ``anchor`` is the instant an interval timer counts from; it is required
    for ``every ...`` and ignored otherwise. Raises :class:`TimerSyntaxError`
    for unreadable text and :class:`UnknownTimezone` for an unknown zone.
    """
    tz = zone if isinstance(zone, ZoneInfo) else load_zone(zone)
    keyworded = _KEYWORDED.fullmatch(text)
    if keyworded is None:
        return _parse_cron(text, tz)
    argument = keyworded["argument"] or ""
    keyword = keyworded["keyword"].lower()
    if keyword == "every":
        return _parse_interval(text, argument, tz, anchor)
    if keyword == "celery":
        return _parse_celery_cron(text, argument, tz)
    if keyword == "solar":
        return parse_solar(text, argument, tz)
    return _parse_one_shot(text, argument, tz)


_AFTER_COMPLETION = re.compile(r"(?P<duration>.*?)\s+after\s+completion", re.I | re.S)


def _parse_interval(
    text: str, duration: str, zone: ZoneInfo, anchor: datetime | None
) -> IntervalTimer:
    fixed_delay = _AFTER_COMPLETION.fullmatch(duration)
    if fixed_delay is not None:
        duration = fixed_delay["duration"]
    try:
        interval = parse_duration(duration.lower())
    except TimerSyntaxError as exc:
        raise TimerSyntaxError(text, "'every' needs a duration such as '30s' or '1h30m'") from exc
    if anchor is None:
        raise ValueError(f"an interval timer needs an anchor to count from: {text!r}")
    suffix = " after completion" if fixed_delay else ""
    return IntervalTimer(
        text=f"every {format_duration(interval)}{suffix}",
        zone=zone,
        interval=interval,
        anchor=require_aware("anchor", anchor).astimezone(UTC),
        after_completion=fixed_delay is not None,
    )


def _parse_one_shot(text: str, value: str, zone: ZoneInfo) -> OneShotTimer:
    """Read ``at <ISO-8601>``; a time without offset is a wall time in ``zone``."""
    try:
        moment = datetime.fromisoformat(value)
        when = moment.astimezone(UTC) if moment.tzinfo else _resolve_wall(zone, moment)
    except (ValueError, OverflowError) as exc:
        raise TimerSyntaxError(text, f"{value!r} is not an ISO-8601 time") from exc
    return OneShotTimer(text=f"at {when.isoformat()}", zone=zone, when=when)


_MACROS = {
    "@hourly": ("@hourly", "0 * * * *"),
    "@daily": ("@daily", "0 0 * * *"),
    "@midnight": ("@daily", "0 0 * * *"),
    "@weekly": ("@weekly", "0 0 * * 0"),
    "@monthly": ("@monthly", "0 0 1 * *"),
    "@yearly": ("@yearly", "0 0 1 1 *"),
    "@annually": ("@yearly", "0 0 1 1 *"),
}

_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# February counts 29 days: an expression for 29 February does run, in leap years.
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_ITEM = re.compile(r"(?P<base>\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>[0-9]+))?", re.ASCII)


class _Field(NamedTuple):
    """The legal values of one cron field and the names that stand for some of them."""

    label: str
    low: int
    high: int
    names: Mapping[str, int]

    def value(self, word: str, text: str) -> int:
        if word in self.names:
            return self.names[word]
        if not word.isdigit():
            raise TimerSyntaxError(text, f"{self.label} field has an unknown name {word!r}")
        number = int(word)
        if not self.low <= number <= self.high:
            raise TimerSyntaxError(
                text, f"{self.label} value {number} is outside {self.low}-{self.high}"
            )
        return number

    def expand(self, field: str, text: str) -> frozenset[int]:
        """The values a comma-separated list of items allows."""
        values: set[int] = set()
        for item in field.split(","):
            values.update(self._expand_item(item, text))
        return frozenset(values)

    def _expand_item(self, item: str, text: str) -> range:
        match = _ITEM.fullmatch(item)
        if match is None:
            raise TimerSyntaxError(text, f"{self.label} field has a malformed item {item!r}")
        base, step_text = match["base"], match["step"]
        if base == "*":
            first, last = self.low, self.high
        else:
            first_word, dash, last_word = base.partition("-")
            if step_text is not None and not dash:
                raise TimerSyntaxError(text, f"step in {item!r} needs '*' or a range before '/'")
            first = self.value(first_word, text)
            last = self.value(last_word, text) if dash else first
            if first > last:
                raise TimerSyntaxError(text, f"{self.label} range {base!r} runs backwards")
        step = int(step_text) if step_text is not None else 1
        if not 1 <= step <= self.high - self.low + 1:
            raise TimerSyntaxError(text, f"{self.label} step {step} is out of range")
        return range(first, last + 1, step)


# Day of week runs 0-7 as in Vixie cron: both 0 and 7 are Sunday.
_CRON_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {name: index for index, name in enumerate(_MONTH_NAMES, 1)}),
    _Field("day-of-week", 0, 7, {name: index for index, name in enumerate(_WEEKDAY_NAMES)}),
)


def _parse_cron(text: str, zone: ZoneInfo) -> CronTimer:
    """Read a classic five-field expression or macro, refusing every extension.

    Seconds, years, ``L``/``W``/``#``/``?``, hashed ``H`` values and
    ``@reboot`` are refused rather than half-supported.
    """
    lowered = text.strip().lower()
    if lowered.startswith("@"):
        if lowered not in _MACROS:
            raise TimerSyntaxError(text, f"unknown macro {lowered!r}")
        normalised, expression = _MACROS[lowered]
    else:
        normalised = expression = " ".join(lowered.split())
    words = expression.split()
    if len(words) != len(_CRON_FIELDS):
        raise TimerSyntaxError(text, f"a cron expression has 5 fields, this one has {len(words)}")
    minutes, hours, days, months, weekdays = (
        rule.expand(word, text) for rule, word in zip(_CRON_FIELDS, words, strict=True)
    )
    days_star, weekdays_star = words[2].startswith("*"), words[4].startswith("*")
    fields = CronFields(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=days,
        months=months,
        weekdays=frozenset(day % 7 for day in weekdays),
        either_day=not days_star and not weekdays_star,
        fixed_time="*" not in words[0] and "*" not in words[1],
    )
    if not fields.either_day and not any(
        day <= _LONGEST_MONTH[month - 1] for month in months for day in days
    ):
        raise TimerSyntaxError(text, "no month in the expression has any of its days")
    return CronTimer(text=normalised, zone=zone, fields=fields)


def _parse_celery_cron(text: str, expression: str, zone: ZoneInfo) -> CeleryCronTimer:
    """Read ``celery <cron>``: the fields of classic cron, every day field must match."""
    try:
        classic = _parse_cron(expression, zone)
    except TimerSyntaxError as exc:
        raise TimerSyntaxError(text, exc.problem, CELERY_CRON_EXPECTED) from None
    fields = replace(classic.fields, either_day=False)
    if not any(day <= _LONGEST_MONTH[month - 1] for month in fields.months for day in fields.days):
        raise TimerSyntaxError(
            text, "no month in the expression has any of its days", CELERY_CRON_EXPECTED
        )
    if fields.first_after(datetime(2000, 1, 1)) is None:
        raise TimerSyntaxError(text, "no day matches every day field", CELERY_CRON_EXPECTED)
    return CeleryCronTimer(text=f"celery {classic.text}", zone=zone, fields=fields)


def upcoming(timer: Timer, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` occurrences strictly after ``after``; fewer if the timer ends."""
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    found: list[datetime] = []
    cursor = after
    while len(found) < count:
        following = timer.next_after(cursor)
        if following is None:
            break
        found.append(following)
        cursor = following
    return found
