"""The kinds of things the bridge records: a run's status, why a run exists, who owns a schedule.

Plain enumerations shared by every part of the bridge; the tables store their
values as text.
"""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    """Lifecycle of one run; the first five are non-final."""

    PENDING = "PENDING"
    SENT = "SENT"
    RECEIVED = "RECEIVED"
    STARTED = "STARTED"
    RETRY = "RETRY"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    REVOKED = "REVOKED"
    LOST = "LOST"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


NON_FINAL_STATUSES = frozenset(
    {RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED, RunStatus.STARTED, RunStatus.RETRY}
)
FINAL_STATUSES = frozenset(set(RunStatus) - NON_FINAL_STATUSES)


class Trigger(enum.StrEnum):
    """Why a run exists."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"
    CATCHUP = "catchup"
    RETRY = "retry"
    BACKFILL = "backfill"
    #: A task the bridge did not send, recorded because the user opted in.
    EXTERNAL = "external"


class Source(enum.StrEnum):
    """Who owns a schedule's definition."""

    #: Created through the Python API or the CLI; beat never touches it.
    API = "api"
    #: Synced from the app's ``beat_schedule``; beat keeps it in step.
    CONFIG = "config"


#: The triggers of runs the schedule's policies govern.
SCHEDULED_TRIGGERS = frozenset({Trigger.SCHEDULED, Trigger.CATCHUP, Trigger.RETRY})
