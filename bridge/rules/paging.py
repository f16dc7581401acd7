"""Keyset pagination: where the next page of a listing starts, as an opaque cursor.

A page is the rows after the last one of the page before, in the listing's
order, found through an index: the thousandth page costs what the first
does, and a row added or removed meanwhile neither repeats nor skips one.
The cursor is that last row's sort key, which the client hands back as it
was given.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from bridge.errors import ValidationError
from bridge.rules.values import text_problem

T = TypeVar("T")

#: The most rows one page holds.
PAGE_MAX = 1000
CURSOR_EXPECTED = "a cursor returned as next by the previous page"


def encode(key: Sequence[Any]) -> str:
    """The cursor after a row whose sort key is ``key`` (texts, numbers, aware datetimes)."""
    values = [value.isoformat() if isinstance(value, datetime) else value for value in key]
    text = json.dumps(values, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def following(found: Sequence[T], limit: int, key: Callable[[T], Sequence[Any]]) -> str | None:
    """The cursor of the page after ``found[:limit]``, read with one row more than a page so
    as to know whether there is one (None: ``found`` ends the listing)."""
    if len(found) <= limit or not limit:
        return None
    return encode(key(found[limit - 1]))


def decode(cursor: Any, kinds: Sequence[type]) -> tuple[Any, ...]:
    """The sort key in ``cursor``, each part of the kind expected (``datetime`` from ISO
    text); a cursor that is not one this listing gave is refused naming ``cursor``."""
    try:
        padded = str(cursor) + "=" * (-len(str(cursor)) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError(cursor)
        return tuple(_typed(value, kind) for value, kind in zip(values, kinds, strict=True))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ValidationError("cursor", cursor, CURSOR_EXPECTED) from None


def _typed(value: Any, kind: type) -> Any:
    if value is None:
        return None
    if kind is datetime:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError(value)
        return moment
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, str) and text_problem(value) is not None:
        raise ValueError(value)  # no row holds it, and the database would refuse the query
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(value)  # no key column holds it
    return value
