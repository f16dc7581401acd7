"""A schedule's policies: what they are, how they are written, and their checks.

One :class:`Policies` value carries every policy of a schedule through the
API, the CLI, ``beat_schedule`` sync and the table, so that adding a policy
touches this module and the decisions that use it, not every caller. The
field names here are the names users write (``--catchup-window``,
``catchup_window=``, ``"catchup_window":``); :meth:`Policies.columns` maps
them onto ``periodic_task``.

Everything here is pure: values in, values or a
:class:`~bridge.errors.ValidationError` out.
"""

from __future__ import annotations

import enum
import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from bridge.errors import ValidationError
from bridge.rules.calendars import check_skipped, names_text
from bridge.rules.timers import TimerSyntaxError, format_duration, parse_duration
from bridge.rules.values import (
    INT_MAX,
    LONGEST,
    instant,
    is_clear,
    whole_number,
    whole_number_range,
)


class Overlap(enum.StrEnum):
    """What to do with a due occurrence while a previous run is not final."""

    #: Do not start it; count the skip.
    SKIP = "skip"
    #: Start it anyway; runs execute side by side.
    ALLOW = "allow"
    #: Hold one occurrence and start it when the running one finishes.
    BUFFER_ONE = "buffer_one"
    #: Queue every occurrence (up to ``bridge_buffer_limit``) and start them one after
    #: another, each when the run before it finishes.
    BUFFER_ALL = "buffer_all"
    #: Revoke the open run (terminating it, as ``replace_with`` says) and start the new one.
    REPLACE = "replace"


class ReplaceWith(enum.StrEnum):
    """How overlap ``replace`` ends the open runs."""

    #: Revoke them and terminate those already executing (SIGTERM).
    TERMINATE = "terminate"
    #: Revoke those not started yet; one already executing finishes beside the new run.
    REVOKE = "revoke"


class Catchup(enum.StrEnum):
    """What to do with occurrences that passed while beat was down or the schedule paused."""

    #: Run the most recent one once, then resync.
    LATEST = "latest"
    #: Run every one inside the window, oldest first.
    ALL = "all"
    #: Run none; resync to the next future occurrence.
    NONE = "none"


class OnOverrun(enum.StrEnum):
    """What the watchdog does to a run that has been going longer than ``max_runtime``."""

    #: Report it (the schedule's health is ``overrun``, and an alert goes out).
    NONE = "none"
    #: Revoke it too: a run not started yet is discarded; a running one carries on.
    REVOKE = "revoke"
    #: Revoke and terminate it (SIGTERM) where it executes.
    TERMINATE = "terminate"


#: ``expires`` values that are not durations.
EXPIRES_NEXT = "next"
EXPIRES_NEVER = "never"

#: The size of the ``backoff`` column.
BACKOFF_MAX_CHARS = 200


class PolicyFields(TypedDict, total=False):
    """The policy keywords the API, the CLI and ``beat_schedule`` accept."""

    overlap: str
    replace_with: str
    catchup: str
    catchup_window: str | float | timedelta | None
    jitter: str | float | timedelta | None
    start: str | datetime | None
    end: str | datetime | None
    remaining: int | str | None
    max_failures: int | str | None
    max_attempts: int | str
    backoff: str | list[str] | None
    expires: str | float | timedelta | None
    grace: str | float | timedelta | None
    max_runtime: str | float | timedelta | None
    on_overrun: str
    alert_after: int | str | None
    recover_after: int | str | None
    keep_runs: int | str | None
    keep_days: int | str | None
    skip_calendars: str | list[str] | tuple[str, ...] | None


@dataclass(frozen=True)
class Backoff:
    """Delays between the attempts of one occurrence.

    Either a list (``30s,2m,10m``: the n-th retry waits the n-th delay, the
    last one repeating) or exponential (``10s..10m``: 10 s, doubling, capped
    at 10 min).
    """

    delays: tuple[timedelta, ...]
    exponential: bool = False

    @classmethod
    def parse(cls, value: Any) -> Backoff:
        expected = "delays such as '30s,2m,10m', or '10s..10m' for doubling delays with a cap"
        if isinstance(value, list | tuple):
            value = ",".join(str(item) for item in value)
        if not isinstance(value, str) or not value.strip():
            raise ValidationError("backoff", value, expected)
        text = value.replace(" ", "").lower()
        exponential = ".." in text
        parts = text.split("..") if exponential else text.split(",")
        if exponential and len(parts) != 2:
            raise ValidationError("backoff", value, expected)
        try:
            delays = tuple(parse_duration(part) for part in parts)
        except TimerSyntaxError:
            raise ValidationError("backoff", value, expected) from None
        if exponential and delays[0] > delays[1]:
            raise ValidationError("backoff", value, "a first delay no longer than the cap")
        backoff = cls(delays, exponential)
        if max(delays) > LONGEST or len(backoff.text) > BACKOFF_MAX_CHARS:
            limit = f"at most {BACKOFF_MAX_CHARS} characters of delays of at most 3650d each"
            raise ValidationError("backoff", value, limit)
        return backoff

    @property
    def text(self) -> str:
        return ("..".join if self.exponential else ",".join)(
            format_duration(delay) for delay in self.delays
        )

    def delay(self, retry: int) -> timedelta:
        """The wait before the ``retry``-th retry (1 for the second attempt)."""
        if self.exponential:
            first, cap = self.delays
            doubled = first.total_seconds() * 2.0 ** min(retry - 1, 1000)
            return timedelta(seconds=min(cap.total_seconds(), doubled))
        return self.delays[min(retry, len(self.delays)) - 1]


#: Without a backoff, a retry is sent at once.
NO_BACKOFF = Backoff((timedelta(0),))


@dataclass(frozen=True)
class Policies:
    """Every policy of one schedule, normalised; the defaults are a new schedule's."""

    overlap: Overlap = Overlap.SKIP
    #: How ``replace`` ends the open runs.
    replace_with: ReplaceWith = ReplaceWith.TERMINATE
    catchup: Catchup = Catchup.LATEST
    #: Occurrences older than this when beat comes to them are missed; None: no limit.
    catchup_window: timedelta | None = None
    #: Upper bound of the random delay added to each occurrence.
    jitter: timedelta = timedelta(0)
    start: datetime | None = None
    end: datetime | None = None
    #: Scheduled runs left before the schedule finishes; None: unlimited.
    remaining: int | None = None
    #: Consecutive failed occurrences that break the schedule; None: never.
    max_failures: int | None = None
    max_attempts: int = 1
    backoff: Backoff | None = None
    #: ``next``, ``never`` or a duration after the run is sent.
    expires: str = EXPIRES_NEXT
    #: How long an occurrence may be due, or its run sent, without starting before the
    #: schedule is late; None: the app's ``bridge_default_grace``.
    grace: timedelta | None = None
    #: How long a run may go before it overruns; None: ``bridge_default_max_runtime``.
    max_runtime: timedelta | None = None
    on_overrun: OnOverrun = OnOverrun.NONE
    #: Failed occurrences in a row before the schedule is failing and its ``failing``
    #: incident opens; None: the app's ``bridge_default_alert_after``.
    alert_after: int | None = None
    #: Successful runs in a row before a failing schedule recovers and its incident
    #: closes; None: the app's ``bridge_default_recover_after``.
    recover_after: int | None = None
    #: Final runs kept: the latest this many (0: all); None: ``bridge_history_keep_runs``.
    keep_runs: int | None = None
    #: Final runs kept: those planned in the last this many days (0: all); None: the
    #: app's ``bridge_history_keep_days``.
    keep_days: int | None = None
    #: The calendars whose days and times the schedule's occurrences are not sent on
    #: (:mod:`bridge.rules.calendars`), by name.
    skip_calendars: tuple[str, ...] = ()

    @classmethod
    def build(cls, given: Mapping[str, Any], base: Policies | None = None) -> Policies:
        """Check the policy keywords in ``given`` and apply them on top of ``base``.

        ``None`` for a keyword leaves the base value; ``"none"`` clears an
        optional policy.
        """
        unknown = sorted(set(given) - set(POLICY_NAMES))
        if unknown:
            raise ValidationError("policy", unknown[0], f"one of {', '.join(POLICY_NAMES)}")
        changes = {
            key: _BY_NAME[key].check(value) for key, value in given.items() if value is not None
        }
        policies = replace(base or cls(), **changes)
        if policies.start and policies.end and policies.end <= policies.start:
            after = f"a time after start ({policies.start.isoformat()})"
            raise ValidationError("end", policies.end.isoformat(), after)
        return policies

    @classmethod
    def from_columns(cls, row: Any) -> Policies:
        """Read a ``periodic_task`` row; a bad stored value raises :class:`ValidationError`.

        ``remaining`` is a countdown beat moves: the 0 it stores once the runs
        are spent is read as it is, although a user may not set it.
        """
        return _from_columns(tuple(getattr(row, policy.column) for policy in _TABLE))

    def columns(self) -> dict[str, Any]:
        """The ``periodic_task`` column values of these policies."""
        columns = {}
        for policy in _TABLE:
            value = getattr(self, policy.name)
            columns[policy.column] = None if value is None else policy.store(value)
        return columns

    def to_json(self) -> dict[str, Any]:
        """The policies as the user writes them (durations as text, times as ISO-8601 UTC)."""
        out: dict[str, Any] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, timedelta):
                value = format_duration(value) if value else "0s"
            elif isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, Backoff):
                value = value.text
            elif isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        return out

    # -- derived values used by the decisions --------------------------------------

    def retry_delay(self, retry: int) -> timedelta:
        return (self.backoff or NO_BACKOFF).delay(retry)

    def expiry(self, sent: datetime, following: datetime | None) -> float | None:
        """Seconds after ``sent`` at which the run's message expires, or None.

        ``next`` expires a run at the schedule's following occurrence, so a
        backlog in the broker never turns into a pile of stale runs; a timer
        with no following occurrence (a one-shot, a fixed delay) never expires.
        """
        if self.expires == EXPIRES_NEVER:
            return None
        if self.expires == EXPIRES_NEXT:
            if following is None:
                return None
            return max(1.0, (following - sent).total_seconds())
        return parse_duration(self.expires).total_seconds()


def jitter_bound(jitter: timedelta, occurrence: datetime, following: datetime | None) -> timedelta:
    """The most an occurrence may be delayed: ``jitter``, or half the gap to the next if less."""
    if following is None:
        return jitter
    return min(jitter, (following - occurrence) / 2)


def jitter_offset(
    schedule_id: int, occurrence: datetime, jitter: timedelta, following: datetime | None
) -> timedelta:
    """The delay added to one occurrence: up to ``jitter``, never reaching ``following``.

    Derived from the schedule and the occurrence rather than drawn at random,
    so every beat instance computes the same fire time for the same occurrence.
    """
    bound = jitter_bound(jitter, occurrence, following)
    if not bound:
        return timedelta(0)
    digest = hashlib.blake2b(
        f"{schedule_id}/{occurrence.astimezone(UTC).isoformat()}".encode(), digest_size=8
    ).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return timedelta(microseconds=int(bound / timedelta(microseconds=1) * fraction))


# -- the checks of each keyword ------------------------------------------------------


def _choice(field: str, kind: type[enum.StrEnum]) -> Any:
    def check(value: Any) -> Any:
        try:
            return kind(value)
        except ValueError:
            choices = "|".join(member.value for member in kind)
            raise ValidationError(field, value, f"one of {choices}") from None

    return check


_DURATION_HELP = "a duration such as '30s', '5m' or '1h30m'"


def _duration(field: str, optional: bool, allow_zero: bool = False) -> Any:
    expected = _DURATION_HELP + " of at most 3650d" + (" or 'none'" if optional else "")

    def check(value: Any) -> timedelta | None:
        if optional and is_clear(value):
            return None
        if isinstance(value, timedelta):
            delta = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            if not LONGEST.total_seconds() >= value >= 0:  # also refuses NaN
                raise ValidationError(field, value, expected)
            delta = timedelta(seconds=value)
        elif isinstance(value, str):
            text = value.strip().lower()
            if allow_zero and text in {"0", "0s"}:
                return timedelta(0)
            try:
                delta = parse_duration(text)
            except TimerSyntaxError:
                raise ValidationError(field, value, expected) from None
        else:
            raise ValidationError(field, value, expected)
        if not timedelta(0) <= delta <= LONGEST or (delta == timedelta(0) and not allow_zero):
            raise ValidationError(field, value, expected)
        return delta

    return check


def duration(field: str, value: Any) -> timedelta:
    """A positive duration (``'30s'``, ``'1h30m'``, or seconds) of at most 3650 days."""
    delta: timedelta | None = _duration(field, optional=False)(value)
    assert delta is not None
    return delta


def _jitter(value: Any) -> timedelta:
    delta: timedelta | None = _duration("jitter", optional=True, allow_zero=True)(value)
    return delta or timedelta(0)


def _moment(field: str) -> Any:
    return functools.partial(instant, field, optional=True)


def _count(field: str, optional: bool, low: int = 1, meaning: str = "", high: int = INT_MAX) -> Any:
    expected = whole_number_range(low, high) + meaning + (" or 'none'" if optional else "")

    def check(value: Any) -> int | None:
        if optional and is_clear(value):
            return None
        try:
            return whole_number(field, value, low, high)
        except ValidationError:
            raise ValidationError(field, value, expected) from None

    return check


def _backoff(value: Any) -> Backoff | None:
    if is_clear(value):
        return None
    return Backoff.parse(value)


def _expires(value: Any) -> str:
    expected = f"'{EXPIRES_NEXT}', '{EXPIRES_NEVER}' or {_DURATION_HELP}"
    if isinstance(value, str) and value.strip().lower() in {EXPIRES_NEXT, EXPIRES_NEVER}:
        return value.strip().lower()
    try:
        delta = _duration("expires", optional=False)(value)
    except ValidationError:
        raise ValidationError("expires", value, expected) from None
    assert delta is not None
    if delta % timedelta(seconds=1):
        raise ValidationError("expires", value, expected)
    return format_duration(delta)


@dataclass(frozen=True)
class _Policy:
    """One policy: the keyword users write, its ``periodic_task`` column, its check and
    how its value is stored."""

    name: str
    column: str
    #: The keyword's value (text, number, ...) checked into the field of :class:`Policies`.
    check: Callable[[Any], Any]
    #: The field's value as the column stores it (None stays None).
    store: Callable[[Any], Any] = lambda value: value


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _total_seconds(value: timedelta) -> float:
    return value.total_seconds()


def _backoff_text(value: Backoff) -> str:
    return value.text


#: Every policy, in the order the CLI lists them: the one table the keywords, the
#: checks and the columns come from.
_TABLE = (
    _Policy("overlap", "overlap", _choice("overlap", Overlap), _enum_value),
    _Policy("replace_with", "replace_with", _choice("replace_with", ReplaceWith), _enum_value),
    _Policy("catchup", "catchup", _choice("catchup", Catchup), _enum_value),
    _Policy(
        "catchup_window",
        "catchup_window",
        _duration("catchup_window", optional=True),
        _total_seconds,
    ),
    _Policy("jitter", "jitter", _jitter, _total_seconds),
    _Policy("start", "start_at", _moment("start")),
    _Policy("end", "end_at", _moment("end")),
    _Policy("remaining", "remaining", _count("remaining", optional=True)),
    _Policy("max_failures", "max_failures", _count("max_failures", optional=True)),
    _Policy("max_attempts", "max_attempts", _count("max_attempts", optional=False)),
    _Policy("backoff", "backoff", _backoff, _backoff_text),
    _Policy("expires", "expires", _expires),
    _Policy("grace", "grace", _duration("grace", optional=True), _total_seconds),
    _Policy("max_runtime", "max_runtime", _duration("max_runtime", optional=True), _total_seconds),
    _Policy("on_overrun", "on_overrun", _choice("on_overrun", OnOverrun), _enum_value),
    _Policy("alert_after", "alert_after", _count("alert_after", optional=True)),
    _Policy("recover_after", "recover_after", _count("recover_after", optional=True)),
    _Policy("keep_runs", "keep_runs", _count("keep_runs", True, 0, " (0: every run)")),
    _Policy(
        "keep_days",
        "keep_days",
        _count("keep_days", True, 0, " (0: any age)", LONGEST.days),
    ),
    _Policy("skip_calendars", "skip_calendars", check_skipped, names_text),
)
_BY_NAME = {policy.name: policy for policy in _TABLE}
#: The policy keywords, in the order the CLI lists them (:class:`PolicyFields` types them).
POLICY_NAMES = tuple(_BY_NAME)
#: The ``periodic_task`` column of each policy keyword.
POLICY_COLUMNS = {policy.name: policy.column for policy in _TABLE}


@functools.lru_cache(maxsize=1024)
def _from_columns(values: tuple[Any, ...]) -> Policies:
    """Policies are immutable and beat reads them for every row it fires: most rows share them.

    ``values`` are the columns in :data:`_TABLE` order; a stored NULL means
    "not set", which :meth:`Policies.build` spells ``"none"``.
    """
    given = {
        policy.name: "none" if value is None else value
        for policy, value in zip(_TABLE, values, strict=True)
    }
    spent = given["remaining"] == 0
    if spent:
        given["remaining"] = "none"
    policies = Policies.build(given)
    return replace(policies, remaining=0) if spent else policies
