"""What an alert says: the payload the alert task receives, and its sentence.

Pure: built from an incident's columns, the event (``opened``, ``repeat``
or ``recovered``) and ``now``. The alert task is any Celery task the user
registers; it gets the payload as its one argument.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from bridge.rules.values import column_of
from bridge.rules.words import short_duration

#: What each kind of incident means, in a few words.
KINDS = {
    "late": "late",
    "overrun": "overrunning",
    "failing": "failing",
    "broken": "broken",
    "missed": "missing occurrences",
    "no_beat": "without a live beat",
}


def alert_payload(incident: Any, event: str, now: datetime) -> dict[str, Any]:
    """The alert task's argument: the incident, the event and a sentence saying it."""
    kind = column_of(incident, "kind")
    name = column_of(incident, "schedule_name")
    since = column_of(incident, "since") or column_of(incident, "opened_at")
    closed = column_of(incident, "closed_at")
    return {
        "incident": column_of(incident, "id"),
        "event": event,
        "kind": kind,
        "schedule": name,
        "since": since.isoformat() if since else None,
        "opened_at": column_of(incident, "opened_at").isoformat(),
        "closed_at": closed.isoformat() if closed else None,
        "alerts": column_of(incident, "alerts"),
        "runs": json.loads(column_of(incident, "runs") or "[]"),
        "detail": column_of(incident, "message"),
        "message": sentence(kind, name, column_of(incident, "message"), event, since, now),
        "sent_at": now.isoformat(),
    }


def sentence(
    kind: str, name: str | None, detail: str, event: str, since: datetime | None, now: datetime
) -> str:
    """``Schedule 'report' is late: due 6m ago and not sent (grace 1m).``"""
    who = f"Schedule {name!r}" if name else "The scheduler"
    state = KINDS.get(kind, kind)
    if event == "recovered":
        lasted = "" if since is None else f" after {short_duration(now - since)}"
        return f"{who} is no longer {state}{lasted}."
    if event == "repeat" and since is not None:
        return f"{who} is still {state}, for {short_duration(now - since)} now: {detail}."
    return f"{who} is {state}: {detail}."


#: The longest wait before an alert an alert URL refused is tried again.
RETRY_AT_MOST = timedelta(minutes=5)


def retry_after(attempts: int) -> timedelta:
    """How long an alert waits after its ``attempts``-th refusal in a row: 5 s, doubling,
    at most :data:`RETRY_AT_MOST`, so that a service that is down is not hammered and one
    that is back gets the alert within minutes."""
    doublings = min(max(attempts, 1) - 1, 20)
    return min(RETRY_AT_MOST, timedelta(seconds=5 << doublings))


def title(payload: dict[str, Any]) -> str:
    """The title of an alert sent to a notification URL: ``bridge: late opened: report``."""
    subject = payload["schedule"] or "the scheduler"
    return f"bridge: {payload['kind']} {payload['event']}: {subject}"
