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
from collections.abc import Mapping, Sequence
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
        digits = value.strip().lstrip("0") or "0"
        # Past 19 digits it is out of any range, and past 4,300 int() refuses to read it.
        number = int(digits) if len(digits) <= 19 else None
    if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
        raise ValidationError(field, value, whole_number_range(low, high))
    return number


def whole_number_range(low: int = 1, high: int = INT_MAX) -> str:
    """How a whole number's range reads in a refusal."""
    return f"a whole number from {low} to {high}"


def flag(field: str, value: Any) -> bool:
    """A yes-or-no field: JSON's ``true`` or ``false`` only. Texts such as ``"no"`` and
    numbers are refused rather than read by Python's truth, which takes ``"no"`` for yes."""
    if not isinstance(value, bool):
        raise ValidationError(field, value, "true or false")
    return value


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
    return in_utc(field, value, expected)


def aware(field: str, value: Any) -> datetime:
    """A ``datetime`` object with a UTC offset, in UTC: what the Python API takes
    where a type hint says ``datetime`` (text is refused there)."""
    if not isinstance(value, datetime):
        raise ValidationError(field, value, "a datetime with a UTC offset")
    if value.tzinfo is None:
        raise ValidationError(field, value.isoformat(), "a time with a UTC offset")
    return in_utc(field, value, "a time with a UTC offset")


def in_utc(field: str, value: datetime, expected: str) -> datetime:
    """An aware time in UTC; one that UTC puts outside years 1 to 9999 (the first hour
    of year 1 east of UTC, the last of 9999 west of it) is refused, where converting it
    raised ``OverflowError``."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(
            field, value.isoformat(), f"{expected}, within years 1 to 9999 in UTC"
        ) from None


def required_instant(field: str, value: Any) -> datetime:
    """:func:`instant` of a value that must be given."""
    moment = instant(field, value)
    assert moment is not None
    return moment


#: What text every field takes, besides its own rules: the database stores text as UTF-8,
#: which has no lone UTF-16 surrogate, and PostgreSQL's text holds no NUL.
CLEAN_TEXT = "text without NUL characters or lone UTF-16 surrogates"
#: How deep a JSON value may nest (``[[1]]`` is 2 deep): deeper ones are a mistake, and
#: encoding or decoding them could run out of stack.
JSON_DEPTH = 32
#: The longest whole number a JSON value may hold: Python writes and reads at most 4,300
#: digits (``sys.get_int_max_str_digits``), and no task needs near that many.
INT_DIGITS = 4000
INT_BITS = 13_000  # 2**13000 has 3,914 digits
_NESTED = f"values nested at most {JSON_DEPTH} deep"


def text_problem(text: str) -> str | None:
    """What in ``text`` no store can keep or answer as it is: a NUL character or a lone
    UTF-16 surrogate (which JSON's ``"\\udfff"`` decodes to); None when it is clean."""
    if "\x00" in text:
        return "a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone UTF-16 surrogate"
    return None


def clean_text(field: str, value: Any, expected: str = CLEAN_TEXT) -> Any:
    """``value`` itself when it is not text or is clean text; a refusal naming ``field``
    when it is text holding what :func:`text_problem` finds."""
    if isinstance(value, str) and text_problem(value) is not None:
        raise ValidationError(field, value, expected)
    return value


def lookup_text(field: str, value: Any) -> str:
    """Text a read looks up or filters by (a name, a run id, a prefix): no row can hold a NUL
    or a lone surrogate, and the database would refuse the query rather than find nothing."""
    if not isinstance(value, str):
        raise ValidationError(field, value, "a text")
    return clean_text(field, value)  # type: ignore[no-any-return]


def json_problem(value: Any) -> str | None:
    """Why ``value`` (a decoded JSON value) cannot be stored and answered as JSON, or None.

    Its numbers must be finite (``NaN`` and ``Infinity`` are not JSON, though Python's
    decoder takes them), its texts and keys clean (see :func:`text_problem`), its keys
    text, and it may nest at most :data:`JSON_DEPTH` deep. The walk is iterative, so a
    value nested past the interpreter's stack is judged rather than crashing the caller.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"texts without {problem}"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if item.bit_length() > INT_BITS:
                return f"whole numbers of at most {INT_DIGITS} digits"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "finite numbers (NaN and Infinity are not JSON)"
        elif isinstance(item, list | tuple | dict):
            if depth > JSON_DEPTH:
                return _NESTED
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        return "text keys"
                    problem = text_problem(key)
                    if problem is not None:
                        return f"keys without {problem}"
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
        else:
            return "JSON-serialisable values"
    return None


def dumps(value: Any) -> str:
    """The stored JSON form: stable, so that equal values compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def json_value(field: str, value: Any, kind: type, expected: str) -> Any:
    """A JSON text, or an already decoded value, that must decode to a ``kind``.

    A refusal repeats the value as the user gave it (the text, not its
    decoding). A tuple is taken for a list. This is what beat decodes a row's
    columns with, once per run, so it checks the kind only: a value to be
    written goes through :func:`json_input`, which checks all of it.
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


def json_input(field: str, value: Any, kind: type, expected: str) -> Any:
    """:func:`json_value` of a value about to be written: every part of it must also be what
    JSON carries and every surface can answer (see :func:`json_problem`).

    ``NaN`` and ``Infinity`` are refused in a text as in a decoded value. The
    refusal repeats the value as the user gave it, except a value nested too
    deep, whose text could be as deep as the stack.
    """
    if not isinstance(value, str):
        _refuse_problems(field, value, value, expected)
    try:
        decoded = json_value(field, value, kind, expected)
    except RecursionError:
        raise ValidationError(field, _TOO_DEEP, f"{expected} of {_NESTED}") from None
    if isinstance(value, str):
        _refuse_problems(field, decoded, value, expected)
    return decoded


_TOO_DEEP = f"<a value nested more than {JSON_DEPTH} deep>"


def _refuse_problems(field: str, decoded: Any, given: Any, expected: str) -> None:
    problem = json_problem(decoded)
    if problem is not None:
        shown = _TOO_DEEP if problem == _NESTED and not isinstance(given, str) else given
        raise ValidationError(field, shown, f"{expected} of {problem}")


def answerable(value: Any) -> Any:
    """``value`` (a decoded JSON value) as JSON can say it: a number that is not finite
    becomes null, as JavaScript's ``JSON.stringify`` writes it.

    Such numbers are refused on the way in (:func:`json_problem`); a value
    stored by an older release may still hold one, and must still be read.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: answerable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [answerable(item) for item in value]
    return value


def json_or_text(text: str | None) -> Any:
    """A stored JSON column for display: decoded, or the raw text when it is malformed
    (written straight into the table), so that the row can still be shown (None: not set)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def column_of(row: Any, name: str) -> Any:
    """A column of a row given as a mapping (a result row, a dict) or an object (a table row)."""
    return row[name] if _is_mapping(row) else getattr(row, name)


def columns_of(row: Any, names: Sequence[str]) -> dict[str, Any]:
    """The columns ``names`` of a row given as :func:`column_of` takes it."""
    if _is_mapping(row):
        return {name: row[name] for name in names}
    return {name: getattr(row, name) for name in names}


def _is_mapping(row: Any) -> bool:
    # A dict first: the common case, without the costlier check of an abstract type.
    return type(row) is dict or isinstance(row, Mapping)
