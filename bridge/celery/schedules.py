"""Celery's schedule objects in the bridge's terms, and their fire times as Celery computes them.

``beat_schedule`` sync and the imports from other schedulers both meet
``celery.schedules.schedule``, ``crontab`` and ``solar`` objects. This module
turns them into timer texts (:func:`timer_text`) and asks them, through their
own ``remaining_estimate``, when they would fire (:func:`fire_times`), so that
an import can show the two side by side and refuse what differs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from celery.schedules import crontab, schedule, solar

from bridge.errors import ValidationError
from bridge.rules.timers import format_duration

#: The ``crontab`` fields in the order of a cron expression.
CRON_ORDER = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
#: The values each field takes when it is not restricted.
_FULL = {
    "minute": range(60),
    "hour": range(24),
    "day_of_month": range(1, 32),
    "month_of_year": range(1, 13),
    "day_of_week": range(7),
}


def _cron_field(value: Any) -> str:
    """One crontab field as cron text: Celery keeps what it was given (text, a number or a set)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return ",".join(str(item) for item in sorted(value))


def crontab_text(value: crontab) -> str:
    """The timer text of a Celery crontab, as ``beat_schedule`` sync stores it.

    A crontab restricting at most one day field reads the same as classic cron
    and keeps its fields as written (``crontab(minute=0, hour=9,
    day_of_week="mon-fri")`` is ``0 9 * * mon-fri``). One that restricts both
    is a ``celery`` cron timer, whose days must match every field, as Celery's do.
    """
    fields = [
        _cron_field(getattr(value, f"_orig_{name}"))
        for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    ]
    text = " ".join(fields)
    if fields[2].startswith("*") or fields[4].startswith("*"):
        return text
    return f"celery {text}"


def _compact(values: Iterable[int], name: str) -> str:
    """A set of field values as cron text: ``*``, or values and ranges separated by commas."""
    chosen = sorted(set(values))
    if chosen == list(_FULL[name]):
        return "*"
    parts: list[str] = []
    start = previous = chosen[0]
    for number in [*chosen[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ",".join(parts)


def celery_cron_text(value: crontab) -> str:
    """The exact ``celery`` cron timer of a crontab: its fields as Celery expanded them."""
    return "celery " + " ".join(_compact(getattr(value, name), name) for name in CRON_ORDER)


def solar_text(value: solar) -> str:
    return f"solar {value.event} {value.lat} {value.lon}"


def interval_text(every: timedelta, given: Any) -> str:
    try:
        return f"every {format_duration(every)}"
    except ValueError:
        raise ValidationError("schedule", given, "a whole number of seconds > 0") from None


def timer_text(value: Any) -> str:
    """The timer text of a ``beat_schedule`` entry's ``schedule`` value."""
    if isinstance(value, str):
        return value
    if isinstance(value, crontab):
        return crontab_text(value)
    if isinstance(value, solar):
        return solar_text(value)
    given = value
    if isinstance(value, schedule):
        value = value.run_every
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if isinstance(value, timedelta):
        return interval_text(value, given)
    raise ValidationError(
        "schedule", given, "seconds, a timedelta, a celery crontab or solar, or a timer text"
    )


def zoned(value: crontab, zone: tzinfo) -> crontab:
    """``value`` read in ``zone``, as django-celery-beat's ``TzAwareCrontab`` reads its own."""
    value.tz = zone  # a cached property: the instance's own value wins
    return value


def _constant(moment: datetime) -> datetime:
    return moment


def fire_times(
    value: schedule | crontab | solar,
    last_run_at: datetime,
    count: int,
    stop: Callable[[datetime], bool] | None = None,
) -> list[datetime]:
    """When Celery's beat fires ``value`` next, ``count`` times, after a run at ``last_run_at``.

    Beat fires an entry once ``remaining_estimate(last_run_at)`` reaches zero
    and records the instant as the new ``last_run_at``; here each fire is taken
    to happen exactly when due. ``stop`` ends the list at the first instant it
    accepts (a schedule's end). An entry whose next fire would not come after
    the previous one ends the list too: Celery would fire it again at once.
    """
    found: list[datetime] = []
    last = last_run_at.astimezone(UTC)
    saved = value.nowfun
    try:
        while len(found) < count:
            current = last
            value.nowfun = functools.partial(_constant, current)
            following = (current + value.remaining_estimate(current)).astimezone(UTC)
            if following <= current or (stop is not None and stop(following)):
                break
            found.append(following)
            last = following
    finally:
        value.nowfun = saved
    return found


__all__ = [
    "celery_cron_text",
    "crontab_text",
    "fire_times",
    "interval_text",
    "solar_text",
    "timer_text",
    "zoned",
]
