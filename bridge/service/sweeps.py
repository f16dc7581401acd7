"""Beat's sweeps: runs given up on, and the settlement of their schedules.

A run that went silent, whose worker died, or whose message expired before
any worker received it will never report. Left open it would block its
schedule's overlap check for good, so beat ends it, and settles its schedule
as it would a worker's report of that end (:mod:`bridge.service.settlement`):
a lost run may owe a retry, count towards the breaker, free a held
occurrence or start a fixed delay; an expired one is counted, and lets a
fixed delay or waiting work go.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from bridge.rules.decisions import Thresholds
from bridge.service.settlement import give_up, settle_runs
from bridge.storage.database import Database
from bridge.storage.housekeeping import (
    EXPIRED_UNRECEIVED,
    Housekeeping,
    LostRun,
    expire_sent,
    names_of,
)


class Sweeps:
    """Beat's sweeps against one database, and the gateway for its heartbeats
    (:attr:`store`), which decide nothing."""

    def __init__(self, database: Database, thresholds: Thresholds) -> None:
        self.store = Housekeeping(database)
        #: The app's alert thresholds, which settling a run's end applies.
        self.thresholds = thresholds

    @property
    def database(self) -> Database:
        return self.store.database

    def give_up(self, lost: Sequence[LostRun], now: datetime) -> list[LostRun]:
        """Mark ``lost`` LOST, each with its reason, and settle their schedules; returns them."""
        with self.database.session() as session:
            for reason in {run.reason for run in lost}:
                ids = [run.id for run in lost if run.reason == reason]
                give_up(session, ids, now, reason, self.thresholds)
        return list(lost)

    def sweep_stale(self, now: datetime, stale_after: timedelta, reason: str) -> list[LostRun]:
        """Mark ``LOST`` every open run silent for longer than ``stale_after``."""
        return self.give_up(self.store.stale_runs(now, stale_after, reason), now)

    def sweep_dead_workers(self, now: datetime, timeout: timedelta) -> list[LostRun]:
        """Mark ``LOST`` the runs held by workers that died, with the reason of each.

        A worker is dead when its heartbeat is older than ``timeout``, missing,
        or younger than the run's last change (it restarted since, under the
        same name). Runs changed within ``timeout`` are left alone: their
        worker was alive then, and its heartbeat may be a moment behind.
        """
        return self.give_up(self.store.runs_of_dead_workers(now, timeout), now)

    def expire_unreceived(self, cutoff: datetime, now: datetime, limit: int) -> list[LostRun]:
        """End, as ``REVOKED`` ``expired``, up to ``limit`` runs still ``SENT`` at ``cutoff``
        although their message expired before it, and settle their schedules; returns them.

        No worker has said it received such a run, so it never started: the
        broker dropped the message at its expiry (RabbitMQ turns Celery's
        expiry into a per-message TTL), or a worker will find it expired and
        discard it. Either way it will never run, and left ``SENT`` it would
        block its schedule until it went stale.
        """
        with self.database.session() as session:
            expired = expire_sent(session, cutoff, now, limit)
            if not expired:
                return []
            settle_runs(session, [run_id for run_id, _ in expired], now, self.thresholds)
            names = names_of(session, {sid for _, sid in expired if sid is not None})
        return [
            LostRun(run_id, None if sid is None else names.get(sid), EXPIRED_UNRECEIVED)
            for run_id, sid in expired
        ]
