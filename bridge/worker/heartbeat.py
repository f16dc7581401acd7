"""Worker heartbeats: how beat tells a dead worker's runs from long ones.

A run whose worker was killed (SIGKILL, the machine gone) never reports an
outcome. Waiting for silence alone (``bridge_stale_run_seconds``) would keep
its schedule blocked for as long as the longest task may take. So each worker
that installs the recorder writes a row into ``worker_instance`` every third
of ``bridge_worker_timeout``; beat marks a run ``LOST`` once the worker holding
it has been silent for the timeout, or has restarted since it took the run.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime

from bridge.clock import utcnow
from bridge.storage.database import DatabaseError, error_reason
from bridge.storage.records import RecordStore

logger = logging.getLogger("bridge.liveness")


class WorkerHeartbeat:
    """A daemon thread in the worker's main process that says it is alive."""

    def __init__(self, store: RecordStore, name: str, interval: float) -> None:
        self.store = store
        self.name = name
        self.interval = interval
        self.started_at = utcnow()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bridge-heartbeat", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and remove the row: the runs of a worker shut down cleanly are final."""
        self._stop.set()
        self._thread.join(self.interval + 5)
        try:
            self.store.forget_worker(self.name)
        except DatabaseError as exc:
            logger.warning("bridge: could not remove the heartbeat of %s (%s)", self.name, exc)

    def beat(self, now: datetime) -> None:
        self.store.beat(self.name, os.getpid(), self.started_at, now)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat(utcnow())
            except Exception as exc:
                # Whatever failed (an outage, an exhausted pool), the thread
                # must live on: without it beat takes this worker for dead.
                if not self._failing:
                    reason = error_reason(exc) if isinstance(exc, DatabaseError) else repr(exc)
                    logger.error("bridge: worker heartbeat failed (%s); retrying", reason)
                self._failing = True
            else:
                if self._failing:
                    logger.warning("bridge: worker heartbeat written again")
                self._failing = False
            self._stop.wait(self.interval)
