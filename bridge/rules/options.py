"""The ``apply_async`` options a schedule (or each task of its canvas) may set, checked.

Each option's value is checked when the schedule is written rather than when
beat tries to send it.
"""

from __future__ import annotations

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
