"""The fire sequence, for a batch of rows one beat instance has claimed, in explicit phases.

1. **Settle stale runs.** Open runs silent for longer than
   ``bridge_stale_run_seconds`` are marked ``LOST`` before anything is
   decided, and the rows they settled are read again.
2. **Prepare.** Each row is decided with no I/O
   (:func:`bridge.rules.fire.prepare`): the runs to send and their ids, the
   open runs to revoke, the message expiry, the cursor's next place. A row
   whose stored values cannot be used is set aside with the reason.
3. **Record.** One transaction records the new runs ``PENDING``, locks
   the rows and checks each mark is still this instance's, and only then,
   for the rows still held, ends the runs an overlap ``replace`` displaces
   ``REVOKED`` with the reason and disables the unusable rows with their
   note. A row whose mark was taken over gets none of these writes. Once
   the transaction is committed the displaced runs are revoked on the
   workers (``terminate``): an instance that lost a row's lease never
   terminates its runs. The revoke still goes out before the replacing run
   is published, and a replacement is never recorded without the
   ``REVOKED`` records of the runs it displaces (a resumed fire sends the
   recorded run and decides nothing anew, so it would not revoke them).
4. **Publish.** The ``PENDING`` runs go out over one producer, pipelined.
5. **Mark sent.** One statement moves them to ``SENT``.
6. **Advance.** One transaction moves each row's cursor and clears its mark.

On a database server (PostgreSQL, MySQL, MariaDB), when more rows are due behind a
batch (a burst, a backlog),
phases 5 and 6 of the batch run in a process of their own
(:mod:`bridge.beat.finishing`) while the next batch is claimed, decided,
recorded and published: beat would otherwise wait for the server to write
them, and for the CPU it takes to ask. One batch at most is finishing so;
its rows are kept out of the next claim, and the tick that empties the
queue waits for it, as does SIGTERM.

A database or broker outage ends the batch (beat backs off and resumes every
row from its records); a defect on one row spares the others.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple, TypeVar

from bridge.beat.finishing import (
    Finish,
    Finished,
    Finisher,
    Fired,
    finish,
    renew_marks,
    renewal_due,
)
from bridge.beat.metrics import BeatMetrics
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.rules.decisions import OpenRun, Send, catchup_share, endable, split_stale
from bridge.rules.fire import (
    Fire,
    RowRefused,
    ScheduleRow,
    prepare,
    reads_all_open_runs,
    resumable,
)
from bridge.rules.kinds import RunStatus
from bridge.service import sending
from bridge.service.calendars import Calendars
from bridge.service.fire import Advance, Firing
from bridge.service.ports import Broker
from bridge.service.sweeps import Sweeps
from bridge.storage.beat import Recorded, Replaced, Row
from bridge.storage.database import DatabaseError
from bridge.storage.housekeeping import LostRun
from bridge.tracing import Traced, Tracer

logger = logging.getLogger("bridge.scheduler")

#: Messages per broker round trip when a batch is published (Redis pipelines them).
PUBLISH_PIPELINE = 500
_T = TypeVar("_T")
#: Each row's open runs split into those still expected to end and the stale.
_Split = dict[int, tuple[list[OpenRun], list[OpenRun]]]


class PublishFailed(Exception):
    """The broker cannot be reached; the fire is redone on a later tick."""


def lost_reason(stale_seconds: float) -> str:
    """Why a run that went silent was given up on, in its record."""
    return f"no status change for over {stale_seconds:g}s; presumed lost by beat"


def report_lost(runs: Sequence[LostRun]) -> None:
    for run in runs:
        owner = "no schedule" if run.schedule is None else repr(run.schedule)
        logger.warning("bridge: run %s of %s marked LOST: %s", run.id, owner, run.reason)


@dataclass
class _Batch:
    """The rows claimed by one tick, by id, and the mark they carry."""

    rows: dict[int, Row]
    marked: datetime

    @classmethod
    def of(cls, rows: Sequence[Row]) -> _Batch:
        assert rows and rows[0].marked is not None
        return cls({row.id: row for row in rows}, rows[0].marked)

    @property
    def ids(self) -> list[int]:
        return list(self.rows)


class _Out(NamedTuple):
    """One run published: its fire, its occurrence, its id, and when its message expires."""

    fire: Fire
    send: Send
    run_id: str
    expires: datetime | None


class _Finishing(NamedTuple):
    """Phases 5 and 6 of a batch under way off beat's thread, and its rows."""

    done: Future[Finished]
    rows: frozenset[int]


@dataclass
class _Published:
    """What the publish phase sent, and the fires whose runs could not be sent."""

    sent: list[_Out] = field(default_factory=list)
    #: Rows not to advance: a message of theirs could not be built, or a defect hit them.
    failed: set[int] = field(default_factory=set)
    #: Rows set aside because a message of theirs could not be built: their note.
    bad: dict[int, str] = field(default_factory=dict)


class FireSequence:
    """Runs the fire sequence of one beat instance; see the module docstring."""

    def __init__(
        self,
        broker: Broker,
        settings: Settings,
        firing: Firing,
        sweeps: Sweeps,
        instance: str,
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.firing = firing
        self.store = firing.store
        self.sweeps = sweeps
        self.instance = instance
        self.outbox = broker.outbox()
        self.calendars = Calendars(self.store.database)
        #: Opens a span per run sent (``bridge_tracing``); set when beat really starts.
        self.tracer: Tracer | None = None
        self.metrics = BeatMetrics()
        #: Runs published since beat started.
        self.sent = 0
        #: A defect hit a row: the tick is followed by a pause.
        self.troubled = False
        #: Finishes batches off beat's thread once started (on a server: SQLite has one
        #: writer at a time, so the next batch would wait for it anyway).
        self._finisher: Finisher | None = None
        self._finishing: _Finishing | None = None

    def start(self) -> None:
        """Start what finishes batches off beat's thread, when beat really starts: Celery
        also builds a scheduler it never runs, for its banner."""
        if not self.store.database.is_sqlite and self._finisher is None:
            self._finisher = Finisher(self.firing, self.settings.finishing_process)

    def fire(
        self,
        claimed: Sequence[Row],
        stopping: Callable[[], bool],
        more_due: bool = False,
        catchup_limit: int | None = None,
    ) -> int:
        """Run every phase for a batch of claimed rows; the number of runs published.

        ``stopping`` says SIGTERM came: a batch not yet recorded is let go at once.
        ``more_due``: the claim was full, more rows may be due behind these
        (see :func:`~bridge.rules.decisions.catchup_share`); the batch is then
        marked sent and advanced off beat's thread (on a server), while the caller goes on
        (see :meth:`finish`).
        ``catchup_limit``: the occurrences a row under catch-up ``all`` sends at
        most, when the tick shares them among more rows than these.
        """
        now = utcnow()
        batch = _Batch.of(claimed)
        live = self._settle_stale(batch, now)
        if catchup_limit is None:
            catchup_limit = catchup_share(len(batch.rows), self.settings.batch_size, more_due)
        fires, bad = self._prepare(batch, live, now, catchup_limit)
        if stopping():
            self.store.release(self.instance, batch.ids)
            return 0
        traced = self._trace(fires)
        try:
            recorded = self._record(batch, fires, bad, now, traced)
            self.metrics.lost_marks(len(recorded.lost))
            fires = [fire for fire in fires if fire.row.id not in recorded.lost]
            published = self._publish(batch, fires, recorded, traced)
        finally:
            self._end_spans(traced)
        sent_at = utcnow()
        self.metrics.published(
            (sent_at - (out.fire.row.nextrun or now)).total_seconds() for out in published.sent
        )
        advancing = [fire for fire in fires if fire.row.id not in published.failed]
        job = self._finish_job(batch, published, advancing, recorded, now)
        previous, self._finishing = self._finishing, None
        try:
            if more_due and self._finisher is not None and not stopping():
                self._finishing = _Finishing(self._finisher.submit(job), frozenset(batch.rows))
            else:
                self._finished(finish(self.firing, job))
        finally:
            if previous is not None:
                self._finished(previous.done.result())
        return len(published.sent)

    @property
    def finishing(self) -> frozenset[int]:
        """The rows of the batch still being marked sent and advanced off beat's thread:
        this instance holds them, and must not claim them again meanwhile."""
        return self._finishing.rows if self._finishing is not None else frozenset()

    def finish(self, timeout: float | None = None) -> None:
        """Wait until the batch finishing off beat's thread is marked sent and advanced;
        raise what stopped it (a database outage, the finishing process's death: its
        rows are resumed from their records, as after a crash), or
        :class:`TimeoutError` after ``timeout``."""
        finishing, self._finishing = self._finishing, None
        if finishing is not None:
            self._finished(finishing.done.result(timeout))

    def close(self, timeout: float) -> None:
        """Finish the batch in hand, waiting ``timeout`` seconds at most, then let the
        finishing process or thread go.

        Bounded: beat may close from a signal handler (a second SIGTERM),
        interrupting its main thread while it holds a lock the finishing
        thread needs. A batch left unfinished is resumed from its records.
        """
        try:
            self.finish(timeout)
        finally:
            if self._finisher is not None:
                self._finisher.close()

    def _finish_job(
        self,
        batch: _Batch,
        published: _Published,
        advancing: list[Fire],
        recorded: Recorded,
        now: datetime,
    ) -> Finish:
        """Phases 5 and 6 of the batch, as the finisher takes them.

        A record someone else made for an occurrence (a backfill) stays
        theirs: only this fire's runs count as sent.
        """
        return Finish(
            self.instance,
            batch.marked,
            batch.ids,
            [
                Fired(
                    out.fire.row.id,
                    out.fire.row.name,
                    out.send.plan_time,
                    out.send.attempt,
                    out.run_id,
                    out.send.trigger.value,
                    out.expires,
                )
                for out in published.sent
            ],
            [
                Advance.of(
                    fire.row,
                    fire.plan,
                    [i for i in fire.run_ids if i in fire.own or i in recorded.inserted],
                )
                for fire in advancing
            ],
            # A row taken over while the batch was published has left the batch's rows.
            {fire.row.id: fire.row.name for fire in advancing}
            | {row_id: row.name for row_id, row in batch.rows.items()},
            now,
            self.settings.lease_seconds,
        )

    def _finished(self, done: Finished) -> None:
        """Count what finishing a batch did, once it is done (its log lines are written
        as it is done, by :func:`bridge.beat.finishing.finish`)."""
        self.metrics.lost_marks(len(done.advanced.lost))

    # -- 1. settle stale runs ------------------------------------------------------

    def _settle_stale(self, batch: _Batch, now: datetime) -> dict[int, list[OpenRun]]:
        """The open runs of each row still expected to end, after giving up on the stale.

        Of a row's open runs, those its decision needs are read
        (:data:`~bridge.rules.fire.OLDEST_OPEN_READ` of the oldest among
        them), or all of them (:func:`~bridge.rules.fire.reads_all_open_runs`).
        Settling a lost run may break its schedule or owe a
        retry, so those rows are read again; a row no longer held or no
        longer enabled leaves the batch.
        """
        stale_after = timedelta(seconds=self.settings.stale_run_seconds)

        def split(found: dict[int, list[OpenRun]], row_ids: Iterable[int]) -> _Split:
            return {row: split_stale(found.get(row, []), now, stale_after) for row in row_ids}

        wanted = [resumable(row) for row in batch.rows.values()]
        runs = split(self.store.open_runs_to_decide(wanted), batch.rows)
        crowded = [
            row_id
            for row_id, (live, stale) in runs.items()
            if reads_all_open_runs(batch.rows[row_id], len(live) + len(stale), len(stale))
        ]
        if crowded:
            runs |= split(self.store.open_runs_of(crowded), crowded)
        reason = lost_reason(self.settings.stale_run_seconds)
        live: dict[int, list[OpenRun]] = {}
        lost: list[LostRun] = []
        settled: set[int] = set()
        for row_id, row in batch.rows.items():
            live[row_id], stale = runs[row_id]
            if stale:
                settled.add(row_id)
                lost += [LostRun(run.id, row.name, reason) for run in stale]
        if not lost:
            return live
        report_lost(self.sweeps.give_up(lost, now))
        fresh = self.store.reread(sorted(settled), self.instance, batch.marked)
        for row_id in settled:
            now_row = fresh.get(row_id)
            if now_row is None or not now_row.enabled:
                del batch.rows[row_id]
            else:
                batch.rows[row_id] = now_row
        gone = sorted(settled - set(batch.rows))
        if gone:
            self.store.release(self.instance, gone)
        return live

    # -- 2. prepare ------------------------------------------------------------------

    def _prepare(
        self, batch: _Batch, live: dict[int, list[OpenRun]], now: datetime, catchup_limit: int
    ) -> tuple[list[Fire], dict[int, str]]:
        """Decide every row, with no I/O; the fires, and the notes of the rows set aside."""
        fires: list[Fire] = []
        bad: dict[int, str] = {}
        calendars = self.calendars.book_for(row.skip_calendars for row in batch.rows.values())
        for row in batch.rows.values():
            try:
                fire = self._step(
                    row,
                    functools.partial(
                        prepare,
                        row,
                        live[row.id],
                        now,
                        catchup_limit,
                        calendars,
                        self.settings.buffer_limit,
                    ),
                )
            except RowRefused as exc:
                bad[row.id] = self._bad_row_note(row, str(exc))
                continue
            if fire is None:
                continue
            plan = fire.plan
            if plan.skipped:
                logger.info(
                    "bridge: skipped %r (%d occurrence(s)): %s",
                    row.name,
                    plan.skipped,
                    plan.skip_reason,
                )
            if plan.excluded:
                logger.info(
                    "bridge: %d occurrence(s) of %r excluded: on its calendars",
                    plan.excluded,
                    row.name,
                )
            if plan.missed:
                logger.info(
                    "bridge: %d occurrence(s) of %r missed (catch-up): %s",
                    plan.missed,
                    row.name,
                    plan.missed_reason,
                )
            fires.append(fire)
        return fires, bad

    def _trace(self, fires: list[Fire]) -> dict[str, Traced]:
        """A span per run to send, by run id, when beat traces its runs."""
        if self.tracer is None:
            return {}
        return {
            run_id: self.tracer.fire(run_id, fire.row.name, send.plan_time, send.trigger.value)
            for fire in fires
            for send, run_id in zip(fire.plan.sends, fire.run_ids, strict=True)
        }

    def _end_spans(self, traced: dict[str, Traced]) -> None:
        if self.tracer is not None:
            for span in traced.values():
                self.tracer.end(span.span)

    # -- 3. record -------------------------------------------------------------------

    def _record(
        self,
        batch: _Batch,
        fires: list[Fire],
        bad: dict[int, str],
        now: datetime,
        traced: dict[str, Traced],
    ) -> Recorded:
        """Record the runs (with their trace ids when traced), end what ``replace``
        displaces and disable the rows set aside, in one transaction that checks the
        marks; then revoke, for the rows still held."""
        self._renew(batch)
        records = [record for fire in fires for record in fire.records(now)]
        if traced:
            for record in records:
                record["trace_id"] = traced[record["id"]].trace_id
        replaced = [
            Replaced(
                fire.row.id, fire.plan.revoke, fire.revoke_reason, endable(fire.plan.terminate)
            )
            for fire in fires
            if fire.plan.revoke
        ]
        recorded = self.store.record_runs(
            records, self.instance, batch.marked, now, replaced=replaced, bad=bad
        )
        for fire in fires:
            if fire.row.id in recorded.lost:
                # Whoever holds the row now resumes this fire from its records.
                logger.warning("bridge: lost the mark on %r while firing it", fire.row.name)
            elif fire.plan.revoke:
                self._revoke(fire, [run for run in fire.plan.revoke if run in recorded.revoked])
        return recorded

    def _revoke(self, fire: Fire, run_ids: list[str]) -> None:
        """Overlap ``replace``: revoke the open runs the record transaction ended REVOKED."""
        reason = fire.revoke_reason
        try:
            sending.revoke_recorded(self.broker, run_ids, fire.plan.terminate)
        except self.outbox.errors() as exc:
            logger.debug("bridge: could not revoke runs of %r: %s", fire.row.name, exc)
            raise PublishFailed(exc) from exc
        for run_id in run_ids:
            logger.info("bridge: revoked run %s of %r: %s", run_id, fire.row.name, reason)

    # -- 4. publish ------------------------------------------------------------------

    def _publish(
        self, batch: _Batch, fires: list[Fire], recorded: Recorded, traced: dict[str, Traced]
    ) -> _Published:
        """Publish every PENDING run of the batch over one producer, in pipelined batches.

        Kombu's publish batch sends the messages to Redis in pipelines of
        :data:`PUBLISH_PIPELINE`, and to RabbitMQ 64 KiB at a time
        (:class:`~bridge.celery.broker.AmqpPublishBatch`); other transports publish
        each at once. A
        broker failure discards what was not yet flushed and leaves the
        delivery of the rest uncertain, so nothing of the batch is marked
        SENT: resuming publishes them again under the same ids, which a
        ``BridgeTask`` runs once. The batch is let go for that.
        """
        published = _Published()
        try:
            self.outbox.begin()
            producer = self.outbox.producer()
            with producer.batch(max_size=PUBLISH_PIPELINE):
                for fire in fires:
                    self._renew(batch)
                    try:
                        sent = self._step(
                            fire.row,
                            functools.partial(self._publish_fire, fire, recorded, traced),
                        )
                    except sending.NotSent as exc:
                        published.bad[fire.row.id] = self._bad_row_note(fire.row, exc.reason)
                        sent = None
                    if sent is None:
                        published.failed.add(fire.row.id)
                    else:
                        published.sent += sent
        except PublishFailed:
            self._broker_failed(batch)
            raise
        except self.outbox.errors() as exc:  # the connection, or the batch's last flush
            logger.debug("bridge: could not publish a batch: %s", exc)
            self._broker_failed(batch)
            raise PublishFailed(exc) from exc
        self.sent += len(published.sent)
        self.store.disable(published.bad, self.instance, utcnow())
        return published

    def _publish_fire(
        self, fire: Fire, recorded: Recorded, traced: dict[str, Traced]
    ) -> list[_Out]:
        """Publish the fire's runs that are still PENDING; those published.

        A message that cannot be built ends its run FAILURE and raises
        :class:`~bridge.service.sending.NotSent`; the row is then set aside.
        """
        published = []
        expires = fire.expires(utcnow())
        for send, run_id in zip(fire.plan.sends, fire.run_ids, strict=True):
            if recorded.statuses.get(run_id) != RunStatus.PENDING:
                continue
            try:
                sending.publish_or_fail(
                    self.broker,
                    self.store,
                    fire.payload,
                    fire.envelope(send, run_id, expires, _headers_of(traced.get(run_id))),
                    producer=self.outbox.producer(),
                    transient=self.outbox.errors(),
                )
            except self.outbox.errors() as exc:
                logger.debug("bridge: could not send %r: %s", fire.row.name, exc)
                raise PublishFailed(exc) from exc
            published.append(_Out(fire, send, run_id, expires))
        return published

    def _broker_failed(self, batch: _Batch) -> None:
        """Nothing is marked sent or advanced: the next holder resumes every fire from
        its records and publishes again under the same ids."""
        self.outbox.drop()
        self.store.release(self.instance, batch.ids)

    # -- shared by the phases --------------------------------------------------------

    def _renew(self, batch: _Batch) -> None:
        """Renew the batch's marks once half a lease has passed since they were set
        (:func:`~bridge.beat.finishing.renew_marks`); a row taken over leaves the batch.

        Asked before each fire a batch publishes: whether it is due is looked at first,
        as listing the batch's rows each time cost a twentieth of the burst."""
        now = utcnow()
        if not renewal_due(batch.marked, self.settings.lease_seconds, now):
            return
        taken, batch.marked = renew_marks(
            self.store, self.instance, batch.ids, batch.marked, self.settings.lease_seconds, now
        )
        for row_id in taken:
            logger.warning(
                "bridge: lost the mark on %r to another instance", batch.rows.pop(row_id).name
            )

    def _step(self, row: ScheduleRow, work: Callable[[], _T]) -> _T | None:
        """``work`` on one row of a batch; a defect spares the other rows.

        A database or broker outage ends the whole batch (beat backs off); a
        refusal (a row that cannot be used, a message that cannot be built)
        is the caller's to handle; any other error is a defect, logged with
        its traceback: the row is let go and the tick is followed by a pause.
        """
        try:
            return work()
        except (DatabaseError, PublishFailed, BridgeError):
            raise
        except Exception:
            self.troubled = True
            logger.exception("bridge: unexpected error firing %r", row.name)
            self.store.release(self.instance, [row.id])
            return None

    @staticmethod
    def _bad_row_note(row: ScheduleRow, reason: str) -> str:
        note = f"disabled by beat: bad row: {reason}"
        logger.error("bridge: schedule %r %s", row.name, note)
        return note


def _headers_of(traced: Traced | None) -> tuple[tuple[str, str], ...]:
    """The message headers of a run's span (none when not traced)."""
    return () if traced is None else traced.headers
