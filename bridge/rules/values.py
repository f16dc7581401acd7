"""Checks of single values that every surface shares: whole numbers, seconds, instants, JSON.

Each refuses with a :class:`~bridge.errors.ValidationError` naming the field,
the value given and the range expected, so that the CLI, the API, bulk
import and ``beat_schedule`` sync word a refusal the same way. The bounds are
what the bridge can store and compute with: a number a column cannot hold
would fail in the database driver instead, with an unnamed error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.errors import ValidationError

#: The largest whole number an ``INTEGER`` column holds (on PostgreSQL and SQLite alike).
INT_MAX = 2**31 - 1
#: The longest duration the bridge takes; longer ones are a mistake and would
#: overflow the date arithmetic of the decisions.
LONGEST = timedelta(days=3650)


def whole_number(field: str, value: Any, low: int = 1, high: int = INT_MAX) -> int:
    """``value`` as an ``int`` from ``low`` to ``high``: an int, or its digits as text."""
    number = value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
        raise ValidationError(field, value, whole_number_range(low, high))
    return number


def whole_number_range(low: int = 1, high: int = INT_MAX) -> str:
    """How a whole number's range reads in a refusal."""
    return f"a whole number from {low} to {high}"


def seconds(field: str, value: Any) -> float:
    """A number of seconds from 0 to :data:`LONGEST`."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0 <= value <= LONGEST.total_seconds()
    ):
        limit = int(LONGEST.total_seconds())
        raise ValidationError(field, value, f"a number of seconds from 0 to {limit}")
    return float(value)


#: How an instant is written, in a refusal.
INSTANT_EXPECTED = "an ISO-8601 time with a UTC offset, such as '2026-12-01T09:00:00+01:00'"
#: Words that leave an optional value unset (``--end none``).
CLEAR_WORDS = frozenset({"", "none", "null"})


def is_clear(value: Any) -> bool:
    """Whether ``value`` is one of the words that leave an optional value unset."""
    return isinstance(value, str) and value.strip().lower() in CLEAR_WORDS


def instant(field: str, value: Any, *, optional: bool = False) -> datetime | None:
    """An aware datetime, or ISO-8601 text with a UTC offset, as an instant in UTC.

    With ``optional``, the words of :data:`CLEAR_WORDS` give None. A naive
    time is refused: which zone it meant cannot be known.
    """
    expected = INSTANT_EXPECTED + (", or 'none'" if optional else "")
    if isinstance(value, str):
        if optional and is_clear(value):
            return None
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValidationError(field, value, expected) from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        shown = value.isoformat() if isinstance(value, datetime) else value
        raise ValidationError(field, shown, expected)
    return value.astimezone(UTC)


def aware(field: str, value: Any) -> datetime:
    """A ``datetime`` object with a UTC offset, in UTC: what the Python API takes
    where a type hint says ``datetime`` (text is refused there)."""
    if not isinstance(value, datetime):
        raise ValidationError(field, value, "a datetime with a UTC offset")
    if value.tzinfo is None:
        raise ValidationError(field, value.isoformat(), "a time with a UTC offset")
    return value.astimezone(UTC)


def required_instant(field: str, value: Any) -> datetime:
    """:func:`instant` of a value that must be given."""
    moment = instant(field, value)
    assert moment is not None
    return moment


def dumps(value: Any) -> str:
    """The stored JSON form: stable, so that equal values compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def json_value(field: str, value: Any, kind: type, expected: str) -> Any:
    """A JSON text, or an already decoded value, that must decode to a ``kind``.

    A refusal repeats the value as the user gave it (the text, not its
    decoding). A tuple is taken for a list.
    """
    given = value
    decoded = isinstance(value, str)
    if decoded:
        try:
            value = json.loads(value)
        except ValueError:
            raise ValidationError(field, given, expected) from None
    if isinstance(value, tuple) and kind is list:
        value = list(value)
    if not isinstance(value, kind):
        raise ValidationError(field, given, expected)
    if not decoded:  # what JSON decoding gives encodes again; beat decodes three per run
        try:
            dumps(value)
        except (TypeError, ValueError):
            raise ValidationError(field, given, f"{expected} of JSON-serialisable values") from None
    return value


def json_or_text(text: str) -> Any:
    """A stored JSON column for display: decoded, or the raw text when it is malformed
    (written straight into the table), so that the row can still be shown."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def column_of(row: Any, name: str) -> Any:
    """A column of a row given as a mapping (a result row, a dict) or an object (a table row)."""
    return row[name] if isinstance(row, Mapping) else getattr(row, name)
