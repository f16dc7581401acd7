"""Exceptions the bridge raises to its callers.

Every refusal of user input is a :class:`ValidationError` that names the
field, repeats the value given and says what was expected, so that the CLI can
print it as one line and the API caller can react to the field.
"""

from __future__ import annotations

from typing import Any


class BridgeError(Exception):
    """Base class of every error the bridge raises on purpose."""


#: The most characters of a refused value a message repeats: a value of 100,000 characters
#: said back whole made a redirect's ``Location`` longer than proxies take.
SHOWN_MAX = 500


def shown(value: Any) -> str:
    """``repr(value)``, its first :data:`SHOWN_MAX` characters and its length when longer,
    or what it is when it has none: a whole number past the digits Python writes (4,300),
    or a value nested deeper than the stack."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to show>"
    except ValueError:
        return f"<a {type(value).__name__} too long to show>"
    if len(text) <= SHOWN_MAX:
        return text
    return f"{text[:SHOWN_MAX]}... ({len(text):,} characters in all)"


class ValidationError(BridgeError, ValueError):
    """A value given for a schedule field was refused; nothing was written."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{field}: got {shown(value)}, expected {expected}")


class ScheduleNotFound(BridgeError, LookupError):
    """No schedule has the name that was asked for."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"name: no schedule named {name!r}")


class StateConflict(ValidationError):
    """The value is well formed, but the schedule or run is not in a state that allows it
    (a name taken, a schedule paused already, a run that has ended)."""


class DuplicateSchedule(StateConflict):
    """A schedule with this name already exists."""

    def __init__(self, name: str) -> None:
        super().__init__("name", name, "a name no other schedule has")


class DuplicateToken(StateConflict):
    """A named token of this name exists, or existed: a name is never given twice, so that
    the audit log's ``http:NAME`` means one token."""

    def __init__(self, name: str) -> None:
        super().__init__("name", name, "a name no other token has (a revoked token keeps its name)")


class DuplicateCalendar(StateConflict):
    """A calendar of this name exists, and the caller did not ask to replace it."""

    def __init__(self, name: str) -> None:
        super().__init__("name", name, "a name no other calendar has (or replace it)")


class CalendarInUse(StateConflict):
    """A calendar that schedules skip cannot be removed: they would lose its days."""

    def __init__(self, name: str, schedules: list[str]) -> None:
        shown = ", ".join(schedules[:5]) + (
            f" and {len(schedules) - 5} more" if len(schedules) > 5 else ""
        )
        super().__init__(
            "name", name, f"a calendar no schedule skips (skipped by {shown}: edit them first)"
        )


class RunNotFound(BridgeError, LookupError):
    """No run has the id that was asked for."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run: no run with id {run_id!r}")


class CalendarNotFound(BridgeError, LookupError):
    """No calendar has the name that was asked for."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"name: no calendar named {name!r}")


class IncidentNotFound(BridgeError, LookupError):
    """No incident has the id that was asked for."""

    def __init__(self, incident_id: int) -> None:
        self.incident_id = incident_id
        super().__init__(f"incident: no incident with id {incident_id}")


class SendFailed(BridgeError):
    """A manual or backfilled run could not be sent to the broker; its record is marked FAILURE."""

    def __init__(self, name: str, reason: str, command: str = "run") -> None:
        super().__init__(f"{command} {name!r}: {reason}")


class RunSkipped(BridgeError):
    """Overlap ``skip`` refused a manual run or a backfill: a run of the schedule is open.

    Nothing was written or sent.
    """

    def __init__(self, command: str, name: str, run_id: str, status: str) -> None:
        self.name = name
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"{command} {name!r}: skipped: run {run_id} is still {status} (overlap skip)"
        )
