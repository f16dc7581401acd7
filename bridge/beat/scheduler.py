"""The Celery beat scheduler class: ``celery beat -S bridge``.

Celery's beat service calls :meth:`DatabaseScheduler.tick` in a loop and
sleeps for the number of seconds it returns. Each tick claims the rows that
are due, runs the fire sequence on each (mark, check non-final runs, submit,
advance, unmark) and returns the time until the earliest ``nextrun``, capped
by the poll interval so that changes made from outside are seen promptly.
Beat holds no copy of the schedule: the table is the schedule.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import kombu.exceptions
from celery.beat import Scheduler
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from bridge import broker
from bridge.beat.sync import sync_beat_schedule
from bridge.broker import check_broker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.rules.decisions import (
    OpenRun,
    Plan,
    Send,
    State,
    decide,
    resume,
    split_stale,
    wait_seconds,
)
from bridge.rules.kinds import SCHEDULED_TRIGGERS, RunStatus
from bridge.rules.runs import Payload, expires_at, new_run, run_id_for
from bridge.storage.database import Database, error_reason
from bridge.storage.lifecycle import apply_plan, state_of
from bridge.storage.models import PeriodicTask
from bridge.storage.store import LostRun, Recorded, Sent, Store

if TYPE_CHECKING:
    from bridge.storage.listener import ChangeListener

logger = logging.getLogger("bridge.scheduler")

#: The longest beat waits between attempts while the database is unreachable.
MAX_BACKOFF = 5.0
#: The wait after a tick in which firing a row hit a defect.
DEFECT_BACKOFF = 2.0
#: How often beat looks for silent runs of any schedule.
SWEEP_SECONDS = 10.0
#: How often beat writes its heartbeat into ``beat_instance``.
HEARTBEAT_SECONDS = 1.0
#: Messages per broker round trip when a batch is published (Redis pipelines them).
PUBLISH_PIPELINE = 500
#: How long the heartbeat of a silent worker is kept after its runs were given up on.
WORKER_EXPIRY = 3600.0
#: How often beat looks for sent runs whose message expired before a worker received it.
EXPIRY_SWEEP_SECONDS = 1.0
#: How long after its message's expiry a run no worker has reported receiving
#: is ended as expired: time for a worker that received it just in time to say so.
EXPIRY_GRACE = 2.0
#: The most runs one look ends as expired; the rest follow at the next.
EXPIRY_BATCH = 500


def _lost_reason(stale_seconds: float) -> str:
    return f"no status change for over {stale_seconds:g}s; presumed lost by beat"


def _recorded_by_unfinished_fire(state: State, run: OpenRun) -> bool:
    """A run beat recorded for the row whose fire was cut short before it advanced.

    Its id is the deterministic one of its occurrence and attempt, and either
    it was never sent (still PENDING: only beat writes that, and only a fire
    that did not finish leaves it) or the row's cursor was not moved past it.
    A held occurrence is recorded with the cursor already past it, so only
    its status tells that its fire did not finish.
    """
    if run.plan_time is None or run.trigger not in SCHEDULED_TRIGGERS:
        return False
    if run.id != run_id_for(state.schedule_id, run.plan_time, run.attempt):
        return False
    unsent = run.status == RunStatus.PENDING
    pending_retry = run.plan_time == state.retry_plan and run.attempt == state.retry_attempt
    waiting = state.next_occurrence is not None and run.plan_time >= state.next_occurrence
    return unsent or pending_retry or waiting


def _log_fired(row: PeriodicTask, send: Send, run_id: str) -> None:
    attempt = f" attempt {send.attempt}" if send.attempt > 1 else ""
    logger.info(
        "bridge: fired %r plan %s%s task id %s (%s)",
        row.name,
        send.plan_time.isoformat(),
        attempt,
        run_id,
        send.trigger.value,
    )


def _report_lost(runs: list[LostRun]) -> None:
    for run in runs:
        owner = "no schedule" if run.schedule is None else repr(run.schedule)
        logger.warning("bridge: run %s of %s marked LOST: %s", run.id, owner, run.reason)


def _is_conflict(exc: DBAPIError) -> bool:
    """A transaction the database rolled back to resolve a conflict (SQLSTATE class 40)."""
    return str(getattr(exc.orig, "sqlstate", None) or "").startswith("40")


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


def instance_id() -> str:
    """A beat instance's identity in ``periodic_task.worker``: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class PublishFailed(Exception):
    """The broker cannot be reached; the fire is redone on a later tick."""


class BadRow(Exception):
    """The row was disabled while firing it; nothing more to do with it."""


_T = TypeVar("_T")


@dataclass
class _Batch:
    """The rows claimed by one tick: their ids, names, and the mark they carry."""

    ids: list[int]
    names: dict[int, str]
    marked: datetime

    @classmethod
    def of(cls, rows: list[PeriodicTask]) -> _Batch:
        assert rows and rows[0].marked is not None
        return cls([row.id for row in rows], {row.id: row.name for row in rows}, rows[0].marked)


@dataclass
class _Fire:
    """One row of a batch, decided: what to send, under which ids."""

    row: PeriodicTask
    payload: Payload
    plan: Plan
    run_ids: list[str]
    #: Runs an unfinished fire recorded, which this fire completes.
    own: set[str]
    #: When the messages of its runs expire (None: never).
    expires: datetime | None
    failed: bool = False


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
        self.store = Store(self.database)
        self.instance = instance_id()
        self._config_synced = not self.settings.sync_beat_schedule
        self._busy = False
        self._stopping = False
        self._backoff = 0.0
        #: The kind of trouble last logged, until a tick succeeds again.
        self._outage: str | None = None
        self._closed = False
        self._next_sweep = 0.0
        self._next_expiry_sweep = 0.0
        self._next_heartbeat = 0.0
        self._started_at = utcnow()
        #: Since when this instance has reached the database without a break
        #: (None: not since the last failure).
        self._reachable_since: datetime | None = None
        self._sent = 0
        #: A defect hit a row during this tick: pause before the next.
        self._troubled = False
        #: Wakes beat when a schedule changes (PostgreSQL); None: Celery's loop sleeps.
        self._changes: ChangeListener | None = None
        super().__init__(*args, **kwargs)

    # -- beat contract -----------------------------------------------------

    def setup_schedule(self) -> None:
        """Called once when beat really starts (never for the lazy banner instance)."""
        self._install_stop_handler()
        logger.info("bridge: beat instance %s on %s", self.instance, self._safe_url())
        with _fatal_at_start():
            check_broker(self.app)
            driver = self.database.engine.dialect.driver
        if driver == "psycopg":
            from bridge.storage.listener import ChangeListener

            self._changes = ChangeListener(self.database)
        if not self._config_synced:
            self._busy = True
            try:
                self._guarded(self._sync_config)
            finally:
                self._busy = False

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Fire what is due, then say how long to sleep, or sleep here until a change.

        With a change listener (PostgreSQL) the sleep happens here, so that a
        notification ends it; Celery's loop then calls again at once. The
        sleep is not "busy": SIGTERM ends it straight away.
        """
        if self._stopping:
            raise SystemExit()
        self._busy = True
        try:
            wait = self._guarded(self._tick)
        finally:
            self._busy = False
        if self._stopping:
            raise SystemExit()
        if self._changes is None:
            return wait
        self._changes.wait(wait)
        return 0.0

    def close(self) -> None:
        """Clear every mark this instance holds, then release the broker connection.

        Beat calls this twice on SIGTERM (from its signal handler and on the
        way out); the second call has nothing left to do.
        """
        if not self._closed:
            self._closed = True
            try:
                self.store.release(self.instance)
                self.store.forget_instances(self._instance_expiry(utcnow()), self.instance)
            except (OperationalError, DBAPIError) as exc:
                logger.warning("bridge: could not clear marks on exit (%s); they expire", exc)
            if self._changes is not None:
                self._changes.close()
        super().close()

    @property
    def info(self) -> str:
        return f"    . database -> {self._safe_url()}"

    # -- the tick ----------------------------------------------------------

    def _tick(self) -> float:
        if not self._config_synced:
            self._sync_config()
        started = time.perf_counter()
        claimed = self.store.claim_due(
            self.instance,
            utcnow(),
            timedelta(seconds=self.settings.lease_seconds),
            self.settings.batch_size,
        )
        fired = self._fire_batch(claimed) if claimed else 0
        logger.debug(
            "bridge: tick claimed %d fired %d in %.1f ms",
            len(claimed),
            fired,
            (time.perf_counter() - started) * 1000,
        )
        # Housekeeping after the fire, which is what the wake-up was timed for.
        self._heartbeat(utcnow())
        self._sweep(utcnow())
        self._expire_unreceived(utcnow())
        if self._troubled:
            self._troubled = False
            return DEFECT_BACKOFF
        if len(claimed) >= self.settings.batch_size:
            return 0.0
        return wait_seconds(self.store.next_due(), utcnow(), self.settings.poll_interval)

    def _fire_batch(self, claimed: list[PeriodicTask]) -> int:
        """The fire sequence for a batch of claimed rows, a few statements for the lot.

        Decide every row, record all their runs in one transaction, publish
        them over one producer, mark them sent in one statement and advance
        the rows in one transaction. Returns the number of runs published.
        """
        now = utcnow()
        batch = _Batch.of(claimed)
        open_runs = self.store.open_runs_of(batch.ids)
        fires = [
            fire
            for row in claimed
            if (fire := self._step(row, partial(self._plan, row, batch, open_runs, now)))
        ]
        if self._stopping:
            # SIGTERM before anything is recorded: let the batch go at once.
            self.store.release(self.instance, batch.ids)
            return 0
        self._renew(batch)
        runs = [
            new_run(
                fire.row.id, fire.row.task, send.plan_time, send.trigger, now, attempt=send.attempt
            )
            for fire in fires
            for send in fire.plan.sends
        ]
        recorded = self.store.record_runs(runs, self.instance, batch.marked)
        for fire in fires:
            if fire.row.id in recorded.lost:
                # Whoever holds the row now resumes this fire from its records.
                logger.warning("bridge: lost the mark on %r while firing it", fire.row.name)
        fires = [fire for fire in fires if fire.row.id not in recorded.lost]
        try:
            published = self._publish_all(fires, recorded, batch)
        except PublishFailed:
            # Nothing is marked sent or advanced: the next holder resumes every
            # fire from its records and publishes again under the same ids.
            self.store.release(self.instance, batch.ids)
            raise
        expiry = {fire.row.id: fire.expires for fire in fires}
        self.store.mark_sent(
            [Sent(row.id, run_id, expiry[row.id]) for row, _, run_id in published], utcnow()
        )
        for row, send, run_id in published:
            _log_fired(row, send, run_id)
        self._renew(batch)
        self._advance([fire for fire in fires if not fire.failed], recorded, batch, now)
        return len(published)

    def _publish_all(
        self, fires: list[_Fire], recorded: Recorded, batch: _Batch
    ) -> list[tuple[PeriodicTask, Send, str]]:
        """Publish every PENDING run of the batch over one producer, in pipelined batches.

        Kombu's publish batch sends the messages to Redis in pipelines of
        :data:`PUBLISH_PIPELINE` (other transports publish each at once). A
        broker failure discards what was not yet flushed and leaves the
        delivery of the rest uncertain, so nothing of the batch is marked
        SENT: resuming publishes them again under the same ids, which a
        ``BridgeTask`` runs once. Returns what was published, in order.
        """
        published: list[tuple[PeriodicTask, Send, str]] = []
        try:
            # One connection attempt: the tick must not sit in Celery's long
            # reconnect loop, deaf to SIGTERM, while the broker is down.
            self.connection.ensure_connection(max_retries=0)
            with self.producer.batch(max_size=PUBLISH_PIPELINE):
                for fire in fires:
                    self._renew(batch)
                    sent = self._step(fire.row, partial(self._publish_fire, fire, recorded))
                    if sent is None:
                        fire.failed = True
                    else:
                        published += sent
        except PublishFailed:
            self._drop_producer()
            raise
        except self._connection_errors() as exc:  # the batch's last flush
            logger.debug("bridge: could not publish a batch: %s", exc)
            self._drop_producer()
            raise PublishFailed(exc) from exc
        return published

    def _step(self, row: PeriodicTask, work: Callable[[], _T]) -> _T | None:
        """``work`` on one row of a batch; a bad row or a defect spares the others.

        A database or broker outage ends the whole batch (``_guarded`` backs
        off); a defect is logged with its traceback, the row is let go and
        the tick is followed by a pause.
        """
        try:
            return work()
        except BadRow:
            return None
        except (OperationalError, DBAPIError, PublishFailed):
            raise
        except Exception:
            self._troubled = True
            logger.exception("bridge: unexpected error firing %r", row.name)
            self.store.release(self.instance, [row.id])
            return None

    def _renew(self, batch: _Batch) -> None:
        """Renew the batch's marks once half a lease has passed since they were set.

        A long batch (a slow broker, many rows) must not let its last rows'
        leases expire, or another instance would fire them too. A row another
        instance took over meanwhile fails the guard of the next write to it.
        """
        now = utcnow()
        if now - batch.marked < timedelta(seconds=self.settings.lease_seconds / 2):
            return
        held = self.store.renew(self.instance, batch.ids, now)
        for row_id in set(batch.ids) - held:
            logger.warning("bridge: lost the mark on %r to another instance", batch.names[row_id])
        batch.ids = [row_id for row_id in batch.ids if row_id in held]
        batch.marked = now

    def _plan(
        self, row: PeriodicTask, batch: _Batch, open_runs: dict[int, list[OpenRun]], now: datetime
    ) -> _Fire | None:
        """Decide what to send for one claimed row; None when there is nothing to fire."""
        try:
            state = state_of(row)
            payload = Payload.decode(row.task, row.args, row.kwargs, row.options)
        except ValueError as exc:  # a refused timer, zone, policy or JSON column
            self._disable_bad_row(row, now, str(exc))
            return None

        live, gave_up = self._live_runs(row, open_runs.get(row.id, []), now)
        if gave_up:
            # Settling the lost runs may have broken the schedule or owed a retry.
            fresh = self.store.reread(row.id, self.instance, batch.marked)
            if fresh is None or not fresh.enabled:
                self.store.release(self.instance, [row.id])
                return None
            row, state = fresh, state_of(fresh)
        # Runs recorded by a fire of this row that did not finish (a crash, a
        # broker failure, a lost mark) are this fire's own work, not overlap.
        own = [run for run in live if _recorded_by_unfinished_fire(state, run)]
        plan = resume(state, own) if own else decide(state, now, live)
        if plan.skipped:
            logger.info(
                "bridge: skipped %r (%d occurrence(s)): %s",
                row.name,
                plan.skipped,
                plan.skip_reason,
            )
        if plan.missed:
            logger.info("bridge: %d occurrence(s) of %r missed (catch-up)", plan.missed, row.name)
        run_ids = [run_id_for(row.id, send.plan_time, send.attempt) for send in plan.sends]
        if plan.revoke:
            self._revoke(row, plan.revoke, run_ids[0] if run_ids else None)
        following = None if state.fixed_delay else state.timer.next_after(now)
        expires = expires_at(payload, now, state.policies.expiry(now, following))
        return _Fire(row, payload, plan, run_ids, {run.id for run in own}, expires)

    def _publish_fire(
        self, fire: _Fire, recorded: Recorded
    ) -> list[tuple[PeriodicTask, Send, str]]:
        """Publish the fire's runs that are still PENDING; what was published."""
        published = []
        for send, run_id in zip(fire.plan.sends, fire.run_ids, strict=True):
            if recorded.statuses.get(run_id) == RunStatus.PENDING:
                self._publish(fire.row, fire.payload, run_id, send, fire.expires)
                published.append((fire.row, send, run_id))
        return published

    def _publish(
        self,
        row: PeriodicTask,
        payload: Payload,
        run_id: str,
        send: Send,
        expires: datetime | None,
    ) -> None:
        """Send the run; a message that cannot be built fails the run and disables the row."""
        try:
            broker.publish(
                self.app,
                payload,
                run_id=run_id,
                schedule_id=row.id,
                schedule_name=row.name,
                plan_time=send.plan_time,
                trigger=send.trigger,
                expires=expires,
                producer=self.producer,
            )
        except self._connection_errors() as exc:
            logger.debug("bridge: could not send %r: %s", row.name, exc)
            raise PublishFailed(exc) from exc
        except Exception as exc:
            reason = f"could not send: {exc}"
            self.store.finish_runs([run_id], RunStatus.FAILURE, utcnow(), reason)
            self._disable_bad_row(row, utcnow(), reason)
            raise BadRow() from exc
        self._sent += 1

    def _revoke(self, row: PeriodicTask, run_ids: list[str], replacement: str | None) -> None:
        """Overlap ``replace``: record the open runs REVOKED, then terminate them.

        Recorded first, so the record says why: a worker terminating the run
        would otherwise record it as merely "terminated".
        """
        reason = f"replaced by run {replacement}"
        self.store.finish_runs(run_ids, RunStatus.REVOKED, utcnow(), reason)
        try:
            broker.revoke(self.app, run_ids)
        except self._connection_errors() as exc:
            logger.debug("bridge: could not revoke runs of %r: %s", row.name, exc)
            raise PublishFailed(exc) from exc
        for run_id in run_ids:
            logger.info("bridge: revoked run %s of %r: %s", run_id, row.name, reason)

    def _disable_bad_row(self, row: PeriodicTask, now: datetime, reason: str) -> None:
        note = f"disabled by beat: bad row: {reason}"
        logger.error("bridge: schedule %r %s", row.name, note)
        self.store.disable(row.id, self.instance, now, note)

    def _connection_errors(self) -> tuple[type[BaseException], ...]:
        connection = self.connection
        return (
            kombu.exceptions.OperationalError,
            # A pipelined batch that failed: delivery of its messages is uncertain.
            kombu.exceptions.BatchPublishError,
            OSError,
            *connection.connection_errors,
            *connection.channel_errors,
        )

    def _live_runs(
        self, row: PeriodicTask, open_runs: list[OpenRun], now: datetime
    ) -> tuple[list[OpenRun], bool]:
        """Open runs of the schedule, after giving up on the stale ones (True if any)."""
        live, stale = split_stale(
            open_runs, now, timedelta(seconds=self.settings.stale_run_seconds)
        )
        reason = _lost_reason(self.settings.stale_run_seconds)
        _report_lost(self.store.give_up([LostRun(run.id, row.name, reason) for run in stale], now))
        return live, bool(stale)

    def _advance(
        self, fires: list[_Fire], recorded: Recorded, batch: _Batch, now: datetime
    ) -> None:
        """Move the rows' cursors and clear their marks, except where a mark was taken over.

        One transaction for the batch. A record someone else made for an
        occurrence (a backfill) stays theirs: only this fire's runs count as sent.
        """
        if not fires:
            return
        ours = {
            fire.row.id: [
                run_id
                for run_id in fire.run_ids
                if run_id in fire.own or run_id in recorded.inserted
            ]
            for fire in fires
        }
        lost: list[int] = []
        with self.store.locked_rows(list(ours), self.instance, batch.marked) as (session, held):
            last = self.store.statuses(session, [ids[-1] for ids in ours.values() if ids])
            for fire in fires:
                current = held.get(fire.row.id)
                if current is None:
                    logger.warning("bridge: lost the mark on %r before advancing it", fire.row.name)
                    lost.append(fire.row.id)
                    continue
                sent = ours[fire.row.id]
                last_status = last.get(sent[-1]) if sent else None
                apply_plan(session, current, fire.row, fire.plan, sent, now, last_status)
                if not current.enabled:
                    logger.info("bridge: schedule %r %s", fire.row.name, current.note)
        if lost:
            self.store.release(self.instance, lost)

    def _heartbeat(self, now: datetime) -> None:
        """Say this instance ticks, for ``bridge status``."""
        if time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        host, pid = socket.gethostname(), os.getpid()
        self.store.heartbeat(self.instance, host, pid, self._started_at, now, self._sent)

    def _instance_expiry(self, now: datetime) -> datetime:
        """Instances that have not ticked since then are gone: three leases, at least a minute."""
        return now - timedelta(seconds=max(60.0, 3 * self.settings.lease_seconds))

    def _sweep(self, now: datetime) -> None:
        """Every few seconds, give up on runs that went silent, whichever schedule they are of.

        Without it a run whose worker died would block a rarely due schedule
        until its next occurrence, and a fixed delay or held run would wait forever.
        Beat instances that went silent are cleared at the same pace.
        """
        if time.monotonic() < self._next_sweep:
            return
        timeout = self.settings.worker_timeout
        self._next_sweep = time.monotonic() + min(SWEEP_SECONDS, timeout / 2)
        lost: list[LostRun] = []
        # Worker heartbeats are judged only once this instance has itself
        # reached the database for a whole timeout: after an outage, workers
        # need that long to write theirs again.
        if self._reachable_since is None:
            self._reachable_since = now
        if now - self._reachable_since >= timedelta(seconds=timeout):
            lost += self.store.sweep_dead_workers(now, timedelta(seconds=timeout))
            self.store.forget_workers(now - timedelta(seconds=max(WORKER_EXPIRY, timeout)))
        stale = self.settings.stale_run_seconds
        reason = _lost_reason(stale)
        lost += self.store.sweep_stale(now, timedelta(seconds=stale), reason)
        _report_lost(lost)
        self.store.forget_instances(self._instance_expiry(now))

    def _expire_unreceived(self, now: datetime) -> None:
        """End the sent runs whose message expired before any worker received it.

        A broker may drop an expired message unseen (RabbitMQ does), so no
        worker ever records the run: beat ends it as expired, once a grace
        has passed for a worker that took it just in time to record so.
        """
        if time.monotonic() < self._next_expiry_sweep:
            return
        self._next_expiry_sweep = time.monotonic() + EXPIRY_SWEEP_SECONDS
        cutoff = now - timedelta(seconds=EXPIRY_GRACE)
        for run in self.store.expire_unreceived(cutoff, now, EXPIRY_BATCH):
            owner = "no schedule" if run.schedule is None else repr(run.schedule)
            logger.info("bridge: run %s of %s ended REVOKED: %s", run.id, owner, run.reason)

    # -- outages, signals, config -------------------------------------------

    def _guarded(self, work: Any) -> float:
        """Run ``work``; on any error, log it once and back off instead of crashing.

        A database or broker outage is expected and logged as one line when it
        starts and one when it ends; anything else is a defect or a row the
        database cannot even return, logged with its traceback. Either way
        beat keeps running and tries again.
        """
        try:
            result = work()
        except (OperationalError, DBAPIError) as exc:
            reason = error_reason(exc)
            if _is_conflict(exc):
                # A deadlock or serialization failure the database broke: transient.
                self._trouble(reason, f"database conflict ({reason}); retrying")
            else:
                # Workers could not write their heartbeats either: give them a
                # whole timeout once the database is back before judging them.
                self._reachable_since = None
                self._trouble("database", f"database unreachable ({reason}); retrying with backoff")
            return self._backoff
        except PublishFailed as exc:
            self._trouble("broker", f"broker unreachable ({exc}); retrying with backoff")
            return self._backoff
        except Exception as exc:
            message = f"tick failed ({type(exc).__name__}: {exc}); retrying with backoff"
            self._trouble(message, message, with_traceback=True)
            return self._backoff
        if self._outage is not None:
            logger.warning("bridge: recovered; ticking again")
            self._outage = None
        self._backoff = 0.0
        return float(result) if isinstance(result, float | int) else 0.0

    def _trouble(self, kind: str, message: str, with_traceback: bool = False) -> None:
        """Back off; log ``message`` unless trouble of this ``kind`` is already logged."""
        self._backoff = min(MAX_BACKOFF, max(0.5, self._backoff * 2))
        if self._outage != kind:
            logger.error("bridge: %s", message, exc_info=with_traceback)
        self._outage = kind

    def _sync_config(self) -> None:
        """Upsert ``beat_schedule``; a defect here is logged, never fatal to beat."""
        try:
            sync_beat_schedule(self.app, self.database, self.settings)
        except (OperationalError, DBAPIError):
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

    def _drop_producer(self) -> None:
        """Forget a broker connection that failed, so the next send reconnects."""
        self.__dict__.pop("producer", None)
        connection = self.__dict__.pop("connection", None)
        if connection is not None:
            try:
                connection.release()
            except Exception:
                logger.debug("bridge: releasing a failed connection failed", exc_info=True)

    def _safe_url(self) -> str:
        return make_url(self.settings.database_url).render_as_string(hide_password=True)
