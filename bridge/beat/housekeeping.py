"""Beat's housekeeping between fires: its heartbeat, and the runs that will never report.

Each job runs at its own pace, whichever instance's tick comes first:

* the heartbeat in ``beat_instance``, about once a second, for ``bridge status``;
* the sweep for runs whose worker died (judged only once this instance has
  reached the database for a whole worker timeout: after an outage, workers
  need that long to write their heartbeats again) and for runs silent for
  ``bridge_stale_run_seconds``, every few seconds; beat instances gone
  silent are forgotten at the same pace;
* the end of sent runs whose message expired before any worker received it
  (a broker may drop such a message unseen: RabbitMQ does), every second.

The sweeps wait while beat's claims are full (a burst, a backlog), for
:data:`PUT_OFF_AT_MOST` seconds at most. The runs of every-minute schedules
that no worker took all expire together, as the next burst falls due: ending
them then, 500 a second, each settling its schedule's row under a lock,
competed with the burst for beat's thread and for those rows, and halved it
(docs/performance.md, Lag and memory). What they end can wait for the
burst: only under overlap ``skip`` does a run ended later block an
occurrence falling due meanwhile, and only for that long.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime, timedelta

from bridge.beat.fire import lost_reason, report_lost
from bridge.config import Settings
from bridge.rules.turns import put_off
from bridge.service.sweeps import Sweeps
from bridge.storage.housekeeping import LostRun

logger = logging.getLogger("bridge.scheduler")

#: How often beat looks for silent runs of any schedule.
SWEEP_SECONDS = 10.0
#: How often beat writes its heartbeat into ``beat_instance``.
HEARTBEAT_SECONDS = 1.0
#: How long the heartbeat of a silent worker is kept after its runs were given up on.
WORKER_EXPIRY = 3600.0
#: How often beat looks for sent runs whose message expired before a worker received it.
EXPIRY_SWEEP_SECONDS = 1.0
#: How long after its message's expiry a run no worker has reported receiving
#: is ended as expired: time for a worker that received it just in time to say so.
EXPIRY_GRACE = 2.0
#: The most runs one look ends as expired; the rest follow at the next.
EXPIRY_BATCH = 500
#: The longest the sweeps wait for beat's claims to be less than full.
PUT_OFF_AT_MOST = 30.0


class Housekeeper:
    """The housekeeping of one beat instance; see the module docstring."""

    def __init__(
        self, sweeps: Sweeps, settings: Settings, instance: str, started_at: datetime
    ) -> None:
        self.sweeps = sweeps
        self.store = sweeps.store
        self.settings = settings
        self.instance = instance
        self.started_at = started_at
        self._next_sweep = 0.0
        self._next_expiry_sweep = 0.0
        self._next_heartbeat = 0.0
        #: Since when beat's claims have been full (None: the last one was not).
        self._busy_since: float | None = None
        #: Since when this instance has reached the database without a break
        #: (None: not since the last failure).
        self._reachable_since: datetime | None = None

    def run(self, now: datetime, sent: int, busy: bool = False) -> None:
        """Do what is due: the heartbeat (``sent`` runs so far), the sweeps, the expiries;
        the sweeps wait while beat is ``busy`` (its claim was full; see the module
        docstring)."""
        self._heartbeat(now, sent)
        at = time.monotonic()
        self._busy_since = (at if self._busy_since is None else self._busy_since) if busy else None
        if put_off(self._busy_since, at, PUT_OFF_AT_MOST):
            return
        self._sweep(now)
        self._expire_unreceived(now)

    def database_lost(self) -> None:
        """The database failed: workers could not write their heartbeats either, so they
        get a whole timeout once it is back before they are judged."""
        self._reachable_since = None

    def forget_self(self, now: datetime) -> None:
        """Mark this instance stopped as it stops (its row keeps its last tick, which the
        workers' watch on beat counts the silence from), and forget silent instances."""
        self.store.stopped(self.instance, now)
        self.store.forget_instances(self._instance_expiry(now))

    def _heartbeat(self, now: datetime, sent: int) -> None:
        if time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        host, pid = socket.gethostname(), os.getpid()
        self.store.heartbeat(self.instance, host, pid, self.started_at, now, sent)

    def _instance_expiry(self, now: datetime) -> datetime:
        """Instances that have not ticked since then are gone: three leases, at least a minute."""
        return now - timedelta(seconds=max(60.0, 3 * self.settings.lease_seconds))

    def _sweep(self, now: datetime) -> None:
        """Give up on runs that went silent or whose worker died, whichever schedule they are of.

        Without it a run whose worker died would block a rarely due schedule
        until its next occurrence, and a fixed delay or held run would wait forever.
        """
        if time.monotonic() < self._next_sweep:
            return
        timeout = self.settings.worker_timeout
        self._next_sweep = time.monotonic() + min(SWEEP_SECONDS, timeout / 2)
        lost: list[LostRun] = []
        if self._reachable_since is None:
            self._reachable_since = now
        if now - self._reachable_since >= timedelta(seconds=timeout):
            lost += self.sweeps.sweep_dead_workers(now, timedelta(seconds=timeout))
            self.store.forget_workers(now - timedelta(seconds=max(WORKER_EXPIRY, timeout)))
        stale = self.settings.stale_run_seconds
        lost += self.sweeps.sweep_stale(now, timedelta(seconds=stale), lost_reason(stale))
        report_lost(lost)
        self.store.forget_instances(self._instance_expiry(now))

    def _expire_unreceived(self, now: datetime) -> None:
        """End the sent runs whose message expired before any worker received it, once a
        grace has passed for a worker that took one just in time to record so."""
        if time.monotonic() < self._next_expiry_sweep:
            return
        self._next_expiry_sweep = time.monotonic() + EXPIRY_SWEEP_SECONDS
        cutoff = now - timedelta(seconds=EXPIRY_GRACE)
        for run in self.sweeps.expire_unreceived(cutoff, now, EXPIRY_BATCH):
            owner = "no schedule" if run.schedule is None else repr(run.schedule)
            logger.info("bridge: run %s of %s ended REVOKED: %s", run.id, owner, run.reason)
