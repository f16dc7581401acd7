"""The ``apply_async`` options a schedule (or each task of its canvas) may set, checked.

Each option's value is checked when the schedule is written rather than when
beat tries to send it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from bridge.errors import ValidationError
from bridge.rules.values import LONGEST, seconds

#: The prefix of the headers the bridge puts on its messages, which say which run a task is
#: of: a schedule's options may not set them.
OWN = "bridge_"


def _is_seconds(value: Any) -> bool:
    try:
        seconds("", value)
    except ValidationError:
        return False
    return True


#: The longest queue name a schedule is given: RabbitMQ takes 255 bytes, and the name is
#: shown in listings and as a label of ``/metrics``.
QUEUE_MAX = 255
#: What a queue name given to a schedule must be.
QUEUE_EXPECTED = f"a queue name of 1 to {QUEUE_MAX} characters, without control characters"


def is_queue_name(value: Any) -> bool:
    """A queue name a broker takes and a listing shows on one line: no control character
    (a line feed in one splits the lines of listings), no lone surrogate."""
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value) <= QUEUE_MAX
        and not any(unicodedata.category(char) in ("Cc", "Cs") for char in value)
    )


#: What each option's value must be, so that a bad value is refused when the
#: schedule is written rather than when beat tries to send it.
_SECONDS = f"a number of seconds from 0 to {int(LONGEST.total_seconds())}"
_OPTION_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "queue": (lambda v: isinstance(v, str) and bool(v.strip()), "a queue name"),
    "routing_key": (lambda v: isinstance(v, str), "a text"),
    "exchange": (lambda v: isinstance(v, str), "an exchange name"),
    "priority": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255,
        "a whole number from 0 to 255",
    ),
    "expires": (_is_seconds, _SECONDS),
    "headers": (
        lambda v: isinstance(v, dict) and not any(str(key).startswith(OWN) for key in v),
        f"a JSON object without the bridge's own headers ({OWN}...)",
    ),
    "time_limit": (_is_seconds, _SECONDS),
    "soft_time_limit": (_is_seconds, _SECONDS),
    "ignore_result": (lambda v: isinstance(v, bool), "true or false"),
}
ALLOWED_OPTIONS = frozenset(_OPTION_CHECKS)


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown ``apply_async`` options and values of the wrong kind."""
    for key, value in options.items():
        if key not in _OPTION_CHECKS:
            raise ValidationError("options", key, f"one of {', '.join(sorted(ALLOWED_OPTIONS))}")
        accepts, expected = _OPTION_CHECKS[key]
        if not accepts(value):
            raise ValidationError(f"options.{key}", value, expected)
    return options


def check_written_options(options: dict[str, Any]) -> dict[str, Any]:
    """:func:`check_options`, and a queue name :func:`is_queue_name` takes: options as a
    schedule is written. Beat reads rows with :func:`check_options` alone, so that a row
    written before the queue's rule was made keeps firing."""
    check_options(options)
    if "queue" in options and not is_queue_name(options["queue"]):
        raise ValidationError("options.queue", options["queue"], QUEUE_EXPECTED)
    return options
