"""``bridge import --from``: schedules moved in from django-celery-beat, sqlalchemy-celery-beat
and RedBeat, with their state, and proven to fire when they fired there.

Each source entry becomes a *candidate*: the bridge definition it converts to
(task, timer, zone, arguments, options, policies), the state it carries over
(the last run, the run count, one-offs already done, the description), and
the Celery schedule object the source would fire it by. The next ten fire
times are computed both ways, by that object's own ``remaining_estimate``
(:func:`bridge.celery_schedules.fire_times`) and by the bridge's timer from the
cursor the import gives the row; an entry whose times differ, or whose
definition the bridge cannot hold exactly, is refused with the reason,
unless ``approximate`` is given, and then imported and named in the report.

The cursor is where the source stands: the first occurrence after its last
run (so that nothing fires twice, nor is skipped, at the switch-over), the
source's own first run for an entry that never ran, nothing for a one-off
that has run. Writing goes through the batches of the JSON Lines import
(:class:`bridge.storage.bulk.ScheduleImport`), upserting by name; importing
again is idempotent, and moves a schedule's cursor only forwards, when the
source has run since.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery
from celery.schedules import crontab, schedule, solar

from bridge.celery_schedules import (
    celery_cron_text,
    crontab_text,
    fire_times,
    interval_text,
    solar_text,
    zoned,
)
from bridge.clock import utcnow
from bridge.errors import BridgeError, ValidationError
from bridge.manage.api import Bridge
from bridge.manage.bulk import _COMPARED, _READ, _audit
from bridge.rules.audit import AUDITED_COLUMNS
from bridge.rules.definition import Definition, build_definition, check_labels, check_name
from bridge.rules.edits import FRESH_STATE, retimes
from bridge.rules.kinds import Source
from bridge.rules.timers import Timer, TimerSyntaxError, parse_timer, upcoming
from bridge.storage.bulk import Changes, RowValues, ScheduleImport
from bridge.storage.sources import LAYOUTS, SourceTables

#: The schedulers ``--from`` reads.
SOURCES = (*LAYOUTS, "redbeat")
#: How many fire times are compared, and shown by a dry run.
COMPARED_TIMES = 10
#: RedBeat's own default key prefix (its ``redbeat_key_prefix``).
REDBEAT_PREFIX = "redbeat:"
#: The columns an import reads of an existing row besides those of the JSON Lines import.
_STATE = ("last_run_at", "total_run_count", "description", "source", "note", "next_occurrence")
#: Django's interval periods as ``timedelta`` keywords.
_PERIODS = {"days", "hours", "minutes", "seconds", "microseconds"}


class Refused(BridgeError):
    """An entry the bridge cannot hold as the source has it; the message says why."""


@dataclass
class Candidate:
    """One source entry, converted, with what the comparison found."""

    name: str
    #: What the source calls its schedule (``crontab 30 2 * * * Europe/Berlin``).
    shown: str
    #: The source's key for the entry: a row id, or a Redis key.
    key: Any
    source_enabled: bool
    code_owned: bool = False
    definition: Definition | None = None
    timer: Timer | None = None
    anchor: datetime | None = None
    enabled: bool = True
    note: str | None = None
    #: The first occurrence to fire (None: finished, or nothing to come).
    cursor: datetime | None = None
    last_run_at: datetime | None = None
    total_run_count: int = 0
    description: str | None = None
    remaining: int | None = None
    #: Fire times by the source's Celery schedule, and by the bridge.
    source_times: list[datetime] = field(default_factory=list)
    bridge_times: list[datetime] = field(default_factory=list)
    approximations: list[str] = field(default_factory=list)
    refusal: str | None = None
    #: What the import did: create, update, unchanged (set when planned).
    action: str = ""

    @property
    def differs(self) -> bool:
        return self.source_times != self.bridge_times


@dataclass
class SourceReport:
    """What an import from another scheduler did, or would do when nothing was written."""

    candidates: list[Candidate] = field(default_factory=list)
    written: bool = False
    #: Schedules disabled in the source (``disable_source``).
    disabled: int = 0

    def count(self, action: str) -> int:
        return sum(1 for c in self.candidates if c.refusal is None and c.action == action)

    @property
    def refused(self) -> list[Candidate]:
        return [c for c in self.candidates if c.refusal is not None]

    @property
    def approximated(self) -> list[Candidate]:
        return [c for c in self.candidates if c.refusal is None and c.approximations]

    def summary(self) -> str:
        created, updated = self.count("create"), self.count("update")
        return (
            f"imported {created + updated} (created {created}, updated {updated}), "
            f"unchanged {self.count('unchanged')}, refused {len(self.refused)}, "
            f"approximated {len(self.approximated)}"
        )


@dataclass(frozen=True)
class Context:
    """What converting an entry needs besides the entry."""

    app: Celery
    now: datetime
    #: The zone of the app (RedBeat's crontabs, intervals and solar events are read in it).
    zone: str
    #: The zone of naive times in the source (Django's TIME_ZONE when USE_TZ is off).
    naive_zone: tzinfo
    known_tasks: Any
    code_owned: frozenset[str]
    approximate: bool


# -- reading the sources -------------------------------------------------------------


def _aware(value: Any, context: Context) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=context.naive_zone)
    return value.astimezone(UTC)  # type: ignore[no-any-return]


def _json(text: Any, what: str, default: Any) -> Any:
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except ValueError:
        raise Refused(f"{what}: got {str(text)[:80]!r}, expected JSON") from None


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
    headers = _json(row.get("headers"), "headers", {})
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
        celery_value, text = _crontab(spec, zone, candidate.code_owned, context)
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
    _finish(
        candidate,
        context,
        task=row["task"],
        text=text,
        zone=zone,
        args=_json(row.get("args"), "args", []),
        kwargs=_json(row.get("kwargs"), "kwargs", {}),
        options=options,
        policies=policies,
        celery_value=celery_value,
        base=base,
        first_override=first_override,
        finished="finished: a one-off the source ran or disabled" if finished else None,
        stop=stop,
        single=one_off,
    )


def _crontab(
    spec: Mapping[str, str], zone: str, code_owned: bool, context: Context
) -> tuple[crontab, str]:
    try:
        value = zoned(crontab(app=context.app, **spec), ZoneInfo(zone))
    except (ValueError, TypeError) as exc:
        raise Refused(f"crontab: {exc}") from None
    if code_owned:
        # beat_schedule sync stores the entry this way: the same text keeps it unchanged.
        return value, crontab_text(value)
    written = "celery " + " ".join(
        spec[k] for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    )
    exact = celery_cron_text(value)
    try:
        mine = parse_timer(written, zone)
    except TimerSyntaxError:
        return value, exact
    return value, mine.text if _same_fields(mine, parse_timer(exact, zone)) else exact


def _same_fields(one: Timer, other: Timer) -> bool:
    return getattr(one, "fields", None) == getattr(other, "fields", None)


def _finish(
    candidate: Candidate,
    context: Context,
    *,
    task: Any,
    text: str,
    zone: str,
    args: Any,
    kwargs: Any,
    options: dict[str, Any],
    policies: dict[str, Any],
    celery_value: Any,
    base: datetime,
    first_override: datetime | None,
    finished: str | None,
    stop: Callable[[datetime], bool] | None,
    single: bool,
) -> None:
    """Check the definition as ``add`` would, place the cursor, and compare the fire times."""
    anchor = first_override or base
    definition, timer = build_definition(
        task=task,
        timer=text,
        timezone=zone,
        anchor=anchor,
        args=args,
        kwargs=kwargs,
        options=options,
        policies=policies,
        known_tasks=context.known_tasks,
    )
    candidate.definition, candidate.timer, candidate.anchor = definition, timer, anchor
    candidate.shown = f"{candidate.shown} -> {definition.timer}"
    candidate.enabled = candidate.source_enabled
    if finished is not None:
        candidate.enabled, candidate.note, candidate.remaining = False, finished, 0
        candidate.cursor = None
        _judge(candidate, context)
        return
    end = definition.policies.end
    if first_override is not None:
        candidate.cursor = first_override
    else:
        candidate.cursor = timer.next_after(base)
    if candidate.cursor is not None and end is not None and candidate.cursor > end:
        candidate.cursor = None
    if candidate.cursor is None:
        candidate.enabled, candidate.note = False, "finished: nothing left to fire in the source"
    limit = 1 if single else COMPARED_TIMES
    if candidate.cursor is not None:
        ours = [candidate.cursor, *upcoming(timer, candidate.cursor, limit - 1)]
        candidate.bridge_times = [t for t in ours if end is None or t <= end][:limit]
    if celery_value is not None:
        if first_override is not None:
            theirs = [first_override, *fire_times(celery_value, first_override, limit - 1, stop)]
        else:
            theirs = fire_times(celery_value, base, limit, stop)
    else:
        theirs = [candidate.cursor] if candidate.cursor is not None else []
    candidate.source_times = [t for t in theirs if stop is None or not stop(t)][:limit]
    _judge(candidate, context)


def _judge(candidate: Candidate, context: Context) -> None:
    """Refuse what differs, unless approximations were asked for."""
    if candidate.differs:
        pairs = zip(candidate.source_times, candidate.bridge_times, strict=False)
        first = next(
            (i for i, (theirs, ours) in enumerate(pairs) if theirs != ours),
            min(len(candidate.source_times), len(candidate.bridge_times)),
        )
        candidate.approximations.append(
            f"fire time {first + 1} of the next {COMPARED_TIMES} differs from the source's"
        )
    if candidate.approximations and not context.approximate:
        candidate.refusal = (
            "; ".join(candidate.approximations) + " (import it anyway with --approximate)"
        )


# -- RedBeat ---------------------------------------------------------------------------


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
    from datetime import timezone

    # RedBeat writes an offset in seconds and reads it back as minutes / 60.
    return timezone(timedelta(minutes=seconds / 60))


def redbeat_candidates(
    entries: Iterable[tuple[str, bytes | None, bytes | None, float | None]],
    statics: frozenset[str],
    context: Context,
) -> list[Candidate]:
    """The candidates of RedBeat entries: (key, definition, meta, score) each."""
    found = []
    for key, definition_text, meta_text, _score in entries:
        candidate = Candidate(name=key, shown="redbeat entry", key=key, source_enabled=True)
        try:
            definition = _redbeat_value(_json(definition_text, "definition", None))
            if not isinstance(definition, dict):
                raise Refused("definition: the entry's hash has no definition")
            candidate.name = str(definition.get("name") or key)
            candidate.code_owned = candidate.name in statics
            candidate.source_enabled = bool(definition.get("enabled", True))
            meta = _redbeat_value(_json(meta_text, "meta", {})) or {}
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
        celery_value, text = _crontab(spec, zone, candidate.code_owned, context)
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
    _finish(
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


def read_redbeat(url: str, prefix: str) -> tuple[list[tuple[str, Any, Any, Any]], frozenset[str]]:
    """Every entry of RedBeat's schedule under ``prefix``, and the code-owned names."""
    try:
        import redis
    except ImportError:
        raise BridgeError(
            "--from redbeat needs redis-py: install celery-periodic-bridge[redis]"
        ) from None
    client: Any = redis.Redis.from_url(url)
    try:
        keys = [k.decode() for k in client.zrange(f"{prefix}:schedule", 0, -1)]
        scores = {
            k.decode(): s for k, s in client.zrange(f"{prefix}:schedule", 0, -1, withscores=True)
        }
        statics = frozenset(s.decode() for s in client.smembers(f"{prefix}:statics"))
        entries = []
        for key in sorted(keys):
            definition, meta = client.hmget(key, ["definition", "meta"])
            entries.append((key, definition, meta, scores.get(key)))
    except redis.RedisError as exc:
        raise BridgeError(f"source: {url}: {exc}") from None
    finally:
        client.close()
    return entries, statics


def disable_redbeat(url: str, keys: Sequence[str]) -> None:
    """``enabled: false`` in each entry's definition: RedBeat reads it before every fire."""
    import redis

    client: Any = redis.Redis.from_url(url)
    try:
        for key in keys:
            text = client.hget(key, "definition")
            if not text:
                continue
            definition = json.loads(text)
            definition["enabled"] = False
            client.hset(key, "definition", json.dumps(definition))
    finally:
        client.close()


# -- writing ---------------------------------------------------------------------------


def _label(source: str) -> tuple[str, ...]:
    return check_labels([f"from:{source}"])


def _plan(
    candidates: Sequence[Candidate],
    now: datetime,
    actor: str,
    source: str,
    take_over: bool,
    paused: bool,
    rows: Mapping[str, RowValues],
) -> Changes:
    changes = Changes()
    labels = _label(source)
    for candidate in candidates:
        definition = candidate.definition
        assert definition is not None and candidate.anchor is not None
        row = rows.get(candidate.name)
        enabled = candidate.enabled and not (paused and not take_over)
        if row is None:
            candidate.action = "create"
            values = definition.new_row(
                candidate.name,
                anchor=candidate.anchor,
                first=candidate.cursor,  # type: ignore[arg-type]
                enabled=enabled,
                source=Source.CONFIG if candidate.code_owned else Source.API,
                now=now,
            )
            values.update(
                last_run_at=candidate.last_run_at,
                total_run_count=candidate.total_run_count,
                description=candidate.description,
                note=candidate.note if not enabled else None,
            )
            if candidate.remaining is not None:
                values["remaining"] = candidate.remaining
            if not enabled and candidate.note is None:
                values["note"] = f"imported paused from {source}"
            changes.creates.append({**values, "labels": labels})
            shown = {**dict.fromkeys(AUDITED_COLUMNS), **values}  # what it does not set is unset
            changes.audit.append(_audit(actor, "create", now, candidate.name, None, shown, labels))
            continue
        update = _changes(candidate, row, now, take_over)
        if update is None:
            candidate.action = "unchanged"
            continue
        candidate.action = "update"
        changes.updates.append({"row_id": row["id"], **update})
        changed = {**row, **update}
        changes.audit.append(
            _audit(actor, "edit", now, candidate.name, row, changed, row["labels"])
        )
    return changes


def _changes(
    candidate: Candidate, row: RowValues, now: datetime, take_over: bool
) -> dict[str, Any] | None:
    """What brings an existing row to the candidate: its definition, and its cursor
    moved forward when the source ran since (never back: nothing fires twice).

    An import never pauses a schedule that exists: a source row may be disabled
    because an earlier import took it over. A take-over enables it.
    """
    assert candidate.definition is not None
    columns = candidate.definition.columns()
    wanted = {**columns, "anchor": candidate.anchor}
    update: dict[str, Any] = {
        key: columns[key] for key in _COMPARED if key in columns and row[key] != columns[key]
    }
    if row["description"] != candidate.description:
        update["description"] = candidate.description
    newer = candidate.last_run_at is not None and (
        row["last_run_at"] is None or candidate.last_run_at > row["last_run_at"]
    )
    resume = take_over and candidate.enabled and not row["enabled"]
    if newer or retimes(row, {k: v for k, v in wanted.items() if k != "anchor"}) or resume:
        cursor = candidate.cursor
        if not newer and row["last_run_at"] is not None and candidate.timer is not None:
            # The bridge ran it since: count from its own last run.
            following = candidate.timer.next_after(row["last_run_at"])
            cursor = following if cursor is None or following is None else max(cursor, following)
        if row["next_occurrence"] != cursor:
            update.update(next_occurrence=cursor, nextrun=cursor)
        if newer:
            update.update(
                last_run_at=candidate.last_run_at,
                total_run_count=max(candidate.total_run_count, row["total_run_count"]),
                anchor=candidate.anchor,
            )
    if resume:
        update.update(FRESH_STATE, enabled=True, note=None)
    if not update:
        return None
    update["updated_at"] = now
    return update


def import_from(
    bridge: Bridge,
    source: str,
    url: str,
    *,
    schema: str | None = None,
    prefix: str = REDBEAT_PREFIX,
    source_timezone: str = "UTC",
    approximate: bool = False,
    disable_source: bool = False,
    paused: bool = False,
    allow_unknown_task: bool = False,
    dry_run: bool = False,
) -> SourceReport:
    """Import every schedule of ``source`` at ``url``; see the module docstring."""
    if source not in SOURCES:
        raise ValidationError("from", source, f"one of {', '.join(SOURCES)}")
    app = bridge.app if bridge.app is not None else Celery("bridge-import", set_as_current=False)
    beat_schedule = app.conf.beat_schedule or {}
    context = Context(
        app=app,
        now=utcnow(),
        zone=bridge.default_timezone(),
        naive_zone=ZoneInfo(source_timezone),
        known_tasks=None if allow_unknown_task else bridge.known_tasks(),
        code_owned=frozenset([*beat_schedule, "celery.backend_cleanup"]),
        approximate=approximate,
    )
    tables: SourceTables | None = None
    if source == "redbeat":
        entries, statics = read_redbeat(url, prefix)
        context = replace(context, code_owned=statics)
        candidates = redbeat_candidates(entries, statics, context)
    else:
        tables = SourceTables(source, url, schema)
        try:
            candidates = sql_candidates(tables.rows(), context)
        except BaseException:
            tables.close()
            raise
    report = SourceReport(candidates)
    try:
        for candidate in candidates:
            if candidate.refusal is None:
                try:
                    check_name(candidate.name)
                except ValidationError as exc:
                    candidate.refusal = str(exc)
        accepted = [c for c in candidates if c.refusal is None]
        if accepted:
            writer = ScheduleImport(bridge.database, (*_READ, *_STATE), False)

            def plan(rows: Mapping[str, RowValues]) -> Changes:
                return _plan(
                    accepted, context.now, bridge.actor, source, disable_source, paused, rows
                )

            writer.batch([c.name for c in accepted], plan, write=not dry_run)
        report.written = not dry_run
        if disable_source and not dry_run:
            taken = [c.key for c in accepted if c.source_enabled]
            report.disabled = len(taken)
            if source == "redbeat":
                disable_redbeat(url, taken)
            elif tables is not None:
                tables.disable(taken, context.now)
    finally:
        if tables is not None:
            tables.close()
    return report


__all__ = ["SOURCES", "Candidate", "SourceReport", "import_from"]
