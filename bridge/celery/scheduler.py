"""The Celery beat scheduler class: ``celery beat -S bridge``.

Celery's beat service calls :meth:`DatabaseScheduler.tick` in a loop and
sleeps for the number of seconds it returns. Each tick claims the rows that
are due, runs the fire sequence on them (:mod:`bridge.beat.fire`), keeps
house (:mod:`bridge.beat.housekeeping`) and returns the time until the
earliest ``nextrun``, capped by the poll interval so that changes made from
outside are seen promptly. Beat holds no copy of the schedule: the table is
the schedule.

This module is Celery's contract only: building the parts from the
settings (and the broker they send through, :class:`~bridge.celery.broker.CeleryBroker`),
the tick, a stop that finishes the fire in hand, and closing.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any

from celery.beat import Scheduler

from bridge.beat.fire import FireSequence
from bridge.beat.housekeeping import Housekeeper
from bridge.beat.metrics import BeatMetrics, beat_metrics
from bridge.beat.outage import Guard
from bridge.beat.schema import REFUSED_STATUS, SchemaWatch
from bridge.beat.watchdog import Watchdog
from bridge.celery.beat_schedule import sync_beat_schedule
from bridge.celery.broker import CeleryBroker, check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError, ValidationError
from bridge.rules.decisions import catchup_share, wait_seconds
from bridge.rules.fire import fires_of_backlog
from bridge.service import alerting
from bridge.service.fire import Firing
from bridge.service.sweeps import Sweeps
from bridge.storage.beat import Claimed, Row
from bridge.storage.database import Database, DatabaseError, shown_url
from bridge.tracing import Tracer

if TYPE_CHECKING:
    from bridge.storage.listener import ChangeListener
    from bridge.storage.presence import InstanceLock

logger = logging.getLogger("bridge.scheduler")

#: The wait after a tick in which firing a row hit a defect.
DEFECT_BACKOFF = 2.0
#: The rows the first tick of a burst claims; each full tick doubles it up to the batch
#: size. A first batch of 500 would hold its first message back for its whole record; one
#: of 50 held it 0.10 to 0.13 s on a slow machine, one of 25 under 0.09 s, at the same rate.
FIRST_BATCH = 25
#: Seconds beat waits on exit for the batch still finishing (see FireSequence.close).
CLOSE_FINISHING = 10.0


@contextmanager
def _fatal_at_start() -> Iterator[None]:
    """A setting beat cannot work with ends it with one line naming it, not a traceback.

    Raised while Celery builds the scheduler, ``SystemExit`` leaves beat with
    status 1 and the message on stderr; the scheduler's own errors, raised
    later, are logged and retried instead.
    """
    try:
        yield
    except BridgeError as exc:
        raise SystemExit(f"Error: {exc}") from None


def check_alert_task(app: Any, settings: Settings) -> None:
    """``bridge_alert_task`` must name a task the app registers: an alert sent to a name
    no worker knows would be lost without a word."""
    if not settings.alert_task:
        return
    app.loader.import_default_modules()
    if settings.alert_task not in app.tasks:
        raise ValidationError(
            "bridge_alert_task", settings.alert_task, "a task registered in the app"
        )


def instance_id() -> str:
    """A beat instance's identity in ``periodic_task.worker``: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class DatabaseScheduler(Scheduler):  # type: ignore[misc]
    """Beat scheduler reading the ``periodic_task`` table."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        app = kwargs.get("app", args[0] if args else None)
        with _fatal_at_start():
            self.settings = Settings.from_app(app)
            # Without pre-ping, which would cost a round trip per transaction,
            # about half of those of a lone fire. A connection the server dropped
            # fails its statement instead; SQLAlchemy then discards the whole
            # pool, and the tick is retried like any other database error.
            self.database = Database(self.settings.database_url, pre_ping=False)
        self.instance = instance_id()
        self.metrics = BeatMetrics()
        self.firing = Firing(self.database, self.settings.thresholds)
        self.store = self.firing.store
        self.schema = SchemaWatch(self.database)
        self.housekeeper = Housekeeper(
            Sweeps(self.database, self.settings.thresholds), self.settings, self.instance, utcnow()
        )
        self.guard = Guard(
            on_database_lost=self._database_lost,
            on_trouble=lambda kind: self.metrics.outage(kind),
        )
        broker = CeleryBroker(app)
        self.fires = FireSequence(
            broker, self.settings, self.firing, self.housekeeper.sweeps, self.instance
        )
        self.watchdog = Watchdog(
            broker, self.settings, self.database, self.quiet_for, lambda: self.schema.matched
        )
        self._config_synced = not self.settings.sync_beat_schedule
        #: The rows the next tick claims at most (see FIRST_BATCH).
        self._batch = min(FIRST_BATCH, self.settings.batch_size)
        #: When the last two claims were made, the older first (see _tick).
        self._claims: tuple[datetime | None, datetime | None] = (None, None)
        #: Until when beat sleeps between two ticks (``time.monotonic()``); 0 in a tick.
        self._asleep_until = 0.0
        self._busy = False
        self._stopping = False
        #: Whether the last tick that claimed stopped half-way (an outage, a defect): it
        #: may have left rows marked that the next claim takes back.
        self._tick_unfinished = False
        self._closed = False
        #: Wakes beat when a schedule changes (PostgreSQL); None: Celery's loop sleeps.
        self._changes: ChangeListener | None = None
        #: Tells the other instances this one is alive (PostgreSQL); None: the lease does.
        self._presence: InstanceLock | None = None
        super().__init__(*args, **kwargs)

    # -- beat contract -----------------------------------------------------

    def setup_schedule(self) -> None:
        """Called once when beat really starts (never for the lazy banner instance)."""
        self._install_stop_handler()
        logger.info("bridge: beat instance %s on %s", self.instance, self._shown_url())
        # First: before beat opens its connections and starts its threads.
        self.fires.start()
        with _fatal_at_start():
            check_broker(self.app)
            check_alert_task(self.app, self.settings)
            self.watchdog.notifier = alerting.notifier_of(self.settings)
            self.fires.tracer = Tracer() if self.settings.tracing else None
            self.schema.at_start()
            driver = self.database.engine.dialect.driver
            self.metrics = self.fires.metrics = beat_metrics(self.settings)
        if driver in ("psycopg", "pymysql"):
            from bridge.storage.presence import InstanceLock

            self._presence = InstanceLock(self.database, self.instance)
        if driver == "psycopg":
            from bridge.storage.listener import ChangeListener

            self._changes = ChangeListener(self.database)
        if not self._config_synced:
            self._busy = True
            try:
                self.guard.run(self._sync_config)
            finally:
                self._busy = False
        self.watchdog.start()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Fire what is due, then say how long to sleep, or sleep here until a change.

        With a change listener (PostgreSQL) the sleep happens here, so that a
        notification ends it; Celery's loop then calls again at once. The
        sleep is not "busy": SIGTERM ends it straight away.
        """
        if self._stopping:
            raise SystemExit()
        self._asleep_until = 0.0
        self._busy = True
        try:
            wait = self.guard.run(self._tick)
        finally:
            self._busy = False
        if self._stopping:
            raise SystemExit()
        self._asleep_until = time.monotonic() + wait
        if self._changes is None:
            return wait
        self._changes.wait(wait)
        self._asleep_until = 0.0  # a change may have ended the sleep early
        return 0.0

    def quiet_for(self) -> float:
        """Seconds left before beat's next tick while it sleeps between two, else 0: the
        time the watchdog may prune in (asked from its thread). A burst or a backlog
        (full batches) leaves none."""
        return max(0.0, self._asleep_until - time.monotonic())

    def close(self) -> None:
        """Finish the batch in hand, clear every mark this instance holds, then release
        the broker connection.

        Beat calls this twice on SIGTERM (from its signal handler and on the
        way out); the second call has nothing left to do. After a stop on a
        schema beat does not match, the first call ends the process with
        :data:`~bridge.beat.schema.REFUSED_STATUS`.
        """
        refused = not self._closed and self.schema.refused is not None
        if not self._closed:
            self._closed = True
            try:
                self.fires.close(timeout=CLOSE_FINISHING)
            except Exception as exc:
                logger.warning(
                    "bridge: the last batch was not finished on exit (%r); its rows are"
                    " resumed from their records",
                    exc,
                )
            try:
                self.store.release(self.instance)
                self.housekeeper.forget_self(utcnow())
            except DatabaseError as exc:
                logger.warning("bridge: could not clear marks on exit (%s); they expire", exc)
            if self._changes is not None:
                self._changes.close()
            if self._presence is not None:
                self._presence.close()
            self.watchdog.stop()
            self.fires.outbox.drop()
        super().close()
        if refused and threading.current_thread() is threading.main_thread():
            # Celery's loop takes the SystemExit that stopped it for a clean stop, which
            # would leave the process with status 0; it closes the scheduler on its way
            # out, so the status is set here. A beat run on a thread of another process
            # (embedded, threaded) has no status of its own to set.
            raise SystemExit(REFUSED_STATUS)

    @property
    def info(self) -> str:
        return f"    . database -> {self._shown_url()}"

    # -- the tick ----------------------------------------------------------

    def _database_lost(self) -> None:
        self.housekeeper.database_lost()
        self.schema.recheck()

    def _tick(self) -> float:
        self.schema.before_tick()
        if not self._config_synced:
            self._sync_config()
        started = time.perf_counter()
        resting, due = self._resting()
        if resting:
            # Nothing due: what a claim would find, for a third of its statements.
            self.metrics.ticked(time.perf_counter() - started, 0)
            self.housekeeper.run(utcnow(), self.fires.sent, busy=False)
            # Counted from after housekeeping, which may take a while.
            return wait_seconds(due, utcnow(), self.settings.poll_interval)
        limit = self._batch
        self._tick_unfinished = True
        claimed = self._claim(limit)
        count = len(claimed.on_time) + len(claimed.behind)
        full = count >= limit
        self._batch = (
            min(limit * 2, self.settings.batch_size)
            if full
            else min(FIRST_BATCH, self.settings.batch_size)
        )
        fired = self._fire(claimed.on_time, full)
        share = catchup_share(len(claimed.behind), self.settings.batch_size, full)
        backlog = fires_of_backlog(claimed.behind, share, self.settings.batch_size)
        for i, rows in enumerate(backlog):
            if self._stopping:
                self.store.release(self.instance, [row.id for part in backlog[i:] for row in part])
                break
            if i and not self.fires.troubled:
                # What fell due during the fire before goes ahead of the rest (not after a
                # defect: a row that hits one on every fire waits for the pause after the tick).
                due_now = self._claim(limit, behind=False).on_time
                count += len(due_now)
                fired += self._fire(due_now, full)
            fired += self._fire(rows, full, share)
        if not full or self._stopping:
            self.fires.finish()
        took = time.perf_counter() - started
        self.metrics.ticked(took, count)
        logger.debug("bridge: tick claimed %d fired %d in %.1f ms", count, fired, took * 1000)
        # Housekeeping after the fire, which is what the wake-up was timed for.
        self.housekeeper.run(utcnow(), self.fires.sent, busy=full)
        self._tick_unfinished = False
        if self.fires.troubled:
            self.fires.troubled = False
            return DEFECT_BACKOFF
        if full:
            return 0.0
        now = utcnow()
        due = self.store.next_due(now, timedelta(seconds=self.settings.lease_seconds))
        return wait_seconds(due, now, self.settings.poll_interval)

    def _resting(self) -> tuple[bool, datetime | None]:
        """Whether no row is due, which counts as an empty claim, and if so the earliest
        ``nextrun`` (None: none at all); ``(False, None)`` when a claim may find rows.

        The earliest ``nextrun`` no live instance holds is one read of the due
        index, where a claim runs a statement for each of its parts: a beat at
        rest ticks every poll interval. After a tick that failed half-way, the
        claim runs regardless: it takes back the rows that tick left marked, which
        the earliest ``nextrun`` leaves out as held by a live instance (this one).
        So does a tick while a batch is still being finished: the claim's tick
        collects how it ended.
        """
        if self._tick_unfinished or self.fires.finishing:
            return False, None
        now = utcnow()
        # As a claim would, a look-up that fails (an outage) starts the count again.
        claims, self._claims = self._claims, (None, None)
        due = self.store.next_due(now, timedelta(seconds=self.settings.lease_seconds))
        if due is not None and due <= now:
            self._claims = claims
            return False, None
        # As an empty claim would: the rows falling due from now on are on time, and the
        # next claim takes a first batch.
        self._claims = (claims[1], now)
        self._batch = min(FIRST_BATCH, self.settings.batch_size)
        return True, due

    def _claim(self, limit: int, behind: bool = True) -> Claimed:
        """Mark up to ``limit`` due rows for this instance, on time first (see
        :meth:`~bridge.storage.beat.BeatStore.claim_due`)."""
        if self._presence is not None:
            # Before each claim: a mark made without the lock would be taken over at once.
            self._presence.hold()
        now = utcnow()
        # Rows due since the claim before the last are on time: a row of the batch still
        # finishing sits out the next claim, and may fall due again meanwhile. A claim
        # that fails (an outage) starts the count again, lest a whole outage count as now.
        (before, last), self._claims = self._claims, (None, None)
        claimed = self.store.claim_due(
            self.instance,
            now,
            timedelta(seconds=self.settings.lease_seconds),
            limit,
            besides=self.fires.finishing,
            since=before,
            behind=behind,
        )
        self._claims = (last, now)
        return claimed

    def _fire(self, rows: list[Row], full: bool, catchup_limit: int | None = None) -> int:
        """The fire sequence on these claimed rows, if any; the runs published."""
        if not rows:
            return 0
        return self.fires.fire(rows, lambda: self._stopping, full, catchup_limit)

    # -- signals, config ---------------------------------------------------

    def _sync_config(self) -> None:
        """Upsert ``beat_schedule``; a defect here is logged, never fatal to beat."""
        self.schema.before_tick()  # the sync writes schedules: not into a schema beat refuses
        try:
            sync_beat_schedule(self.app, self.database)
        except DatabaseError:
            raise
        except Exception:
            logger.exception("bridge: beat_schedule sync failed; the table is used as it is")
        self._config_synced = True

    def _install_stop_handler(self) -> None:
        """Let SIGTERM/SIGINT finish the fire in hand before beat's own handler runs."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)

            def handler(received: int, frame: FrameType | None, previous: Any = previous) -> None:
                if self._busy and not self._stopping:
                    self._stopping = True
                    return
                if callable(previous):
                    previous(received, frame)
                raise SystemExit()

            signal.signal(signum, handler)

    def _shown_url(self) -> str:
        return shown_url(self.settings.database_url)
