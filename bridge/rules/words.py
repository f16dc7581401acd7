"""Timers and policies in words, for people reading the dashboard.

``0 9 * * mon-fri`` in ``Europe/Berlin`` reads "at 09:00 on Monday to
Friday (Europe/Berlin)"; ``every 1h30m`` reads "every 1 hour 30 minutes".
A cron expression the sentences below do not cover reads field by field;
nothing here guesses. Pure: timers and policies in, text out.
"""

from __future__ import annotations

from datetime import timedelta

from bridge.rules.policy import Catchup, OnOverrun, Overlap, Policies, ReplaceWith
from bridge.rules.timers import CronTimer, IntervalTimer, OneShotTimer, Timer

_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def duration_words(delta: timedelta) -> str:
    """``1 hour 30 minutes``; ``0 seconds`` for nothing."""
    seconds = int(delta.total_seconds())
    parts = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def short_duration(delta: timedelta) -> str:
    """A duration as a person says it in passing: ``45s``, ``6m``, ``2h5m``, ``3d``."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{seconds // 86400}d"


def timer_words(timer: Timer) -> str:
    """The timer as a sentence, naming its zone where the zone matters."""
    if isinstance(timer, IntervalTimer):
        every = duration_words(timer.interval)
        if timer.fixed_delay:
            return f"{every} after each run completes"
        return f"every {every}"
    if isinstance(timer, OneShotTimer):
        local = timer.when.astimezone(timer.zone)
        return f"once, at {local:%Y-%m-%d %H:%M} ({timer.zone.key})"
    if isinstance(timer, CronTimer):
        return f"{_cron_words(timer)} ({timer.zone.key})"
    return getattr(timer, "text", type(timer).__name__)


def _cron_words(timer: CronTimer) -> str:
    fields = timer.fields
    every_minute = fields.minutes == tuple(range(60))
    every_hour = fields.hours == tuple(range(24))
    every_day = len(fields.days) == 31 and len(fields.weekdays) == 7
    every_month = len(fields.months) == 12
    step = _step(fields.minutes, 60)
    if every_hour and every_day and every_month:
        if every_minute:
            return "every minute"
        if step:
            return f"every {step} minutes"
        if len(fields.minutes) == 1:
            return f"every hour at minute {fields.minutes[0]}"
    hours = _step(fields.hours, 24)
    if hours and len(fields.minutes) == 1:
        when = f"every {hours} hours at minute {fields.minutes[0]}"
        days = _day_words(timer)
        return when if days == "every day" else f"{days}, {when}"
    return f"{_day_words(timer)} {_clock_words(fields.minutes, fields.hours)}"


def _step(values: tuple[int, ...], size: int) -> int | None:
    """The step of ``*/n`` when the values are exactly that."""
    if len(values) < 2 or values[0] != 0:
        return None
    step = values[1] - values[0]
    return step if values == tuple(range(0, size, step)) else None


def _clock_words(minutes: tuple[int, ...], hours: tuple[int, ...]) -> str:
    if len(hours) * len(minutes) <= 4:
        return "at " + _listed([f"{hour:02d}:{minute:02d}" for hour in hours for minute in minutes])
    listed_hours = _listed([str(hour) for hour in hours])
    if len(minutes) == 1:
        return f"at minute {minutes[0]} of hours {listed_hours}"
    return f"at minutes {_listed([str(m) for m in minutes])} of hours {listed_hours}"


def _day_words(timer: CronTimer) -> str:
    fields = timer.fields
    all_days = len(fields.days) == 31
    all_weekdays = len(fields.weekdays) == 7
    months = _listed([_MONTHS[month - 1] for month in sorted(fields.months)])
    within = "" if len(fields.months) == 12 else f" in {months}"
    weekdays = _weekday_words(fields.weekdays)
    dates = "day " + _listed([str(day) for day in sorted(fields.days)])
    if all_days and all_weekdays:
        return "every day" + within
    if all_days:
        return f"every {weekdays}" + within
    if all_weekdays:
        return f"on {dates} of the month" + within
    joiner = "or" if fields.either_day else "and"
    return f"on {dates} of the month {joiner} every {weekdays}" + within


def _weekday_words(weekdays: frozenset[int]) -> str:
    ordered = sorted(weekdays)
    if ordered == [1, 2, 3, 4, 5]:
        return "Monday to Friday"
    if ordered == [0, 6]:
        return "Saturday and Sunday"
    return _listed([_DAYS[day] for day in ordered])


def _listed(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def policy_words(policies: Policies) -> list[str]:
    """One sentence per policy, defaults included, in the order the CLI lists them."""
    overlap = {
        Overlap.SKIP: "An occurrence due while a run is still open is skipped (and counted).",
        Overlap.ALLOW: "An occurrence due while a run is still open runs beside it.",
        Overlap.BUFFER_ONE: "One occurrence due while a run is open waits and starts when it ends.",
        Overlap.BUFFER_ALL: "Every occurrence due while a run is open waits its turn, oldest first"
        " (up to bridge_buffer_limit; the rest are skipped and counted).",
        Overlap.REPLACE: (
            "An occurrence due while a run is open revokes that run and starts."
            if policies.replace_with is ReplaceWith.TERMINATE
            else "An occurrence due while a run is open revokes it if it has not started"
            " (a started one finishes beside it) and starts."
        ),
    }[policies.overlap]
    window = (
        ""
        if policies.catchup_window is None
        else f" within {duration_words(policies.catchup_window)}"
    )
    catchup = {
        Catchup.LATEST: f"After downtime, the latest missed occurrence{window} runs once.",
        Catchup.ALL: f"After downtime, every missed occurrence{window} runs, oldest first.",
        Catchup.NONE: "After downtime, missed occurrences are not run.",
    }[policies.catchup]
    sentences = [overlap, catchup]
    if policies.jitter:
        sentences.append(f"Each occurrence is delayed by up to {duration_words(policies.jitter)}.")
    if policies.start is not None:
        sentences.append(f"No occurrence before {policies.start:%Y-%m-%d %H:%M} UTC.")
    if policies.end is not None:
        sentences.append(f"No occurrence after {policies.end:%Y-%m-%d %H:%M} UTC.")
    if policies.remaining is not None:
        sentences.append(f"{policies.remaining} scheduled run(s) left.")
    if policies.skip_calendars:
        sentences.append(
            "No occurrence on the calendar(s) "
            + ", ".join(policies.skip_calendars)
            + " (each counted as excluded)."
        )
    if policies.max_failures is not None:
        sentences.append(f"Breaks after {policies.max_failures} failed occurrences in a row.")
    if policies.max_attempts > 1:
        backoff = "" if policies.backoff is None else f", waiting {policies.backoff.text}"
        sentences.append(
            f"A failed occurrence is tried up to {policies.max_attempts} times{backoff}."
        )
    sentences.append(
        {
            "next": "A run not started by the next occurrence expires.",
            "never": "A run's message never expires.",
        }.get(policies.expires, f"A run not started within {policies.expires} expires.")
    )
    if policies.grace is not None:
        sentences.append(
            f"Late when an occurrence waits more than {duration_words(policies.grace)}."
        )
    if policies.max_runtime is not None:
        action = {
            OnOverrun.NONE: "",
            OnOverrun.REVOKE: "; it is then revoked",
            OnOverrun.TERMINATE: "; it is then terminated",
        }[policies.on_overrun]
        sentences.append(f"A run overruns after {duration_words(policies.max_runtime)}{action}.")
    if policies.alert_after is not None:
        sentences.append(f"Failing, and alerted, after {policies.alert_after} failures in a row.")
    if policies.recover_after is not None:
        sentences.append(f"Recovers after {policies.recover_after} successes in a row.")
    if policies.keep_runs is not None or policies.keep_days is not None:
        kept = []
        if policies.keep_runs is not None:
            kept.append(
                "every run" if policies.keep_runs == 0 else f"the last {policies.keep_runs} runs"
            )
        if policies.keep_days is not None:
            kept.append(
                "runs of any age"
                if policies.keep_days == 0
                else f"runs of the last {policies.keep_days} days"
            )
        sentences.append("Keeps " + " and ".join(kept) + ".")
    return sentences
