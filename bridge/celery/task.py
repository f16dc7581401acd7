"""``BridgeTask``: a task base class that runs each bridge run's body at most once.

A broker may deliver one message twice (a redelivery with ``acks_late``, a
re-publish after beat crashed between sending and recording it). For a task
declared with ``@app.task(base=BridgeTask)``, the start of a run is a
compare-and-set on its record: only the delivery that moves the record from
a not-yet-started status (``PENDING``, ``SENT``, ``RECEIVED``, ``RETRY``) to
``STARTED`` runs the body; any other delivery of the same run is dropped and
logged, and records nothing.

It needs the recorder (:func:`bridge.recorder.install`) on the workers. A
task the bridge did not send, or called directly, runs as usual; so does a
run whose record cannot be read because the database is down (logged), as
refusing every task during an outage would be worse than a rare duplicate.
Of a run that sends a canvas, the guard holds for its first task, whose id is
the run's: the rest of a chain or chord is sent only once that task has run.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from bridge.celery import recorder
from bridge.rules.canvas import run_of

logger = logging.getLogger("bridge.task")


class BridgeTask(Task):  # type: ignore[misc]
    """Runs the body of one bridge run once, however often its message is delivered."""

    #: Tells the recorder this task records its own start.
    starts_once = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_duplicate():
            # Ignored, not a success: a chain or chord of the run must not go on from a
            # delivery that did not run (Celery would send the next task, or count a part
            # of a chord's header again, with None for its result).
            raise Ignore()
        return super().__call__(*args, **kwargs)

    def _is_duplicate(self) -> bool:
        """Whether another delivery of this run has started it; marks the request if so."""
        request = self.request
        if (
            getattr(request, "called_directly", True)
            or not recorder.sent_by_bridge(request.headers)
            or not run_of(request.id, request.headers)[1]
        ):
            return False  # not a bridge run, or a task of a canvas after its first
        if recorder.install(self.app).start_once(request.id, request.hostname):
            return False
        setattr(request, recorder.DUPLICATE, True)
        logger.warning(
            "bridge: duplicate delivery of run %s of %s dropped: it has started already",
            request.id,
            self.name,
        )
        return True
