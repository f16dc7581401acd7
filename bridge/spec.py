"""Validation of a schedule's definition, shared by the API, the CLI and ``beat_schedule`` sync.

Every check raises :class:`~bridge.errors.ValidationError` naming the field,
the value given and what is expected, before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .dispatch import check_options
from .errors import ValidationError
from .policy import Overlap
from .timers import Timer, TimerSyntaxError, UnknownTimezone, load_zone, parse_timer

NAME_MAX = 200


def dumps(value: Any) -> str:
    """The stored JSON form: stable, so that equal definitions compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def parse_json(field: str, value: Any, kind: type, expected: str) -> Any:
    """Accept a JSON text or an already-decoded value of ``kind``.

    A refusal repeats the value as the user gave it (the text, not its decoding).
    """
    given = value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValidationError(field, given, expected) from None
    if isinstance(value, tuple) and kind is list:
        value = list(value)
    if not isinstance(value, kind):
        raise ValidationError(field, given, expected)
    try:
        dumps(value)
    except (TypeError, ValueError):
        raise ValidationError(field, given, f"{expected} of JSON-serialisable values") from None
    return value


def check_keywords(kwargs: dict[Any, Any]) -> dict[str, Any]:
    """Keyword arguments need text keys; JSON would silently turn 1 into "1"."""
    for key in kwargs:
        if not isinstance(key, str):
            raise ValidationError("kwargs", kwargs, "a JSON object with text keys")
    return kwargs


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        raise ValidationError("name", name, f"a non-empty text of at most {NAME_MAX} characters")
    return name


def check_timezone(zone: Any) -> str:
    try:
        return load_zone(zone).key
    except (UnknownTimezone, TypeError):
        raise ValidationError(
            "timezone", zone, "an IANA time zone such as 'Europe/Paris'"
        ) from None


def check_timer(text: Any, zone: str, anchor: datetime) -> Timer:
    if not isinstance(text, str):
        raise ValidationError("timer", text, "a timer text")
    try:
        return parse_timer(text, zone, anchor)
    except TimerSyntaxError as exc:
        raise ValidationError("timer", text, f"{exc.expected} ({exc.problem})") from None


def check_task(task: Any, known: Collection[str] | None) -> str:
    """``known`` is the app's registered task names, or None to accept any name."""
    if not isinstance(task, str) or not task.strip():
        raise ValidationError("task", task, "a Celery task name")
    if known is not None and task not in known:
        raise ValidationError(
            "task",
            task,
            "a task registered in the app (allow one that only the workers import "
            "with --allow-unknown-task / allow_unknown_task=True)",
        )
    return task


def check_overlap(value: Any) -> str:
    try:
        return Overlap(value).value
    except ValueError:
        choices = "|".join(o.value for o in Overlap)
        raise ValidationError("overlap", value, f"one of {choices}") from None


@dataclass(frozen=True)
class Definition:
    """What a schedule runs and when, in its stored (normalised) form."""

    task: str
    timer: str
    timezone: str
    args: str
    kwargs: str
    options: str
    overlap: str

    def new_row(
        self,
        name: str,
        *,
        anchor: datetime,
        nextrun: datetime | None,
        enabled: bool,
        source: str,
        now: datetime,
    ) -> dict[str, Any]:
        """The ``periodic_task`` values of a new schedule with this definition."""
        return {
            "name": name,
            **self.columns(),
            "anchor": anchor,
            "enabled": enabled,
            "nextrun": nextrun,
            "source": source,
            "broken": False,
            "created_at": now,
            "updated_at": now,
            "total_run_count": 0,
            "skipped_count": 0,
            "missed_count": 0,
        }

    def columns(self) -> dict[str, str]:
        return {
            "task": self.task,
            "timer": self.timer,
            "timezone": self.timezone,
            "args": self.args,
            "kwargs": self.kwargs,
            "options": self.options,
            "overlap": self.overlap,
        }


def first_occurrence(definition: Definition, anchor: datetime, now: datetime) -> datetime | None:
    """The first occurrence of a definition strictly after ``now``."""
    return parse_timer(definition.timer, definition.timezone, anchor).next_after(now)


def build_definition(
    *,
    task: Any,
    timer: Any,
    timezone: Any,
    anchor: datetime,
    args: Any = (),
    kwargs: Any = None,
    options: Mapping[str, Any] | str | None = None,
    overlap: Any = Overlap.SKIP.value,
    known_tasks: Collection[str] | None = None,
) -> tuple[Definition, Timer]:
    """Check every field and return the normalised definition with its parsed timer."""
    zone = check_timezone(timezone)
    parsed = check_timer(timer, zone, anchor)
    definition = Definition(
        task=check_task(task, known_tasks),
        timer=parsed.text,
        timezone=zone,
        args=dumps(
            parse_json("args", list(args) if isinstance(args, tuple) else args, list, "a JSON list")
        ),
        kwargs=dumps(
            check_keywords(
                parse_json("kwargs", {} if kwargs is None else kwargs, dict, "a JSON object")
            )
        ),
        options=dumps(check_options(parse_json("options", options or {}, dict, "a JSON object"))),
        overlap=check_overlap(overlap),
    )
    return definition, parsed
