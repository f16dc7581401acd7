"""The rows of django-celery-beat and sqlalchemy-celery-beat, converted.

:class:`bridge.storage.sources.SourceTables` reads either scheduler's tables
into the same rows: the task row, with its schedule's row and kind. Each
becomes a candidate here: Django's interval, crontab, solar and clocked
schedules, its options and headers, its start and expiry, and its one-offs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from celery.schedules import schedule, solar

from bridge.celery.schedules import interval_text, solar_text
from bridge.errors import ValidationError
from bridge.manage.importers.candidates import (
    Candidate,
    Context,
    Refused,
    celery_crontab,
    finish,
    parse_json,
)
from bridge.rules.decisions import NOTE_SOURCE_RAN
from bridge.rules.timers import TimerSyntaxError

#: Django's interval periods as ``timedelta`` keywords.
_PERIODS = {"days", "hours", "minutes", "seconds", "microseconds"}


def _aware(value: Any, context: Context) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=context.naive_zone)
    return value.astimezone(UTC)  # type: ignore[no-any-return]


def sql_candidates(rows: Iterable[Mapping[str, Any]], context: Context) -> list[Candidate]:
    """The candidates of django-celery-beat's or sqlalchemy-celery-beat's rows."""
    found = []
    for row in rows:
        name = str(row["name"])
        candidate = Candidate(
            name=name,
            shown=str(row.get("kind") or "no schedule"),
            key=row["id"],
            source_enabled=bool(row["enabled"]),
            code_owned=name in context.code_owned,
        )
        try:
            _convert_sql(candidate, row, context)
        except (Refused, ValidationError, TimerSyntaxError) as exc:
            candidate.refusal = str(exc)
        found.append(candidate)
    return found


def _convert_sql(candidate: Candidate, row: Mapping[str, Any], context: Context) -> None:
    kind, values = row.get("kind"), row.get("schedule")
    if kind is None or values is None:
        raise Refused("schedule: the row names no interval, crontab, solar or clocked schedule")
    options: dict[str, Any] = {}
    for key in ("queue", "exchange", "routing_key"):
        if row.get(key):
            options[key] = row[key]
    if row.get("priority") is not None:
        options["priority"] = row["priority"]
    headers = parse_json(row.get("headers"), "headers", {})
    if headers:
        options["headers"] = headers
    policies: dict[str, Any] = {"expires": "never"}
    expires = _aware(row.get("expires"), context)
    if expires is not None:
        policies["end"] = expires
        candidate.approximations.append(
            f"expires {expires.isoformat()} ends the schedule; its messages no longer expire "
            "at that instant (the bridge's message expiry counts from each send)"
        )
    elif row.get("expire_seconds"):
        policies["expires"] = f"{int(row['expire_seconds'])}s"
    start = _aware(row.get("start_time"), context)
    if start is not None:
        policies["start"] = start
    last = _aware(row.get("last_run_at"), context)
    changed = _aware(row.get("date_changed"), context)
    one_off = bool(row.get("one_off"))
    candidate.last_run_at = last
    candidate.total_run_count = int(row.get("total_run_count") or 0)
    candidate.description = row.get("description") or None
    zone = context.zone
    stop = None if expires is None else (lambda moment: moment >= expires)
    never_ran = last is None
    # django-celery-beat: a row that never ran counts from its last change; with a
    # start time it is due at once from then on (its last run is put 30 years back).
    base = last or changed or context.now
    first_override = start if never_ran and start is not None else None
    celery_value: Any = None
    if kind == "interval":
        period = str(values["period"])
        if period not in _PERIODS:
            raise Refused(f"period: got {period!r}, expected one of {', '.join(sorted(_PERIODS))}")
        every = timedelta(**{period: int(values["every"])})
        candidate.shown = f"interval every {values['every']} {period}"
        text = interval_text(every, every)
        celery_value = schedule(every, app=context.app)
    elif kind == "crontab":
        zone = str(values.get("timezone") or "UTC")
        spec = {k: str(values[k]) for k in ("minute", "hour", "day_of_week", "day_of_month")}
        spec["month_of_year"] = str(values["month_of_year"])
        candidate.shown = "crontab " + " ".join(
            spec[k] for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        )
        candidate.shown += f" {zone}"
        celery_value, text = celery_crontab(spec, zone, candidate.code_owned, context)
    elif kind == "solar":
        candidate.shown = f"solar {values['event']} {values['latitude']} {values['longitude']}"
        try:
            celery_value = solar(
                str(values["event"]),
                Decimal(str(values["latitude"])),
                Decimal(str(values["longitude"])),
                app=context.app,
            )
        except Exception as exc:  # Celery's own refusals, or ephem missing
            raise Refused(f"solar: {exc}") from None
        text = solar_text(celery_value)
    elif kind == "clocked":
        when = _aware(values["clocked_time"], context)
        assert when is not None
        candidate.shown = f"clocked {when.isoformat()}"
        if not one_off:
            raise Refused(
                "clocked: a clocked schedule that is not one-off fires at every beat tick "
                "after its time; nothing else fires like that"
            )
        text = f"at {when.isoformat()}"
        first_override = when
    else:
        raise Refused(f"schedule: unknown kind {kind!r}")
    # django-celery-beat disables a one-off after its run and, saving a disabled row,
    # forgets its last run: a disabled one-off may have run or not. Either way it stays
    # disabled here, as it is there.
    finished = one_off and (not candidate.source_enabled or candidate.total_run_count > 0)
    if one_off and kind != "clocked":
        policies["remaining"] = 1
    finish(
        candidate,
        context,
        task=row["task"],
        text=text,
        zone=zone,
        args=parse_json(row.get("args"), "args", []),
        kwargs=parse_json(row.get("kwargs"), "kwargs", {}),
        options=options,
        policies=policies,
        celery_value=celery_value,
        base=base,
        first_override=first_override,
        finished=NOTE_SOURCE_RAN if finished else None,
        stop=stop,
        single=one_off,
    )
