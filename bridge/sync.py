"""Keeping the table in step with the app's ``beat_schedule`` when beat starts.

Entries are keyed by name. A new entry is inserted; an unchanged one keeps
its ``nextrun`` and counters; a changed one takes the new definition; an
entry gone from the configuration is disabled. Rows created through the API
or the CLI are never touched. Every statement is a compare-and-set, so several
beats starting at once converge on the same table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule
from sqlalchemy import and_, not_, select, update

from .config import Settings
from .database import Database
from .errors import ValidationError
from .models import PeriodicTask, Source, utcnow
from .spec import Definition, build_definition, first_occurrence
from .store import upsert_insert
from .timers import format_duration

logger = logging.getLogger("bridge.sync")

#: The note on a config row whose entry left ``beat_schedule``.
REMOVED_NOTE = "disabled: removed from beat_schedule"


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


def entry_definition(app: Celery, entry: Mapping[str, Any], now: datetime) -> Definition:
    definition, _timer = build_definition(
        task=entry.get("task"),
        timer=timer_text(entry.get("schedule")),
        timezone=app.conf.timezone or "UTC",
        anchor=now,
        args=entry.get("args") or [],
        kwargs=entry.get("kwargs") or {},
        options=entry.get("options") or {},
    )
    return definition


def sync_beat_schedule(app: Celery, database: Database, settings: Settings) -> None:
    """Upsert ``app.conf.beat_schedule`` into ``periodic_task``; see the module docstring."""
    entries: Mapping[str, Mapping[str, Any]] = app.conf.beat_schedule or {}
    now = utcnow()
    definitions: dict[str, Definition] = {}
    for name, entry in entries.items():
        try:
            definitions[name] = entry_definition(app, entry, now)
        except Exception as exc:  # one malformed entry must not stop the others
            logger.error("bridge: beat_schedule entry %r refused: %s", name, exc)

    with database.session() as session:
        owners = dict(
            session.execute(
                select(PeriodicTask.name, PeriodicTask.source).where(
                    PeriodicTask.name.in_(list(definitions))
                )
            ).all()
        )
        for name, definition in definitions.items():
            if owners.get(name, Source.CONFIG) != Source.CONFIG:
                logger.warning(
                    "bridge: beat_schedule entry %r left alone: a schedule of that name "
                    "was created through the API or CLI",
                    name,
                )
                continue
            nextrun = first_occurrence(definition, now, now)
            if nextrun is None:
                logger.error("bridge: beat_schedule entry %r refused: no future occurrence", name)
                continue
            columns = definition.columns()
            session.execute(
                upsert_insert(session, PeriodicTask)
                .values(
                    definition.new_row(
                        name,
                        anchor=now,
                        nextrun=nextrun,
                        enabled=True,
                        source=Source.CONFIG,
                        now=now,
                    )
                )
                .on_conflict_do_nothing(index_elements=["name"])
            )
            unchanged = and_(
                *(getattr(PeriodicTask, key) == value for key, value in columns.items())
            )
            changed = session.execute(
                update(PeriodicTask)
                .where(
                    PeriodicTask.name == name,
                    PeriodicTask.source == Source.CONFIG.value,
                    not_(unchanged),
                )
                .values(
                    **columns, anchor=now, nextrun=nextrun, enabled=True, note=None, updated_at=now
                )
                .execution_options(synchronize_session=False)
            )
            if changed.rowcount:  # type: ignore[attr-defined]
                logger.info("bridge: beat_schedule entry %r changed; definition updated", name)
            session.execute(
                update(PeriodicTask)
                .where(PeriodicTask.name == name, PeriodicTask.note == REMOVED_NOTE)
                .values(enabled=True, note=None, nextrun=nextrun, updated_at=now)
                .execution_options(synchronize_session=False)
            )
        removed = session.execute(
            update(PeriodicTask)
            .where(
                PeriodicTask.source == Source.CONFIG.value,
                PeriodicTask.enabled,
                PeriodicTask.name.not_in(list(entries)),
            )
            .values(enabled=False, note=REMOVED_NOTE, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        count = removed.rowcount  # type: ignore[attr-defined]
        if count:
            logger.info("bridge: disabled %d schedule(s) removed from beat_schedule", count)
