"""celery-periodic-bridge: a database-backed periodic task scheduler for Celery.

Schedules are rows in ``periodic_task``; ``celery beat -S bridge`` fires them;
workers record each run in ``task_execution``. :class:`Bridge` manages them
from Python, ``celery -A APP bridge ...`` from the shell.

The public names are imported when first used (PEP 562), not with the
package: importing a module of :mod:`bridge.rules` then needs only the
standard library, rather than Celery and SQLAlchemy, which the public names
bring with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.celery.task import BridgeTask
    from bridge.config import Settings
    from bridge.errors import (
        BridgeError,
        CalendarInUse,
        CalendarNotFound,
        DuplicateSchedule,
        RunSkipped,
        ScheduleNotFound,
        SendFailed,
        ValidationError,
    )
    from bridge.manage.api import (
        Backfill,
        Bridge,
        CalendarInfo,
        Gap,
        LabelRate,
        Preview,
        Run,
        Schedule,
        Timeline,
        TimerGroup,
    )

    __version__: str

__all__ = [
    "Backfill",
    "Bridge",
    "BridgeError",
    "BridgeTask",
    "CalendarInUse",
    "CalendarInfo",
    "CalendarNotFound",
    "DuplicateSchedule",
    "Gap",
    "LabelRate",
    "Preview",
    "Run",
    "RunSkipped",
    "Schedule",
    "ScheduleNotFound",
    "SendFailed",
    "Settings",
    "Timeline",
    "TimerGroup",
    "ValidationError",
    "__version__",
]

#: The module that defines each public name.
_HOMES = {
    "Backfill": "bridge.manage.api",
    "Bridge": "bridge.manage.api",
    "BridgeError": "bridge.errors",
    "BridgeTask": "bridge.celery.task",
    "CalendarInUse": "bridge.errors",
    "CalendarInfo": "bridge.manage.api",
    "CalendarNotFound": "bridge.errors",
    "DuplicateSchedule": "bridge.errors",
    "Gap": "bridge.manage.api",
    "LabelRate": "bridge.manage.api",
    "Preview": "bridge.manage.api",
    "Timeline": "bridge.manage.api",
    "TimerGroup": "bridge.manage.api",
    "Run": "bridge.manage.api",
    "RunSkipped": "bridge.errors",
    "Schedule": "bridge.manage.api",
    "ScheduleNotFound": "bridge.errors",
    "SendFailed": "bridge.errors",
    "Settings": "bridge.config",
    "ValidationError": "bridge.errors",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept in the package."""
    if name == "__version__":
        value: Any = importlib.import_module("bridge.version").__version__
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        # AttributeError, not another error: ``from bridge import clock`` relies on it to
        # import the submodule, and ``hasattr`` to answer False.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
