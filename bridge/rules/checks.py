"""Checks of single values that every surface shares: whole numbers and seconds.

Each refuses with a :class:`~bridge.errors.ValidationError` naming the field,
the value given and the range expected, so that the CLI, the API, bulk
import and ``beat_schedule`` sync word a refusal the same way. The bounds are
what the bridge can store and compute with: a number a column cannot hold
would fail in the database driver instead, with an unnamed error.
"""

from __future__ import annotations

import math
from datetime import timedelta
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
