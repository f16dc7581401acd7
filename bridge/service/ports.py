"""What the services and the processes need of the message broker, and nothing more.

Beat, the workers and the services send runs, revoke them and send alerts,
but they do not import Celery: they are handed a :class:`Broker`. The one
implementation is the Celery adapter's
(:class:`bridge.celery.broker.CeleryBroker`), which the entry points build
from the app (``celery beat -S bridge``, ``bridge.recorder.install``, the
management :class:`~bridge.manage.api.Bridge`). Keeping Celery behind this
seam is what lets the fire sequence, the watchdog and the settlement of runs
be read, typed and tested as the scheduler's own logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from bridge.rules.runs import Envelope, Payload


class Outbox(Protocol):
    """A broker connection that batches of messages are published over.

    Beat keeps one for as long as it runs; it connects at the first publish
    and is dropped when the broker fails, so the next batch connects afresh.
    """

    def producer(self) -> Any:
        """The producer to hand :meth:`Broker.publish`, connected if it was not."""
        ...

    def begin(self) -> None:
        """Before a batch: forget a connection the broker has closed since the last one,
        so the batch is published over a new one rather than failing."""
        ...

    def errors(self) -> tuple[type[BaseException], ...]:
        """The errors that mean the broker cannot be reached or took a batch in part:
        the run is to be sent again later, not ended."""
        ...

    def drop(self) -> None:
        """Forget the connection (it failed, or beat stops), so the next send reconnects."""
        ...


class Broker(Protocol):
    """Sends runs' messages, revokes runs and sends alerts."""

    def publish(
        self, payload: Payload, envelope: Envelope, now: datetime, producer: Any = None
    ) -> None:
        """Send a recorded run's call at ``now``, with the envelope's run id, headers and
        expiry, over ``producer`` (an :class:`Outbox`'s) or a connection of its own."""
        ...

    def revoke(self, run_ids: Sequence[str], terminate: bool) -> None:
        """Revoke runs on every worker, and with ``terminate`` end those that execute."""
        ...

    def send_alert(self, task: str, payload: dict[str, Any]) -> None:
        """Send an alert to the user's alert task, its payload as the one argument."""
        ...

    def outbox(self) -> Outbox:
        """A connection of its own to publish batches over."""
        ...
