"""What beat fires for a row it has claimed: the decisions, turned into runs to record and send.

Beat reads a due row and its open runs; :func:`prepare` says, with no I/O,
which runs to record and publish under which ids, which open runs to
revoke, when the messages expire and where the row's cursor goes. A row
whose stored values cannot be used (a bad timer, zone, policy or JSON
column) is refused with :class:`RowRefused`, which names the field, and beat
takes it out of rotation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from bridge.errors import BridgeError
from bridge.rules.calendars import Calendar, calendars_named
from bridge.rules.decisions import (
    BUFFER_LIMIT,
    CATCHUP_PER_TICK,
    OpenRun,
    Plan,
    Send,
    State,
    decide,
    first_at_or_after,
    resume,
)
from bridge.rules.definition import check_timer, stored_timezone
from bridge.rules.kinds import SCHEDULED_TRIGGERS, RunStatus
from bridge.rules.policy import Catchup, Overlap, Policies
from bridge.rules.runs import (
    Envelope,
    Payload,
    expires_at,
    ids_of_occurrence,
    new_run,
    run_id_for,
)


class RowRefused(BridgeError):
    """A row whose stored values cannot be used: beat takes it out of rotation."""


class ScheduleRow(Protocol):
    """The columns of a ``periodic_task`` row that the decisions read.

    (The policy columns are read by :meth:`~bridge.rules.policy.Policies.from_columns`.)
    """

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def args(self) -> str: ...
    @property
    def kwargs(self) -> str: ...
    @property
    def options(self) -> str: ...
    @property
    def signature(self) -> str | None: ...
    @property
    def timer(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    @property
    def anchor(self) -> datetime: ...
    @property
    def nextrun(self) -> datetime | None: ...
    @property
    def next_occurrence(self) -> datetime | None: ...
    @property
    def held(self) -> datetime | None: ...
    @property
    def retry_plan(self) -> datetime | None: ...
    @property
    def retry_attempt(self) -> int | None: ...
    @property
    def retry_at(self) -> datetime | None: ...
    @property
    def failure_streak(self) -> int: ...
    @property
    def success_streak(self) -> int: ...
    @property
    def failing_since(self) -> datetime | None: ...
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def remaining(self) -> int | None: ...
    @property
    def overlap(self) -> str | None: ...
    @property
    def catchup(self) -> str | None: ...


#: Calendars by name, as beat and the API read them from the store.
Calendars = Mapping[str, Calendar]


def state_of(row: ScheduleRow, calendars: Calendars | None = None) -> State:
    """The decision state of a row; a bad row raises ValidationError naming the field.

    ``calendars`` hold at least those the row skips (its ``skip_calendars``); one
    missing (removed with SQL, since ``calendar rm`` refuses one in use) is a bad row.
    Without them (None) the state has none: what settles a run decides no occurrence.
    A row written with ``nextrun`` only (straight into the table) waits for
    the first occurrence at or after it.
    """
    timer = check_timer(row.timer, stored_timezone(row.timezone), row.anchor)
    policies = Policies.from_columns(row)
    skipped = () if calendars is None else calendars_named(policies.skip_calendars, calendars)
    next_occurrence = row.next_occurrence
    if next_occurrence is None and row.nextrun is not None and row.retry_at is None:
        next_occurrence = first_at_or_after(timer, row.nextrun)
    elif next_occurrence is not None and not timer.fixed_delay:
        # On the timer's grid, whatever wrote it (an edit racing a fire, SQL).
        next_occurrence = first_at_or_after(timer, next_occurrence)
    return State(
        schedule_id=row.id,
        timer=timer,
        policies=policies,
        next_occurrence=next_occurrence,
        held=row.held,
        retry_plan=row.retry_plan,
        retry_attempt=row.retry_attempt,
        retry_at=row.retry_at,
        failure_streak=row.failure_streak,
        success_streak=row.success_streak,
        failing_since=row.failing_since,
        nextrun=row.nextrun,
        calendars=skipped,
    )


#: How many of a claimed row's oldest open runs beat reads to decide it, besides every run
#: its unfinished fire may have recorded (:class:`Resumable`). The decisions need the
#: oldest (the run a skip names, the stale ones to give up on) and whether any is open;
#: only overlap ``allow`` lets runs pile up, and a backlog sent to workers that fell
#: behind left hundreds per schedule, each read again by every tick that fired its row
#: (docs/performance.md). See :func:`reads_all_open_runs` for when all are read.
OLDEST_OPEN_READ = 10


class Resumable(NamedTuple):
    """What picks out, among a claimed row's open runs, every one
    :func:`recorded_by_unfinished_fire` may take for its fire's own: a run still
    ``PENDING``, one planned at or after ``since``, or the owed retry (``retry_plan``
    and ``retry_attempt``)."""

    schedule_id: int
    since: datetime | None
    retry_plan: datetime | None
    retry_attempt: int | None


def resumable(row: ScheduleRow) -> Resumable:
    """The :class:`Resumable` of a claimed row: ``since`` is at or before the occurrence
    :func:`state_of` reads from it, which is its stored one put on the timer's grid, or
    the first at or after ``nextrun`` when only that was written."""
    since = row.next_occurrence
    if since is None and row.retry_at is None:
        since = row.nextrun
    return Resumable(row.id, since, row.retry_plan, row.retry_attempt)


def reads_all_open_runs(row: ScheduleRow, read: int, stale: int) -> bool:
    """Whether beat reads every open run of a row after reading ``read`` of them, ``stale``
    of which are stale: when :data:`OLDEST_OPEN_READ` of them are stale (more may be, and
    all are given up at once, so that a live run behind them still counts), or, under
    overlap ``replace``, when that many were read (it revokes every one)."""
    return stale >= OLDEST_OPEN_READ or (
        read >= OLDEST_OPEN_READ and row.overlap == Overlap.REPLACE
    )


_Row = TypeVar("_Row", bound=ScheduleRow)


def fires_of_backlog(rows: Sequence[_Row], share: int, batch_size: int) -> list[list[_Row]]:
    """A tick's rows due before the on-time ones, in order, split into fires of about
    ``batch_size`` messages: a row under catch-up ``all`` and overlap ``allow`` may send
    ``share`` occurrences, any other row one (the other overlap policies send a backlog's
    occurrences one after another).

    Between two of these fires beat claims the rows that fell due meanwhile and
    fires them first: a schedule falling due while a backlog drains waits for
    one fire behind it, not for the whole tick (``TICK_MESSAGES`` batch sizes).
    """
    fires: list[list[_Row]] = []
    messages = 0
    for row in rows:
        weight = share if row.catchup == Catchup.ALL and row.overlap == Overlap.ALLOW else 1
        if not fires or messages + weight > batch_size:
            fires.append([])
            messages = 0
        fires[-1].append(row)
        messages += weight
    return fires


def recorded_by_unfinished_fire(state: State, run: OpenRun) -> bool:
    """A run beat recorded for the row whose fire was cut short before it advanced.

    Its id is the deterministic one of its occurrence and attempt, and either
    it was never sent (still PENDING: only beat writes that, and only a fire
    that did not finish leaves it) or the row's cursor was not moved past it.
    A held occurrence is recorded with the cursor already past it, so only
    its status tells that its fire did not finish.
    """
    if run.plan_time is None or run.trigger not in SCHEDULED_TRIGGERS:
        return False
    unsent = run.status == RunStatus.PENDING
    pending_retry = run.plan_time == state.retry_plan and run.attempt == state.retry_attempt
    waiting = state.next_occurrence is not None and run.plan_time >= state.next_occurrence
    # The ids last: hashing them for every open run of a row was most of deciding it.
    return (unsent or pending_retry or waiting) and run.id in ids_of_occurrence(
        state.schedule_id, run.plan_time, run.attempt
    )


@dataclass(frozen=True)
class Fire:
    """One claimed row, decided: what to send under which ids, and what to revoke."""

    row: ScheduleRow
    payload: Payload
    plan: Plan
    #: The id of each run of ``plan.sends``, in order.
    run_ids: list[str]
    #: Runs an unfinished fire of the row recorded, which this fire completes.
    own: frozenset[str]
    #: The policies the row's runs are sent under (their message expiry).
    policies: Policies
    #: The row's occurrence following the fire (None: none), which ``expires next`` uses.
    following: datetime | None

    @property
    def revoke_reason(self) -> str:
        """Why the open runs of ``plan.revoke`` end (overlap ``replace``)."""
        return f"replaced by run {self.run_ids[0]}" if self.run_ids else "replaced"

    def expires(self, sent: datetime) -> datetime | None:
        """When the message of one of its runs sent at ``sent`` expires (None: never).

        Reckoned as the message goes, not as the row was decided: a tick that
        publishes for seconds (a backlog) would otherwise send the last
        messages of a schedule firing every second already expired.
        """
        return expires_at(self.payload, sent, self.policies.expiry(sent, self.following))

    def envelope(
        self,
        send: Send,
        run_id: str,
        expires: datetime | None,
        trace: tuple[tuple[str, str], ...] = (),
    ) -> Envelope:
        """What the message of one of its runs says of the run (``trace``: its span's
        headers)."""
        return Envelope(
            run_id, self.row.id, self.row.name, send.plan_time, send.trigger, expires, trace
        )

    def records(self, now: datetime) -> list[dict[str, Any]]:
        """The ``task_execution`` rows of the runs to send, ``PENDING``."""
        return [
            new_run(
                self.row.id,
                self.row.task,
                send.plan_time,
                send.trigger,
                now,
                run_id,
                send.attempt,
                self.payload.ends,
            )
            for send, run_id in zip(self.plan.sends, self.run_ids, strict=True)
        ]


def prepare(
    row: ScheduleRow,
    live: Sequence[OpenRun],
    now: datetime,
    catchup_limit: int = CATCHUP_PER_TICK,
    calendars: Calendars | None = None,
    buffer_limit: int = BUFFER_LIMIT,
) -> Fire:
    """Decide what to send for a claimed row whose open runs still expected to end are ``live``
    (catch-up ``all``: at most ``catchup_limit`` of its overdue occurrences), with the
    ``calendars`` it may skip and the most occurrences overlap ``buffer_all`` queues.

    Runs recorded by a fire of this row that did not finish (a crash, a
    broker failure, a lost mark) are this fire's own work, not overlap: they
    are resumed before anything new is decided. Raises :class:`RowRefused`
    for a row that cannot be used.
    """
    try:
        state = replace(state_of(row, calendars), buffer_limit=buffer_limit)
        payload = Payload.decode(row.task, row.args, row.kwargs, row.options, row.signature)
    except ValueError as exc:  # a refused timer, zone, policy or JSON column
        raise RowRefused(str(exc)) from None
    own = [run for run in live if recorded_by_unfinished_fire(state, run)]
    plan = resume(state, own) if own else decide(state, now, list(live), catchup_limit)
    # A resumed run keeps the id it was recorded under (a release before may have made it).
    recorded = {(run.plan_time, run.attempt): run.id for run in own}
    run_ids = [
        recorded.get((send.plan_time, send.attempt))
        or run_id_for(row.id, send.plan_time, send.attempt)
        for send in plan.sends
    ]
    following = None if state.fixed_delay else state.timer.next_after(now)
    own_ids = frozenset(run.id for run in own)
    return Fire(row, payload, plan, run_ids, own_ids, state.policies, following)
