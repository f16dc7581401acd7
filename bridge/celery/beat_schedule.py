"""Keeping the table in step with the app's ``beat_schedule`` when beat starts.

Entries are keyed by name. A new entry is inserted; an unchanged one keeps
its ``nextrun`` and counters; a changed one takes the new definition (and a
new first occurrence when its timer, zone, start or end changed); an entry
gone from the configuration is disabled. Rows created through the API or the
CLI are never touched. The entries are checked here, with the app's
configuration; :mod:`bridge.service.sync` writes them.

An entry's policies are under its ``"policies"`` key, with the keywords of
:class:`~bridge.rules.policy.PolicyFields`. ``remaining`` is a countdown that beat
moves, so it is not compared: the entry's value is taken when the entry is
new or another of its fields changes, and a beat restart does not reset it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from celery import Celery

from bridge.celery.schedules import crontab_text, timer_text
from bridge.clock import utcnow
from bridge.errors import ValidationError
from bridge.rules.definition import Definition, build_definition, require_occurrence
from bridge.service.sync import ConfigSync
from bridge.storage.calendars import CalendarStore
from bridge.storage.database import Database

__all__ = ["crontab_text", "entry_definition", "sync_beat_schedule", "timer_text"]

logger = logging.getLogger("bridge.sync")


def entry_definition(
    app: Celery,
    entry: Mapping[str, Any],
    now: datetime,
    known_calendars: Collection[str] | None = None,
) -> tuple[Definition, datetime]:
    """The checked definition of a ``beat_schedule`` entry and its first occurrence after now
    (``known_calendars``, when given: what its ``skip_calendars`` may name)."""
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
        known_calendars=known_calendars,
    )
    return definition, require_occurrence(timer, definition.policies, now, schedule_value)


def sync_beat_schedule(app: Celery, database: Database) -> None:
    """Upsert ``app.conf.beat_schedule`` into ``periodic_task``; see the module docstring."""
    entries: Mapping[str, Mapping[str, Any]] = app.conf.beat_schedule or {}
    now = utcnow()
    checked: dict[str, tuple[Definition, datetime]] = {}
    calendars = CalendarStore(database).names()
    for name, entry in entries.items():
        try:
            checked[name] = entry_definition(app, entry, now, calendars)
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
