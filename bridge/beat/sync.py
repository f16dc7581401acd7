"""Keeping the table in step with the app's ``beat_schedule`` when beat starts.

Entries are keyed by name. A new entry is inserted; an unchanged one keeps
its ``nextrun`` and counters; a changed one takes the new definition (and a
new first occurrence when its timer, zone, start or end changed); an entry
gone from the configuration is disabled. Rows created through the API or the
CLI are never touched. The entries are checked here, with the app's
configuration; :mod:`bridge.storage.sync` writes them.

An entry's policies are under its ``"policies"`` key, with the keywords of
:class:`~bridge.rules.policy.PolicyFields`. ``remaining`` is a countdown that beat
moves, so it is not compared: the entry's value is taken when the entry is
new or another of its fields changes, and a beat restart does not reset it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule

from bridge.clock import utcnow
from bridge.errors import ValidationError
from bridge.rules.definition import Definition, build_definition, require_occurrence
from bridge.rules.timers import format_duration
from bridge.storage.database import Database
from bridge.storage.sync import ConfigSync

logger = logging.getLogger("bridge.sync")


def _cron_field(value: Any) -> str:
    """One crontab field as cron text: Celery keeps what it was given (text, a number or a set)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return ",".join(str(item) for item in sorted(value))


def crontab_text(value: crontab) -> str:
    """The cron expression of a Celery crontab, refusing one whose meaning would change.

    Celery fires a crontab that restricts both day fields only on days matching
    both; classic cron, which the bridge follows, fires on days matching either.
    """
    fields = [
        _cron_field(field)
        for field in (
            value._orig_minute,
            value._orig_hour,
            value._orig_day_of_month,
            value._orig_month_of_year,
            value._orig_day_of_week,
        )
    ]
    if not fields[2].startswith("*") and not fields[4].startswith("*"):
        raise ValidationError(
            "schedule",
            value,
            "a crontab restricting at most one of day_of_month and day_of_week "
            "(Celery requires both to match, cron only one)",
        )
    return " ".join(fields)


def timer_text(value: Any) -> str:
    """The timer text of a ``beat_schedule`` entry's ``schedule`` value."""
    if isinstance(value, str):
        return value
    if isinstance(value, crontab):
        return crontab_text(value)
    given = value
    if isinstance(value, schedule):
        value = value.run_every
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if isinstance(value, timedelta):
        try:
            return f"every {format_duration(value)}"
        except ValueError:
            raise ValidationError("schedule", given, "a whole number of seconds > 0") from None
    raise ValidationError(
        "schedule", given, "seconds, a timedelta, a celery crontab or a timer text"
    )


def entry_definition(
    app: Celery, entry: Mapping[str, Any], now: datetime
) -> tuple[Definition, datetime]:
    """The checked definition of a ``beat_schedule`` entry and its first occurrence after now."""
    policies = entry.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise ValidationError(
            "policies", policies, "a mapping of policy keywords such as {'overlap': 'allow'}"
        )
    schedule_value = entry.get("schedule")
    definition, timer = build_definition(
        task=entry.get("task"),
        timer=timer_text(schedule_value),
        timezone=app.conf.timezone or "UTC",
        anchor=now,
        args=entry.get("args") or [],
        kwargs=entry.get("kwargs") or {},
        options=entry.get("options") or {},
        policies=policies,
    )
    return definition, require_occurrence(timer, definition.policies, now, schedule_value)


def sync_beat_schedule(app: Celery, database: Database) -> None:
    """Upsert ``app.conf.beat_schedule`` into ``periodic_task``; see the module docstring."""
    entries: Mapping[str, Mapping[str, Any]] = app.conf.beat_schedule or {}
    now = utcnow()
    checked: dict[str, tuple[Definition, datetime]] = {}
    for name, entry in entries.items():
        try:
            checked[name] = entry_definition(app, entry, now)
        except Exception as exc:  # one malformed entry must not stop the others
            logger.error("bridge: beat_schedule entry %r refused: %s", name, exc)
    report = ConfigSync(database).apply(checked, list(entries), now)
    for name in report.left_alone:
        logger.warning(
            "bridge: beat_schedule entry %r left alone: a schedule of that name "
            "was created through the API or CLI",
            name,
        )
    for name in report.changed:
        logger.info("bridge: beat_schedule entry %r changed; definition updated", name)
    if report.removed:
        logger.info("bridge: disabled %d schedule(s) removed from beat_schedule", report.removed)
