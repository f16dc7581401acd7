"""A run's identity, its record and its message, as values: nothing is sent or written here.

Shared by beat (scheduled runs), the management API (manual runs and
backfills) and the workers (which recognise the bridge's messages by their
headers), so that every run carries the same id scheme, headers and options.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.rules.canvas import Canvas, stored_canvas
from bridge.rules.kinds import RunStatus, Trigger
from bridge.rules.options import check_options
from bridge.rules.values import json_value

#: Namespace of the deterministic run ids: one id per (schedule, plan time, attempt).
RUN_ID_NAMESPACE = uuid.UUID("6f0b7c2e-5d1a-4c1e-9a8e-2b6f3c1d9e47")

#: Message headers that tell a worker a task was sent by the bridge.
HEADER_SCHEDULE = "bridge_schedule"
HEADER_SCHEDULE_ID = "bridge_schedule_id"
HEADER_PLAN_TIME = "bridge_plan_time"
HEADER_TRIGGER = "bridge_trigger"


def run_id_for(schedule_id: int, plan_time: datetime, attempt: int = 1) -> str:
    """The run id of an occurrence: the same whoever computes it, so re-doing a fire
    after a crash finds the record instead of writing a second one.

    A version 8 UUID laid out as a UUIDv7 is: its first 48 bits are the plan
    time in milliseconds, the rest (but the version and variant bits) a
    SHA-1 of the namespace, the schedule id, the plan time in UTC and the
    attempt, as a UUIDv5 would hash them. Ordered by plan time, new records
    go to the end of the id index, as they do to the other indexes of
    ``task_execution``: with random ids each record of a burst dirtied a
    page of its own in an index of millions of entries.
    """
    instant = plan_time.astimezone(UTC)
    name = f"{schedule_id}/{instant.isoformat()}/{attempt}".encode()
    digest = hashlib.sha1(RUN_ID_NAMESPACE.bytes + name, usedforsecurity=False).digest()
    millis = int(instant.timestamp() * 1000) % (1 << 48)
    value = int.from_bytes(millis.to_bytes(6, "big") + digest[:10], "big")
    value = value & ~(0xF << 76) | (0x8 << 76)  # version 8
    value = value & ~(0x3 << 62) | (0x2 << 62)  # the RFC 9562 variant
    return str(uuid.UUID(int=value))


def ids_of_occurrence(schedule_id: int, plan_time: datetime, attempt: int = 1) -> frozenset[str]:
    """Every id a release of the bridge gave this occurrence: :func:`run_id_for`'s, and the
    UUIDv5 of releases before the ids were ordered by time, so that the record of a fire
    cut short just before an upgrade is still found to be that fire's own."""
    name = f"{schedule_id}/{plan_time.astimezone(UTC).isoformat()}/{attempt}"
    return frozenset(
        {run_id_for(schedule_id, plan_time, attempt), str(uuid.uuid5(RUN_ID_NAMESPACE, name))}
    )


@dataclass(frozen=True)
class Envelope:
    """What a run's message says of the run besides its call.

    Its id is the message's task id; the schedule, the occurrence and the
    trigger go in headers, which is how a worker knows the bridge sent it;
    the expiry (None: never) replaces any ``expires`` of the schedule's
    options, so the message expires exactly when the run's record says.
    """

    run_id: str
    schedule_id: int
    schedule_name: str
    plan_time: datetime
    trigger: Trigger
    expires: datetime | None = None
    #: The headers of the run's span (W3C ``traceparent``), when beat traces its runs.
    trace: tuple[tuple[str, str], ...] = ()

    def headers(self) -> dict[str, Any]:
        return {
            **dict(self.trace),
            HEADER_SCHEDULE: self.schedule_name,
            HEADER_SCHEDULE_ID: self.schedule_id,
            HEADER_PLAN_TIME: self.plan_time.isoformat(),
            HEADER_TRIGGER: self.trigger.value,
        }


@dataclass(frozen=True)
class Payload:
    """A schedule's call, decoded and checked."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    #: The canvas sent instead of the task alone (None: the task alone).
    canvas: Canvas | None = None

    @classmethod
    def decode(
        cls, task: str, args: str, kwargs: str, options: str, signature: str | None = None
    ) -> Payload:
        """Parse the JSON columns of a row; raises :class:`ValidationError` on bad content."""
        return cls(
            task=task,
            args=json_value("args", args, list, "a JSON list"),
            kwargs=json_value("kwargs", kwargs, dict, "a JSON object"),
            options=check_options(json_value("options", options, dict, "a JSON object")),
            canvas=None if signature is None else stored_canvas(signature),
        )

    @property
    def ends(self) -> int | None:
        """How many of its tasks' successes end a run of it (None: one task's)."""
        return None if self.canvas is None else self.canvas.ends


def new_run(
    schedule_id: int,
    task: str,
    plan_time: datetime,
    trigger: Trigger,
    now: datetime,
    run_id: str | None = None,
    attempt: int = 1,
    ends: int | None = None,
) -> dict[str, Any]:
    """The ``task_execution`` row of a run about to be sent (``ends``: of a canvas, how many
    of its tasks' successes end it)."""
    return {
        "id": run_id or run_id_for(schedule_id, plan_time, attempt),
        "periodic_task_id": schedule_id,
        "task": task,
        "plan_time": plan_time,
        "attempt": attempt,
        "trigger": trigger.value,
        "status": RunStatus.PENDING.value,
        "updated_at": now,
        "canvas_left": ends,
    }


def expires_at(payload: Payload, sent: datetime, policy: float | None) -> datetime | None:
    """When a run's message sent at ``sent`` expires, or None if never.

    An ``expires`` in the schedule's own options (seconds) wins over the
    ``expires`` policy's ``policy`` seconds (None: the policy sets none). The
    instant is computed here rather than by Celery so that the run's record
    can hold the same one: a run still ``SENT`` after it was never received.
    """
    seconds = payload.options.get("expires", policy)
    return None if seconds is None else sent + timedelta(seconds=seconds)
