"""RedBeat's entries, converted.

:mod:`bridge.redbeat_store` reads the entries as RedBeat stores them; here
their JSON is decoded the way RedBeat decodes it (its ``__type__`` objects:
datetimes and schedules), without RedBeat, and each becomes a candidate:
its interval or crontab, read in the app's zone, its options, and its last
run. RedBeat's rrule schedules have no bridge timer and are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import schedule

from bridge.celery.schedules import interval_text
from bridge.errors import BridgeError, ValidationError
from bridge.manage.importers.candidates import (
    Candidate,
    Context,
    Refused,
    celery_crontab,
    finish,
    parse_json,
)
from bridge.redbeat_store import StoredEntry
from bridge.rules.timers import TimerSyntaxError


def _redbeat_value(value: Any) -> Any:
    """RedBeat's JSON objects (``__type__``) decoded without RedBeat: datetimes, schedules."""
    if isinstance(value, list):
        return [_redbeat_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    decoded = {key: _redbeat_value(item) for key, item in value.items()}
    kind = decoded.get("__type__")
    if kind == "datetime":
        zone = decoded.get("timezone", "UTC")
        tz: tzinfo = ZoneInfo(zone) if isinstance(zone, str) else _offset(float(zone))
        parts = {k: int(decoded[k]) for k in ("year", "month", "day", "hour", "minute", "second")}
        return datetime(**parts, microsecond=int(decoded.get("microsecond", 0)), tzinfo=tz)
    return decoded


def _offset(seconds: float) -> tzinfo:
    # RedBeat writes an offset in seconds and reads it back as minutes / 60.
    return timezone(timedelta(minutes=seconds / 60))


def redbeat_candidates(
    entries: Iterable[StoredEntry],
    statics: frozenset[str],
    context: Context,
) -> list[Candidate]:
    """The candidates of RedBeat's entries."""
    found = []
    for key, definition_text, meta_text, _score in entries:
        candidate = Candidate(name=key, shown="redbeat entry", key=key, source_enabled=True)
        try:
            definition = _redbeat_value(parse_json(definition_text, "definition", None))
            if not isinstance(definition, dict):
                raise Refused("definition: the entry's hash has no definition")
            candidate.name = str(definition.get("name") or key)
            candidate.code_owned = candidate.name in statics
            candidate.source_enabled = bool(definition.get("enabled", True))
            meta = _redbeat_value(parse_json(meta_text, "meta", {})) or {}
            _convert_redbeat(candidate, definition, meta, context)
        except (Refused, ValidationError, TimerSyntaxError, ValueError, TypeError, KeyError) as exc:
            candidate.refusal = str(exc) if isinstance(exc, BridgeError) else f"definition: {exc}"
        found.append(candidate)
    return found


def _convert_redbeat(
    candidate: Candidate, definition: dict[str, Any], meta: dict[str, Any], context: Context
) -> None:
    value: dict[str, Any] = definition.get("schedule") or {}
    if not isinstance(value, dict):
        raise Refused("schedule: expected a RedBeat schedule object")
    kind = value.get("__type__")
    zone = context.zone
    celery_value: Any
    if kind == "interval":
        every = timedelta(seconds=float(value["every"]))
        candidate.shown = f"interval every {value['every']}s"
        if value.get("relative"):
            candidate.approximations.append(
                "relative=True rounds each run to the interval's unit; the bridge keeps the rate"
            )
        celery_value = schedule(every, app=context.app)
        text = interval_text(every, value["every"])
    elif kind == "crontab":
        spec = {
            k: str(value.get(k, "*"))
            for k in ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
        }
        candidate.shown = "crontab " + " ".join(
            spec[k] for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        )
        celery_value, text = celery_crontab(spec, zone, candidate.code_owned, context)
    elif kind == "rrule":
        candidate.shown = f"rrule freq={value.get('freq')}"
        raise Refused(
            "schedule: RedBeat's rrule (FREQ, INTERVAL, BY... rules of RFC 5545) has no bridge "
            "timer; re-create it as a cron, interval or one-shot timer"
        )
    else:
        raise Refused(f"schedule: unknown RedBeat schedule {kind!r}")
    options = definition.get("options") or {}
    if not isinstance(options, dict):
        raise Refused("options: expected a JSON object")
    options = dict(options)
    if isinstance(options.get("expires"), datetime):
        end = options.pop("expires")
        candidate.approximations.append(
            f"options.expires {end.isoformat()}: messages sent before it no longer expire then"
        )
    last = meta.get("last_run_at")
    candidate.last_run_at = last.astimezone(UTC) if isinstance(last, datetime) else None
    candidate.total_run_count = int(meta.get("total_run_count") or 0)
    # RedBeat fires an entry that never ran at once (it counts from the year 1).
    never_ran = candidate.last_run_at is None
    finish(
        candidate,
        context,
        task=definition.get("task"),
        text=text,
        zone=zone,
        args=definition.get("args") or [],
        kwargs=definition.get("kwargs") or {},
        options=options,
        policies={"expires": "never"},
        celery_value=celery_value,
        base=candidate.last_run_at or context.now,
        first_override=context.now if never_ran else None,
        finished=None,
        stop=None,
        single=False,
    )
