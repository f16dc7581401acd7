"""Worker heartbeats: how beat tells a dead worker's runs from long ones, and how the
workers tell that no beat runs.

A run whose worker was killed (SIGKILL, the machine gone) never reports an
outcome. Waiting for silence alone (``bridge_stale_run_seconds``) would keep
its schedule blocked for as long as the longest task may take. So each worker
that installs the recorder writes a row into ``worker_instance`` every third
of ``bridge_worker_timeout``; beat marks a run ``LOST`` once the worker holding
it has been silent for the timeout, or has restarted since it took the run.

The other way round, with no beat ticking no beat can raise the alarm: at
each heartbeat the workers look at beat's heartbeats, and once none has
ticked for ``bridge_no_beat_alert`` they open the scheduler's ``no_beat``
incident and send its alert. The silence counts from the last tick any beat
made, which outlives a beat's clean stop, so a restart pages nobody. The
first beat back closes it, and sends the recovery.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.notify import Notifier
from bridge.rules.words import short_duration
from bridge.service import alerting
from bridge.service.ports import Broker
from bridge.storage.database import DatabaseError, error_reason
from bridge.storage.health import HealthStore
from bridge.storage.incidents import IncidentStore, Opening
from bridge.storage.records import RecordStore

logger = logging.getLogger("bridge.liveness")


class WorkerHeartbeat:
    """A daemon thread in the worker's main process that says it is alive."""

    def __init__(
        self,
        store: RecordStore,
        name: str,
        interval: float,
        watch: Callable[[datetime], None] = lambda now: None,
    ) -> None:
        self.store = store
        self.name = name
        self.interval = interval
        #: Called after each heartbeat: the watch on beat.
        self.watch = watch
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
                self._watch()
            self._stop.wait(self.interval)

    def _watch(self) -> None:
        """The watch on beat, whose failure (an alert the broker refused) is only logged."""
        try:
            self.watch(utcnow())
        except Exception as exc:
            reason = error_reason(exc) if isinstance(exc, DatabaseError) else repr(exc)
            logger.error("bridge: the watch on beat failed (%s)", reason)


class BeatWatch:
    """A worker's watch on beat: an incident, and its alert, when no beat ticks."""

    def __init__(self, broker: Broker, settings: Settings, store: RecordStore) -> None:
        self.broker = broker
        self.settings = settings
        self.incidents = IncidentStore(store.database)
        self.health = HealthStore(store.database)
        self.started_at = utcnow()
        self.notifier: Notifier | None = None
        try:
            self.notifier = alerting.notifier_of(settings)
        except BridgeError as exc:  # beat refuses to start on it; a worker works on
            logger.error("bridge: no alert goes to the alert URLs: %s", exc)

    def __call__(self, now: datetime) -> None:
        # The last tick any beat made, which a clean stop keeps (beat_instance.stopped_at);
        # before any beat ever ticked, silence counts from this worker's start.
        silent_since = self.health.last_tick() or self.started_at
        silence = now - silent_since
        if silence <= timedelta(seconds=self.settings.no_beat_alert):
            return
        message = f"no beat instance has ticked for {short_duration(silence)}: no schedule fires"
        self.incidents.open([Opening("no_beat", None, None, silent_since, message)], now)
        if self.settings.alerting:
            repeat = timedelta(seconds=self.settings.alert_repeat)
            alerting.send_alerts(
                self.broker,
                self.incidents,
                self.settings.alert_task,
                repeat,
                scheduler_only=True,
                notifier=self.notifier,
            )
