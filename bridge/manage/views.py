"""Read-only views of schedules, runs and beat instances, as the API returns them.

Frozen values copied from the table rows, so that they can be passed
around, compared and turned into JSON (:meth:`to_json`: times in ISO-8601
UTC, the JSON columns decoded) without a database session.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, Self

from bridge.rules.timers import parse_timer
from bridge.rules.values import json_or_text


def _iso(value: Any) -> Any:
    return value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value


class _View:
    """Shared conversion of a table row into a frozen, detached view."""

    @classmethod
    def of(cls, row: Any) -> Self:
        return cls(**{field.name: getattr(row, field.name) for field in fields(cls)})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields: times as ISO-8601 UTC, JSON columns decoded."""
        out = {field.name: _iso(getattr(self, field.name)) for field in fields(self)}  # type: ignore[arg-type]
        for key in ("args", "kwargs", "options"):
            if key in out:
                out[key] = json_or_text(out[key])
        return out


@dataclass(frozen=True)
class Schedule(_View):
    """A schedule as stored in ``periodic_task``."""

    id: int
    name: str
    task: str
    timer: str
    timezone: str
    args: str
    kwargs: str
    options: str
    enabled: bool
    nextrun: datetime | None
    next_occurrence: datetime | None
    anchor: datetime
    overlap: str
    catchup: str
    catchup_window: float | None
    jitter: float
    start_at: datetime | None
    end_at: datetime | None
    remaining: int | None
    max_failures: int | None
    max_attempts: int
    backoff: str | None
    expires: str
    held: datetime | None
    retry_plan: datetime | None
    retry_attempt: int | None
    retry_at: datetime | None
    failure_streak: int
    source: str
    note: str | None
    broken: bool
    created_at: datetime
    updated_at: datetime
    last_run_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    total_run_count: int
    skipped_count: int
    missed_count: int
    expired_count: int
    worker: str | None
    marked: datetime | None

    @property
    def fixed_delay(self) -> bool:
        """Whether the timer counts from the previous run's completion (``... after completion``).

        Such a schedule has no next run while a run is open: it is set when that run ends.
        """
        try:
            timer = parse_timer(self.timer, self.timezone, self.anchor)
        except ValueError:  # a bad stored timer or zone is reported where it is used
            return False
        return timer.fixed_delay


@dataclass(frozen=True)
class Run(_View):
    """One run, as recorded in ``task_execution``."""

    id: str
    task: str
    plan_time: datetime | None
    attempt: int
    trigger: str
    status: str
    queued_at: datetime | None
    expires_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    runtime: float | None
    worker: str | None
    result: str | None
    error: str | None
    traceback: str | None


@dataclass(frozen=True)
class Backfill:
    """What :meth:`Bridge.backfill` did."""

    #: The runs recorded and sent, oldest occurrence first.
    created: list[Run]
    #: Occurrences of the range already recorded (by beat or an earlier backfill); not sent again.
    existing: int


@dataclass(frozen=True)
class Instance(_View):
    """A beat instance, from its heartbeat in ``beat_instance``."""

    id: str
    host: str
    pid: int
    started_at: datetime
    last_tick: datetime
    sent: int


@dataclass(frozen=True)
class Status:
    """What ``bridge status`` shows: who ticks, and how far behind the schedules are."""

    instances: builtins.list[Instance]
    #: Enabled schedules due now that no instance holds (or whose mark expired).
    due_unclaimed: int
    #: How long the most overdue enabled schedule has been due, in seconds (None: none is).
    worst_lateness: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": [instance.to_json() for instance in self.instances],
            "due_unclaimed": self.due_unclaimed,
            "worst_lateness": self.worst_lateness,
        }


__all__ = ["Backfill", "Instance", "Run", "Schedule", "Status"]
