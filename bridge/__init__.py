"""celery-periodic-bridge: a database-backed periodic task scheduler for Celery.

Schedules are rows in ``periodic_task``; ``celery beat -S bridge`` fires them;
workers record each run in ``task_execution``. :class:`Bridge` manages them
from Python, ``celery -A APP bridge ...`` from the shell.
"""

from __future__ import annotations

from bridge.config import Settings
from bridge.errors import (
    BridgeError,
    DuplicateSchedule,
    RunSkipped,
    ScheduleNotFound,
    SendFailed,
    ValidationError,
)
from bridge.manage.api import Backfill, Bridge, Run, Schedule
from bridge.worker.task import BridgeTask

__all__ = [
    "Backfill",
    "Bridge",
    "BridgeError",
    "BridgeTask",
    "DuplicateSchedule",
    "Run",
    "RunSkipped",
    "Schedule",
    "ScheduleNotFound",
    "SendFailed",
    "Settings",
    "ValidationError",
]
