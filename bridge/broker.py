"""Sending runs to the broker: publishing a run's message and revoking runs.

The one part of the bridge, besides the worker signals, that talks to Celery's
broker. Beat (scheduled runs) and the management API (manual runs, backfills,
cancels) both send through it, so every message carries the same headers and
options.
"""

from __future__ import annotations

import importlib
from datetime import datetime
from typing import Any

from celery import Celery

from bridge.extras import EXTRA_MODULES, EXTRA_OF_SCHEME, MissingExtra, scheme_of
from bridge.rules.kinds import Trigger
from bridge.rules.runs import (
    HEADER_PLAN_TIME,
    HEADER_SCHEDULE,
    HEADER_SCHEDULE_ID,
    HEADER_TRIGGER,
    Payload,
)


def publish(
    app: Celery,
    payload: Payload,
    *,
    run_id: str,
    schedule_id: int,
    schedule_name: str,
    plan_time: datetime,
    trigger: Trigger,
    expires: datetime | None = None,
    producer: Any = None,
) -> None:
    """Send the run's message with ``task_id`` = run id and headers naming its occurrence.

    ``expires`` (from :func:`expires_at`; None: never) replaces the
    ``expires`` of the payload's options, so the message expires exactly
    when its record says.
    """
    options = dict(payload.options)
    options.pop("expires", None)
    if expires is not None:
        options["expires"] = expires
    headers = dict(options.pop("headers", {}))
    headers |= {
        HEADER_SCHEDULE: schedule_name,
        HEADER_SCHEDULE_ID: schedule_id,
        HEADER_PLAN_TIME: plan_time.isoformat(),
        HEADER_TRIGGER: trigger.value,
    }
    app.send_task(
        payload.task,
        args=payload.args,
        kwargs=payload.kwargs,
        task_id=run_id,
        headers=headers,
        producer=producer,
        **options,
    )


def revoke(app: Celery, run_ids: list[str]) -> None:
    """Revoke runs and terminate them where they already execute (overlap ``replace``).

    The revoke is broadcast to every worker, which also discards a message it
    has not started yet; the caller marks the records ``REVOKED``.
    """
    if run_ids:
        app.control.revoke(run_ids, terminate=True, signal="SIGTERM")


def check_broker(app: Any) -> None:
    """Import what the app's broker transport needs now, so a missing library is one
    line naming its extra rather than an error from deep inside kombu.

    For a scheme an extra covers, its modules are imported first: kombu's
    own failure when one is missing can be an unrelated ``AttributeError``
    raised while its transport module loads. Then the transport is built,
    which imports anything else it needs but opens no connection.
    """
    scheme = scheme_of(str(app.conf.broker_url or "amqp://"))
    try:
        for module in EXTRA_MODULES.get(EXTRA_OF_SCHEME.get(scheme, ""), ()):
            importlib.import_module(module)
        connection = app.connection_for_write()
        try:
            connection.transport  # noqa: B018 - imports and builds the transport
        finally:
            connection.release()
    except ImportError as exc:
        raise MissingExtra("broker_url", scheme, exc) from None
