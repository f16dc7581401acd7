"""What the audit log keeps of a change: the fields of a schedule an operator sets, before
and after, and what names a named token made or revoked.

Only what a person or a sync decides is compared (the definition, the
policies, whether it is enabled, its note and labels); what beat moves as
it runs the schedule (its next run, counters, leases) is not a change of
anyone's. An entry about a named token belongs to no schedule: its
``schedule_name`` is :data:`NO_SCHEDULE`, a name no schedule can have, so
that no schedule's trail shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from bridge.rules.policy import POLICY_COLUMNS
from bridge.rules.values import column_of, json_or_text

#: The columns of ``periodic_task`` an audit entry compares.
AUDITED_COLUMNS = (
    "task",
    "timer",
    "timezone",
    "args",
    "kwargs",
    "options",
    "signature",
    *POLICY_COLUMNS.values(),
    "enabled",
    "broken",
    "note",
    "silenced_until",
)
#: Stored as JSON text: shown decoded.
_JSON_COLUMNS = frozenset({"args", "kwargs", "options", "signature"})
#: The ``schedule_name`` of an entry that is about no schedule (a named token's).
NO_SCHEDULE = ""


def snapshot(row: Any, labels: Iterable[str]) -> dict[str, Any]:
    """The audited fields of a schedule, as JSON values."""
    fields = {column: _shown(column, column_of(row, column)) for column in AUDITED_COLUMNS}
    fields["labels"] = sorted(labels)
    return fields


def difference(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields that differ, as they were and as they became (both empty: no change)."""
    changed = [key for key in after if before.get(key) != after[key]]
    return {key: before.get(key) for key in changed}, {key: after[key] for key in changed}


def token_fields(name: str, role: str, expires_at: datetime | None) -> dict[str, Any]:
    """What the entry of a named token made or revoked says of it, as JSON values: its
    name, its role and when it expires; never its secret, nor the secret's digest."""
    return {"token": name, "role": role, "expires_at": _shown("expires_at", expires_at)}


def _shown(column: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if column in _JSON_COLUMNS and isinstance(value, str):
        return json_or_text(value)
    return value
