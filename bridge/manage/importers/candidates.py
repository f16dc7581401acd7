"""What an entry of another scheduler becomes, and how it is judged.

Each source entry becomes a :class:`Candidate`: the bridge definition it
converts to, the state it carries over, and the fire times of the Celery
schedule the source fires it by, beside the bridge timer's. The converters
of each source (:mod:`.tables`, :mod:`.redbeat`) read the entry;
:func:`finish` then checks the definition as ``add`` would, places the
cursor and compares the next fire times, refusing an entry whose times
differ, or whose definition the bridge cannot hold exactly, unless
approximations were asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery
from celery.schedules import crontab

from bridge.celery.schedules import celery_cron_text, crontab_text, fire_times, zoned
from bridge.errors import BridgeError
from bridge.rules.decisions import NOTE_SOURCE_SPENT
from bridge.rules.definition import Definition, build_definition
from bridge.rules.timers import Timer, TimerSyntaxError, parse_timer, upcoming

#: How many fire times are compared, and shown by a dry run.
COMPARED_TIMES = 10


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


def parse_json(text: Any, what: str, default: Any) -> Any:
    """A JSON field of an entry; refused, naming ``what``, when it is not JSON."""
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Refused(f"{what}: got {str(text)[:80]!r}, expected JSON") from None


def celery_crontab(
    spec: Mapping[str, str], zone: str, code_owned: bool, context: Context
) -> tuple[crontab, str]:
    """Celery's crontab of ``spec`` in ``zone``, and the timer text that fires as it does:
    the ``celery ...`` text it was written as where that reads the same, else Celery's own."""
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


def finish(
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
        candidate.enabled, candidate.note = False, NOTE_SOURCE_SPENT
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
