"""Validation of a schedule's definition, shared by the API, the CLI and ``beat_schedule`` sync.

Every check raises :class:`~bridge.errors.ValidationError` naming the field,
the value given and what is expected, before anything is written.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bridge.errors import ValidationError
from bridge.rules.calendars import require_known
from bridge.rules.canvas import Canvas, parse_canvas
from bridge.rules.decisions import within_bounds
from bridge.rules.options import QUEUE_EXPECTED, check_written_options, is_queue_name
from bridge.rules.policy import Policies
from bridge.rules.timers import Timer, TimerSyntaxError, UnknownTimezone, load_zone, parse_timer
from bridge.rules.values import CLEAN_TEXT, clean_text, dumps, json_input, json_value, text_problem

NAME_MAX = 200
#: How a refusal says that text must be clean (see :func:`~bridge.rules.values.text_problem`).
_CLEAN = CLEAN_TEXT.replace("text ", "", 1)
#: The size of the ``task`` and ``timer`` columns.
TEXT_MAX = 200


def check_keywords(kwargs: dict[Any, Any]) -> dict[str, Any]:
    """Keyword arguments need text keys; JSON would silently turn 1 into "1"."""
    for key in kwargs:
        if not isinstance(key, str):
            raise ValidationError("kwargs", kwargs, "a JSON object with text keys")
    return kwargs


#: Words a name may not end with after a ``/``, nor be: the HTTP API and the dashboard
#: address a schedule as ``/schedules/<name>`` and its views and actions as
#: ``/schedules/<name>/<word>``, so ``report/runs`` would be the runs of ``report``.
RESERVED_SEGMENTS = frozenset(
    {"next", "runs", "stats", "audit", "pause", "resume", "run", "backfill", "silence"}
    | {"edit", "delete"}
)


def check_name(name: Any) -> str:
    """A name a table row, a log line, a shell argument and a URL show as it is.

    No control characters (a newline would break ``ls`` and every log line),
    no spaces around it (``show 'padded '`` would find nothing after the
    shell or a copy and paste dropped them), no last ``/``-separated part
    that the HTTP paths use for a schedule's views and actions, and no part
    that is empty, ``.`` or ``..``: clients, browsers and proxies tidy those
    out of a URL's path, so ``/schedules/evil/../victim`` would reach
    ``victim``, and a name with an empty part would not be reached at all.
    """
    if (
        not isinstance(name, str)
        or not name.strip()
        or name != name.strip()
        or len(name) > NAME_MAX
        or any(unicodedata.category(char) in _UNPRINTABLE for char in name)
    ):
        raise ValidationError(
            "name",
            name,
            f"a text of 1 to {NAME_MAX} characters, without control characters "
            "or spaces at either end",
        )
    if any(part in _PATH_STEPS for part in name.split("/")):
        raise ValidationError(
            "name", name, "a name whose '/'-separated parts are none of them empty, '.' or '..'"
        )
    if name.rsplit("/", 1)[-1] in RESERVED_SEGMENTS:
        words = ", ".join(sorted(RESERVED_SEGMENTS))
        raise ValidationError(
            "name", name, f"a name that is not, and does not end with '/', one of: {words}"
        )
    return name


#: Parts of a URL's path that clients resolve or drop (see :func:`check_name`).
_PATH_STEPS = frozenset({"", ".", ".."})

#: Unicode categories a name may not hold: controls, format marks, surrogates,
#: unassigned code points and line or paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


#: The most labels one schedule carries, and the longest label.
LABELS_MAX = 20
LABEL_MAX = 64
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/=-]*")
LABELS_EXPECTED = (
    f"up to {LABELS_MAX} labels of 1 to {LABEL_MAX} letters, digits or _.:/=- "
    "(starting with a letter or digit), as a list or separated by commas"
)


def check_labels(value: Any) -> tuple[str, ...]:
    """Labels as stored: unique, sorted, each a short word that a URL, a shell and a
    Prometheus label value carry as it is. A list, or one text separated by commas."""
    given = value
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValidationError("labels", given, LABELS_EXPECTED)
    labels = set()
    for label in value:
        if not isinstance(label, str) or len(label) > LABEL_MAX or not _LABEL.fullmatch(label):
            raise ValidationError("labels", given, LABELS_EXPECTED)
        labels.add(label)
    if len(labels) > LABELS_MAX:
        raise ValidationError("labels", given, LABELS_EXPECTED)
    return tuple(sorted(labels))


#: The longest note a pause, a cancel or a silence keeps.
NOTE_MAX = 1000


def check_note(value: Any, field: str = "note") -> str | None:
    """A note said why (a pause, a cancel): text of up to :data:`NOTE_MAX` characters, or
    None. Line breaks are kept; other control characters are refused."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) > NOTE_MAX
        or text_problem(value) is not None
        or any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in value)
    ):
        raise ValidationError(
            field,
            value,
            f"a text of at most {NOTE_MAX} characters, without control characters "
            "or lone UTF-16 surrogates",
        )
    return value or None


def check_label(value: Any) -> str:
    """One label, as a filter or a bulk change names it."""
    if not isinstance(value, str) or len(value) > LABEL_MAX or not _LABEL.fullmatch(value):
        raise ValidationError(
            "label", value, f"one label of 1 to {LABEL_MAX} letters, digits or _.:/=-"
        )
    return value


ZONE_EXPECTED = (
    "an IANA time zone such as 'Europe/Paris' (not localtime, Factory, or a posix/ or right/ copy)"
)
#: Names the zone database answers that are no zone a schedule can keep: the machine's
#: own zone (which changes with the machine), a placeholder with no offset, and the rules
#: file of POSIX TZ strings; compared in lower case.
_NOT_ZONES = frozenset({"localtime", "factory", "posixrules"})
#: The database's copies of every zone: ``posix/`` the same ones, ``right/`` counting leap
#: seconds, which no clock the bridge reads does.
_NOT_ZONE_DIRS = ("posix/", "right/")


def check_timezone(zone: Any) -> str:
    """The zone a definition names, as the database keys it: an IANA zone, not an alias of
    the machine's zone nor one of the database's copies (the empty text is no zone either:
    a definition that names none gets the default before it is checked)."""
    name = stored_timezone(zone)
    if name.lower() in _NOT_ZONES or name.lower().startswith(_NOT_ZONE_DIRS):
        raise ValidationError("timezone", zone, ZONE_EXPECTED)
    return name


def stored_timezone(zone: Any) -> str:
    """The zone of a stored row, read as any name the zone database answers: a row an
    older release accepted (``localtime``, say) still fires; only a new definition is held
    to :func:`check_timezone`."""
    clean_text("timezone", zone, ZONE_EXPECTED)
    try:
        return load_zone(zone).key
    except (UnknownTimezone, TypeError):
        raise ValidationError("timezone", zone, ZONE_EXPECTED) from None


def check_timer(text: Any, zone: str, anchor: datetime) -> Timer:
    if not isinstance(text, str) or len(text) > TEXT_MAX or text_problem(text) is not None:
        raise ValidationError(
            "timer", text, f"a timer text of at most {TEXT_MAX} characters, {_CLEAN}"
        )
    try:
        return _parsed(text, zone, anchor)
    except TimerSyntaxError as exc:
        raise ValidationError("timer", text, f"{exc.expected} ({exc.problem})") from None


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, zone: str, anchor: datetime) -> Timer:
    """Timers are immutable, and beat reads the same few texts for many rows at every fire."""
    return parse_timer(text, zone, anchor)


def check_task(task: Any, known: Collection[str] | None) -> str:
    """``known`` is the app's registered task names, or None to accept any name."""
    if (
        not isinstance(task, str)
        or not task.strip()
        or len(task) > TEXT_MAX
        or text_problem(task) is not None
    ):
        raise ValidationError(
            "task", task, f"a Celery task name of at most {TEXT_MAX} characters, {_CLEAN}"
        )
    if known is not None and task not in known:
        raise ValidationError(
            "task",
            task,
            "a task registered in the app (allow one that only the workers import "
            "with --allow-unknown-task / allow_unknown_task=True)",
        )
    return task


@dataclass(frozen=True)
class Definition:
    """What a schedule runs and when, in its stored (normalised) form."""

    task: str
    timer: str
    timezone: str
    args: str
    kwargs: str
    options: str
    policies: Policies
    #: A canvas it sends instead of one task (its stored form; None: the task alone).
    signature: str | None = None

    def new_row(
        self,
        name: str,
        *,
        anchor: datetime,
        first: datetime,
        enabled: bool,
        source: str,
        now: datetime,
    ) -> dict[str, Any]:
        """The ``periodic_task`` values of a new schedule whose first occurrence is ``first``.

        Beat first acts on the row at that occurrence, so ``nextrun`` starts
        equal to ``next_occurrence``; jitter and retries move it later.
        """
        return {
            "name": name,
            **self.columns(),
            "anchor": anchor,
            "enabled": enabled,
            "next_occurrence": first,
            "nextrun": first,
            "source": source,
            "broken": False,
            "created_at": now,
            "updated_at": now,
            "total_run_count": 0,
            "skipped_count": 0,
            "missed_count": 0,
            "excluded_count": 0,
            "expired_count": 0,
            "failure_streak": 0,
            "success_streak": 0,
        }

    def columns(self) -> dict[str, Any]:
        """The ``periodic_task`` columns this definition sets, policies included."""
        return {
            "task": self.task,
            "timer": self.timer,
            "timezone": self.timezone,
            "args": self.args,
            "kwargs": self.kwargs,
            "options": self.options,
            "signature": self.signature,
            **self.policies.columns(),
        }


def next_in_bounds(timer: Timer, policies: Policies, after: datetime) -> datetime | None:
    """The first occurrence strictly after ``after`` that lies within the start/end bounds.

    Occurrences before ``start`` are not the schedule's, so the search starts
    at ``start`` when that is later; None when the timer has no such
    occurrence or it falls after ``end``.
    """
    return within_bounds(timer, policies, timer.next_after(after))


def require_occurrence(timer: Timer, policies: Policies, now: datetime, given: Any) -> datetime:
    """:func:`next_in_bounds` after ``now``, or a refusal naming what leaves no occurrence.

    ``given`` is the timer as the user wrote it, repeated when the timer itself
    has no future occurrence; otherwise the start or end bound is to blame.
    """
    occurrence = next_in_bounds(timer, policies, now)
    if occurrence is not None:
        return occurrence
    unbounded = next_in_bounds(timer, replace(policies, end=None), now)
    if unbounded is not None and policies.end is not None:
        raise ValidationError(
            "end",
            policies.end.isoformat(),
            f"a time at or after the schedule's first occurrence ({unbounded.isoformat()})",
        )
    if policies.start is not None and timer.next_after(now) is not None:
        raise ValidationError(
            "start", policies.start.isoformat(), "a time no later than the timer's last occurrence"
        )
    raise ValidationError("timer", given, "a timer with an occurrence in the future")


def build_definition(
    *,
    task: Any,
    timer: Any,
    timezone: Any,
    anchor: datetime,
    args: Any = (),
    kwargs: Any = None,
    options: Mapping[str, Any] | str | None = None,
    policies: Mapping[str, Any] | None = None,
    base: Policies | None = None,
    known_tasks: Collection[str] | None = None,
    known_calendars: Collection[str] | None = None,
    signature: Any = None,
) -> tuple[Definition, Timer]:
    """Check every field and return the normalised definition with its parsed timer.

    ``policies`` are the policy keywords given (see :class:`~bridge.rules.policy.PolicyFields`),
    applied on top of ``base`` (a new schedule's defaults when None). ``known_tasks`` and
    ``known_calendars``, when given, are what the task and ``skip_calendars`` may name.

    A ``signature`` (a canvas in Celery's JSON form) is sent instead of the task: the
    task is then its first task's name, and ``args`` and ``kwargs`` must be empty (each
    of its tasks carries its own); ``options`` are defaults for each of its tasks.
    """
    zone = check_timezone(timezone)
    parsed = check_timer(timer, zone, anchor)
    canvas = None if signature is None else check_canvas(signature, known_tasks)
    if canvas is not None:
        task = _canvas_task(task, canvas)
        for field, given in (("args", args), ("kwargs", kwargs)):
            if given not in (None, (), [], {}, "[]", "{}", ""):
                raise ValidationError(
                    field, given, "none with a signature: each of its tasks carries its own"
                )
    definition = Definition(
        task=check_task(task, known_tasks),
        signature=None if canvas is None else canvas.text,
        timer=parsed.text,
        timezone=zone,
        args=dumps(
            json_input("args", list(args) if isinstance(args, tuple) else args, list, "a JSON list")
        ),
        kwargs=dumps(
            check_keywords(
                json_input("kwargs", {} if kwargs is None else kwargs, dict, "a JSON object")
            )
        ),
        options=dumps(
            check_written_options(json_input("options", options or {}, dict, "a JSON object"))
        ),
        policies=Policies.build(policies or {}, base),
    )
    if known_calendars is not None:
        require_known(definition.policies.skip_calendars, known_calendars)
    return definition, parsed


def check_canvas(value: Any, known: Collection[str] | None) -> Canvas:
    """A canvas checked (:func:`~bridge.rules.canvas.parse_canvas`), each of its tasks one
    registered in the app when ``known`` is given."""
    canvas = parse_canvas(value)
    if known is not None:
        for name in canvas.tasks:
            if name not in known:
                raise ValidationError(
                    "signature",
                    name,
                    "a canvas whose every task is registered in the app (allow one that "
                    "only the workers import with --allow-unknown-task / "
                    "allow_unknown_task=True)",
                )
    return canvas


def _canvas_task(task: Any, canvas: Canvas) -> Any:
    """The task a schedule sending ``canvas`` names: its first task's, or the same one."""
    if task is None or task == canvas.tasks[0]:
        return canvas.tasks[0]
    raise ValidationError(
        "task", task, f"none with a signature, or its first task ({canvas.tasks[0]!r})"
    )


def with_queue(options: Mapping[str, Any] | str | None, queue: Any) -> Any:
    """``options`` (a JSON object or its text) with ``queue`` set in it, when a queue is given:
    ``add --queue q`` is ``--options '{"queue": "q"}'``."""
    if queue is None:
        return options
    if not is_queue_name(queue):
        raise ValidationError("queue", queue, QUEUE_EXPECTED)
    decoded: dict[str, Any] = json_value("options", options or {}, dict, "a JSON object")
    return {**decoded, "queue": queue}
