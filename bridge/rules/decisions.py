"""Decisions of the fire sequence, as pure functions of a schedule's state and ``now``.

Beat reads a due row and its open runs and asks :func:`decide` what to send,
skip, hold or revoke and where the row's cursor goes next; a worker (or beat)
that records a run's final status asks :func:`settle` what that outcome does
to the schedule (a retry, the breaker, a fixed delay, a held run). Nothing
here touches the database or reads the clock, so every rule is tested alone.

Two times describe where a schedule stands: ``next_occurrence``, the first
occurrence of the timer not yet handled, and ``nextrun``, when beat must next
act on the row. They differ when jitter delays an occurrence, when a retry is
owed sooner, or when a held run may start.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.errors import ValidationError
from bridge.rules.calendars import Calendar, excluded_by
from bridge.rules.kinds import NON_FINAL_STATUSES, SCHEDULED_TRIGGERS, RunStatus, Trigger
from bridge.rules.policy import (
    Catchup,
    Overlap,
    Policies,
    ReplaceWith,
    jitter_bound,
    jitter_offset,
)
from bridge.rules.timers import IntervalTimer, Timer
from bridge.rules.values import column_of
from bridge.rules.words import short_duration

#: Catch-up ``all`` sends at most this many occurrences of one schedule per tick (beat
#: asks for fewer when a tick holds many rows: see :func:`catchup_share`).
CATCHUP_PER_TICK = 100
#: The messages a tick sends at most for catch-up ``all``, as many batch sizes: a backlog of
#: many rows takes fewer occurrences of each (at least one) so that a tick stays short and
#: a schedule falling due now waits for one fire at most behind the backlog (its
#: rows are fired a batch size of messages at a time, see ``fires_of_backlog``).
TICK_MESSAGES = 4
#: Counting missed occurrences of a cron timer stops here (about 69 days of
#: a per-minute job); interval timers are counted exactly.
COUNT_CAP = 100_000

_TICK = timedelta(microseconds=1)
#: The occurrences overlap ``buffer_all`` queues at most, unless ``bridge_buffer_limit``
#: says otherwise.
BUFFER_LIMIT = 100

NOTE_NO_OCCURRENCE = "finished: the timer has no further occurrence"
NOTE_PAST_END = "finished: past its end time"
NOTE_NO_RUNS_LEFT = "finished: no runs remaining"
#: Imported finished from another scheduler.
NOTE_SOURCE_RAN = "finished: a one-off the source ran or disabled"
NOTE_SOURCE_SPENT = "finished: nothing left to fire in the source"
#: The notes of a schedule that is done (its health ``finished``), rather than paused.
FINISHED_NOTES = frozenset(
    {NOTE_NO_OCCURRENCE, NOTE_PAST_END, NOTE_NO_RUNS_LEFT, NOTE_SOURCE_RAN, NOTE_SOURCE_SPENT}
)

#: The error of a run ``REVOKED`` because its message expired before a worker
#: started it (recorded by the worker that discards it, or by beat when no
#: worker received it).
EXPIRED = "expired"


@dataclass(frozen=True)
class OpenRun:
    """A run of the schedule that has not reached a final status."""

    id: str
    status: str
    plan_time: datetime | None
    updated_at: datetime
    trigger: str
    attempt: int = 1


@dataclass(frozen=True)
class State:
    """What the decisions need of a ``periodic_task`` row."""

    schedule_id: int
    timer: Timer
    policies: Policies
    next_occurrence: datetime | None
    held: datetime | None = None
    retry_plan: datetime | None = None
    retry_attempt: int | None = None
    retry_at: datetime | None = None
    failure_streak: int = 0
    #: Successful runs in a row since the schedule began failing (0 while it is not).
    success_streak: int = 0
    #: When the schedule began failing (its ``alert_after``-th failure in a row); None
    #: while it is not.
    failing_since: datetime | None = None
    #: When beat was due to act on the row (its ``nextrun`` as claimed).
    nextrun: datetime | None = None
    #: The calendars of its ``skip_calendars``, read: an occurrence on any is not sent.
    calendars: tuple[Calendar, ...] = ()
    #: How many occurrences overlap ``buffer_all`` queues at most (``bridge_buffer_limit``).
    buffer_limit: int = BUFFER_LIMIT

    @property
    def fixed_delay(self) -> bool:
        return self.timer.fixed_delay

    def excluded(self, occurrence: datetime) -> bool:
        """Whether the occurrence falls on one of the schedule's calendars."""
        return bool(self.calendars) and excluded_by(self.calendars, occurrence) is not None


@dataclass(frozen=True, order=True)
class Send:
    """A run to record and publish."""

    plan_time: datetime
    trigger: Trigger
    attempt: int = 1


@dataclass(frozen=True)
class Plan:
    """What beat does with a due row: the runs to send and the row's new cursor."""

    sends: list[Send] = field(default_factory=list)
    #: Open runs to revoke before sending (overlap ``replace``).
    revoke: list[str] = field(default_factory=list)
    #: Terminate those of them that execute (``replace_with``).
    terminate: bool = True
    skipped: int = 0
    missed: int = 0
    #: Occurrences not sent because they fall on one of the schedule's calendars.
    excluded: int = 0
    #: Why occurrences were skipped, for beat's log.
    skip_reason: str | None = None
    #: Why occurrences were missed, in words, for beat's log and the ``missed`` incident.
    missed_reason: str | None = None
    next_occurrence: datetime | None = None
    held: datetime | None = None
    #: The pending retry's attempt number if this plan sends it (it is then cleared).
    sent_retry: int | None = None
    #: Scheduled runs left after this plan (None: unlimited).
    remaining: int | None = None
    #: Owed work (a retry, catch-up occurrences) waits for an open run to end.
    waiting: bool = False


# -- occurrences --------------------------------------------------------------------


def occurrences(timer: Timer, first: datetime, last: datetime) -> Iterator[datetime]:
    """The timer's occurrences from ``first`` (itself an occurrence) up to ``last``."""
    current: datetime | None = first
    while current is not None and current <= last:
        yield current
        current = timer.next_after(current)


def count_occurrences(timer: Timer, first: datetime, last: datetime) -> int:
    """How many occurrences lie in [first, last]; exact for intervals, capped for cron."""
    if last < first:
        return 0
    if isinstance(timer, IntervalTimer) and not timer.fixed_delay:
        return (last - first) // timer.interval + 1
    count = 0
    for _ in occurrences(timer, first, last):
        count += 1
        if count >= COUNT_CAP:
            break
    return count


def first_at_or_after(timer: Timer, moment: datetime) -> datetime | None:
    """The timer's first occurrence at ``moment`` or after it (None: it has none)."""
    try:
        before = moment - _TICK
    except OverflowError:  # the first instant a time holds (a backfill from year 1)
        return timer.next_after(moment)
    return timer.next_after(before)


def fire_time(state: State, occurrence: datetime) -> datetime:
    """When an occurrence fires: the occurrence plus its jitter offset."""
    return occurrence + jitter_offset(
        state.schedule_id, occurrence, state.policies.jitter, _following(state, occurrence)
    )


def latest_fire_time(state: State, occurrence: datetime) -> datetime:
    """The end of the occurrence's jitter window: it fires no later than this when on time."""
    return occurrence + jitter_bound(
        state.policies.jitter, occurrence, _following(state, occurrence)
    )


def _following(state: State, occurrence: datetime) -> datetime | None:
    """The occurrence after ``occurrence``, which bounds its jitter (none for a fixed delay)."""
    return None if state.fixed_delay else state.timer.next_after(occurrence)


def wake_time(
    state: State, next_occurrence: datetime | None, after: datetime | None = None
) -> datetime | None:
    """``nextrun``: when beat must next act on the row.

    The jittered time of the next occurrence, or the owed retry if sooner;
    with ``after``, only a time later than it (what is overdue waits to be
    woken otherwise).
    """
    candidates = [] if next_occurrence is None else [fire_time(state, next_occurrence)]
    if state.retry_at is not None:
        candidates.append(state.retry_at)
    return min((t for t in candidates if after is None or t > after), default=None)


@dataclass(frozen=True)
class Rest:
    """Where a row rests after beat acted on it or one of its runs ended."""

    #: When beat next acts on it (None: when a running run ends, or never).
    nextrun: datetime | None
    #: Why the schedule is done, or None while it has work left.
    finished: str | None


def rest(
    state: State,
    next_occurrence: datetime | None,
    now: datetime,
    waiting: bool = False,
    runs_open: bool = False,
) -> Rest:
    """``nextrun`` from the cursor and pending work, or the note that finishes the schedule.

    Work that waits for an open run to end (``waiting``, a held occurrence)
    is woken by the end of that run, not by the clock; if no run is open
    (``runs_open``: the run ended while beat was deciding) the row is due at once.
    """
    # Waiting: only a time still ahead wakes the row; what is overdue waits for the run's end.
    nextrun = wake_time(state, next_occurrence, now if waiting else None)
    if (waiting or state.held is not None) and not runs_open:
        nextrun = now
    finished = None
    if state.held is None and state.retry_at is None and not waiting:
        finished = finish_note(state, next_occurrence, state.policies.remaining)
    return Rest(nextrun, finished)


def finish_note(
    state: State, next_occurrence: datetime | None, remaining: int | None
) -> str | None:
    """Why the schedule is done, or None while it has work left.

    A fixed-delay schedule waiting for its run to finish has no next
    occurrence yet but is not done.
    """
    if remaining is not None and remaining <= 0:
        return NOTE_NO_RUNS_LEFT
    if next_occurrence is not None or state.fixed_delay:
        return None
    end = state.policies.end
    if end is not None and state.timer.next_after(end) is not None:
        return NOTE_PAST_END
    return NOTE_NO_OCCURRENCE


def within_bounds(timer: Timer, policies: Policies, occurrence: datetime | None) -> datetime | None:
    """``occurrence`` moved inside the start/end bounds (None once past the end)."""
    if occurrence is not None and policies.start is not None and occurrence < policies.start:
        occurrence = first_at_or_after(timer, policies.start)
    if occurrence is not None and policies.end is not None and occurrence > policies.end:
        return None
    return occurrence


def bounded_occurrence(state: State, occurrence: datetime | None) -> datetime | None:
    """:func:`within_bounds` for a row's timer and policies."""
    return within_bounds(state.timer, state.policies, occurrence)


# -- overlap ---------------------------------------------------------------------------

#: The overlap choices of a run sent by hand or a backfill: ``buffer_one`` holds a
#: *scheduled* occurrence, which a run sent by hand is not.
MANUAL_OVERLAPS = (Overlap.ALLOW, Overlap.SKIP, Overlap.REPLACE)


class Way(enum.Enum):
    """What an overlap policy does with a new run of a schedule that has runs open."""

    #: Send it: ``allow``, or nothing is open.
    SEND = "send"
    #: Revoke the open runs, then send it: ``replace``.
    REPLACE = "replace"
    #: Hold it until the open run ends: ``buffer_one``, ``buffer_all``.
    HOLD = "hold"
    #: Do not send it: ``skip``, or ``replace`` with nothing recorded to revoke.
    SKIP = "skip"


def overlap_way(overlap: Overlap, live: Sequence[OpenRun], starting: bool = False) -> Way:
    """What ``overlap`` does with a new run while the schedule's ``live`` runs are open.

    One rule for beat's occurrences (:func:`decide`) and the runs sent by hand
    (``run``, ``backfill``). ``starting`` says a run of the schedule is sent in
    the same decision (a retry, a held run): it blocks as an open run does, but
    has no record yet that ``replace`` could revoke.
    """
    if overlap is Overlap.ALLOW or not (live or starting):
        return Way.SEND
    if overlap is Overlap.REPLACE and live:
        return Way.REPLACE
    if overlap in (Overlap.BUFFER_ONE, Overlap.BUFFER_ALL):
        return Way.HOLD
    return Way.SKIP


#: The statuses of a run a worker executes: ``replace_with revoke`` leaves it to finish.
EXECUTING = frozenset({RunStatus.STARTED, RunStatus.RETRY})


def endable(terminate: bool) -> frozenset[RunStatus]:
    """The statuses overlap ``replace`` ends a run from: any open one (``replace_with
    terminate``: those executing are terminated), or one no worker executes yet
    (``revoke``: a run already executing cannot be stopped short of terminating it, so
    it finishes beside the new one). The run is ended only if its status is still one
    of them when the end is written: a run a worker started since it was read is then
    left to finish."""
    return NON_FINAL_STATUSES if terminate else NON_FINAL_STATUSES - EXECUTING


def displaced(live: Sequence[OpenRun], replace_with: ReplaceWith) -> list[str]:
    """The open runs overlap ``replace`` ends (:func:`endable`)."""
    ends = endable(replace_with is ReplaceWith.TERMINATE)
    return [run.id for run in live if run.status in ends]


def manual_overlap(value: str | None) -> Overlap:
    """The overlap of a run sent by hand or a backfill; ``allow`` unless told otherwise."""
    if value is None:
        return Overlap.ALLOW
    mode = next((o for o in MANUAL_OVERLAPS if o.value == value), None)
    if mode is None:
        raise ValidationError("overlap", value, "allow, skip or replace for a manual run")
    return mode


# -- beat: a due row -------------------------------------------------------------------


def split_stale(
    runs: Iterable[OpenRun], now: datetime, stale_after: timedelta
) -> tuple[list[OpenRun], list[OpenRun]]:
    """Split open runs into those still expected to finish and those presumed lost.

    A run whose status has not changed for ``stale_after`` has outlived any
    worker that could finish it; left alone it would block its schedule forever.
    A scheduled run still ``PENDING`` never went to a worker: beat sends it
    when it resumes the fire that recorded it.
    """
    live: list[OpenRun] = []
    stale: list[OpenRun] = []
    for run in runs:
        silent = now - run.updated_at > stale_after and not awaits_beat(run.status, run.trigger)
        (stale if silent else live).append(run)
    return live, stale


def awaits_beat(status: str, trigger: str) -> bool:
    """A run beat recorded but has not sent yet: beat resumes it; it is never lost."""
    return status == RunStatus.PENDING and trigger in SCHEDULED_TRIGGERS


def catchup_share(rows: int, batch_size: int, more_due: bool) -> int:
    """How many owed occurrences of each of ``rows`` claimed rows a tick sends at most
    under catch-up ``all``.

    A tick sends about :data:`TICK_MESSAGES` batch sizes of messages, shared
    among its rows, at least one each and at most :data:`CATCHUP_PER_TICK`.
    When the claim was full (``more_due``: rows may wait behind these, as in
    the first small claims of a backlog), the share is that of a full batch:
    a few rows taken first must not run tens of occurrences ahead of the
    others, so a backlog goes out oldest first across its schedules, each
    tick at most a few occurrences ahead of the next.
    """
    among = batch_size if more_due else rows
    return max(1, min(CATCHUP_PER_TICK, TICK_MESSAGES * batch_size // max(1, among)))


def decide(
    state: State, now: datetime, live: list[OpenRun], catchup_limit: int = CATCHUP_PER_TICK
) -> Plan:
    """What to do with a row whose ``nextrun`` has come: see the module docstring.

    Catch-up ``all`` sends at most ``catchup_limit`` occurrences now, the
    oldest; the row is due again at once for the rest.

    Only overlap ``allow`` lets runs of one schedule execute side by side. Under
    the other policies an owed retry and the occurrences of a catch-up ``all``
    go out one after another: while a run is open they wait (``Plan.waiting``)
    and the end of that run wakes the row.
    """
    policies = state.policies
    sequential = policies.overlap is not Overlap.ALLOW
    sends: list[Send] = []
    sent_retry = None
    waiting = False
    held = state.held
    if state.retry_at is not None and state.retry_at <= now:
        assert state.retry_plan is not None and state.retry_attempt is not None
        if live and sequential:
            waiting = True
        else:
            sends.append(Send(state.retry_plan, Trigger.RETRY, state.retry_attempt))
            sent_retry = state.retry_attempt
    remaining = policies.remaining
    buffering = policies.overlap is Overlap.BUFFER_ALL
    if held is not None and not live and not sends and (remaining is None or remaining > 0):
        sends.append(Send(held, Trigger.SCHEDULED))
        held = next_buffered(state, held) if buffering else None
        remaining = None if remaining is None else remaining - 1
    if remaining is not None and remaining <= 0:
        held = None  # no run left to start it: the schedule finishes

    occurrence = bounded_occurrence(state, state.next_occurrence)
    due: list[datetime] = []
    missed, missed_reason, passed_on_calendars = 0, None, 0
    trigger = Trigger.SCHEDULED
    next_occurrence = occurrence
    if occurrence is not None and fire_time(state, occurrence) <= now:
        due, (missed, missed_reason), passed_on_calendars, trigger, next_occurrence = (
            _due_occurrences(state, occurrence, now, catchup_limit)
        )
    on_calendars = [plan for plan in due if state.excluded(plan)]
    if on_calendars:
        due = [plan for plan in due if plan not in on_calendars]
    if remaining is not None and len(due) > remaining:
        due = due[:remaining]

    skipped, reason = 0, None
    busy = bool(live) or bool(sends)
    revoke: list[str] = []
    if len(due) > 1 and sequential:
        # Catch-up ``all``: the oldest owed occurrence now if nothing runs,
        # the rest when it has ended.
        if not busy:
            sends.append(Send(due[0], trigger))
        owed = due[0] if busy else due[1]
        next_occurrence, waiting, due = owed, True, []
        remaining = None if remaining is None or busy else remaining - 1
    elif due:
        way = overlap_way(policies.overlap, live, starting=bool(sends))
        blocking = (
            f"previous run {live[0].id} is still {live[0].status}"
            if live
            else "a run was just started"
        )
        if way is Way.REPLACE:
            revoke = displaced(live, policies.replace_with)
        elif way is Way.HOLD and buffering:
            # Queued: the occurrences from ``held`` up to the new cursor; those a catch-up
            # passed over inside the queue are queued too, not missed.
            if held is not None:
                missed, missed_reason = 0, None
            room = state.buffer_limit if remaining is None else min(state.buffer_limit, remaining)
            held, skipped = bounded_queue(state, held or due[0], next_occurrence, room)
            reason, due = f"{blocking} and the buffer of {room} is full", []
        elif way is Way.HOLD:
            if held is None and (remaining is None or remaining > 0):
                held, due = due[-1], due[:-1]
            skipped, reason, due = len(due), f"{blocking} and one occurrence is held", []
        elif way is Way.SKIP:
            skipped, reason, due = len(due), blocking, []
    sends.extend(Send(plan, trigger) for plan in due)
    if remaining is not None:
        remaining -= len(due)
    if due and state.fixed_delay:
        # The next occurrence is one interval after this run finishes.
        next_occurrence = None
    # Counted once the cursor is past them: catch-up ``all`` walks those after it again.
    excluded = passed_on_calendars + sum(
        1 for plan in on_calendars if next_occurrence is None or plan < next_occurrence
    )
    return Plan(
        sends=sends,
        revoke=revoke,
        terminate=policies.replace_with is ReplaceWith.TERMINATE,
        skipped=skipped,
        missed=missed,
        excluded=excluded,
        skip_reason=reason,
        missed_reason=missed_reason if missed else None,
        next_occurrence=bounded_occurrence(state, next_occurrence),
        held=held,
        sent_retry=sent_retry,
        remaining=remaining,
        waiting=waiting,
    )


def _queue_last(state: State, cursor: datetime | None) -> datetime:
    """The newest occurrence a ``buffer_all`` queue may hold: the one before the cursor,
    or, once the cursor is gone (past the end, or the timer has no more), the end."""
    if cursor is not None:
        return cursor - _TICK
    return state.policies.end or datetime.max.replace(tzinfo=UTC)


def next_buffered(state: State, sent: datetime) -> datetime | None:
    """Overlap ``buffer_all``: the queued occurrence after ``sent``, which was the oldest
    (None: the queue is empty). The queue is the timer's occurrences from the held one
    up to the cursor (or the end), less those on the schedule's calendars."""
    following = state.timer.next_after(sent)
    while following is not None and state.excluded(following):
        following = state.timer.next_after(following)
    if following is None or following > _queue_last(state, state.next_occurrence):
        return None
    return following


def bounded_queue(
    state: State, oldest: datetime, cursor: datetime | None, room: int
) -> tuple[datetime | None, int]:
    """Overlap ``buffer_all``: the oldest occurrence the queue keeps when it holds those
    from ``oldest`` up to ``cursor`` (the newest last), at most ``room`` of them (None:
    none); and how many of the oldest it drops to keep to that (counted as skipped)."""
    queued: list[datetime] = []
    for plan in occurrences(state.timer, oldest, _queue_last(state, cursor)):
        if not state.excluded(plan):
            queued.append(plan)
        if len(queued) > COUNT_CAP:
            break
    dropped = max(0, len(queued) - room)
    return (queued[dropped] if dropped < len(queued) else None), dropped


def resume(state: State, recorded: list[OpenRun]) -> Plan:
    """Finish a fire that was cut short after recording its runs but before sending them.

    The runs were decided already and their records hold their ids: they are
    sent as they are, and the cursor moves past them, before anything new is
    decided. This keeps one run per occurrence whatever instance resumes.

    The cursor never moves back: a held occurrence is older than it. A held
    occurrence that is among the runs is no longer held.
    """
    sends = sorted(
        Send(run.plan_time, Trigger(run.trigger), run.attempt)
        for run in recorded
        if run.plan_time is not None
    )
    retries = [send for send in sends if send.trigger is Trigger.RETRY]
    occurrences_sent = [send.plan_time for send in sends if send.trigger is not Trigger.RETRY]
    next_occurrence = state.next_occurrence
    if occurrences_sent:
        latest = max(occurrences_sent)
        following = state.timer.next_after(latest)
        if state.fixed_delay:
            next_occurrence = None  # one interval after this run ends
        elif next_occurrence is None or (following is not None and following > next_occurrence):
            next_occurrence = following
    remaining = state.policies.remaining
    held = state.held
    if held in occurrences_sent:
        # The oldest of a ``buffer_all`` queue sent: the next one waits its turn.
        buffered = state.policies.overlap is Overlap.BUFFER_ALL
        held = (
            next_buffered(replace(state, next_occurrence=next_occurrence), held)
            if buffered
            else None
        )
    return Plan(
        sends=sends,
        next_occurrence=bounded_occurrence(state, next_occurrence),
        held=held,
        sent_retry=retries[-1].attempt if retries else None,
        remaining=None if remaining is None else remaining - len(occurrences_sent),
    )


def advance(state: State, plan: Plan) -> State:
    """The row's state once beat has carried out ``plan`` on it (no edit made meanwhile).

    A sent retry is no longer owed; the cursor, the held occurrence and the
    remaining runs are the plan's.
    """
    retry_sent = plan.sent_retry is not None and plan.sent_retry == state.retry_attempt
    return replace(
        state,
        next_occurrence=plan.next_occurrence,
        held=plan.held,
        policies=replace(state.policies, remaining=plan.remaining),
        retry_plan=None if retry_sent else state.retry_plan,
        retry_attempt=None if retry_sent else state.retry_attempt,
        retry_at=None if retry_sent else state.retry_at,
    )


@dataclass(frozen=True)
class Upcoming:
    """A run beat will send: its occurrence, when, and why."""

    #: The occurrence the run is for (its plan time).
    occurrence: datetime
    #: When beat sends it: the occurrence plus its jitter offset, or as soon
    #: as beat acts for an occurrence that is overdue.
    fire_at: datetime
    #: The end of the occurrence's jitter window (the occurrence itself without jitter).
    latest: datetime
    trigger: Trigger
    attempt: int = 1
    #: Sent when the run before it ends (catch-up and retries one after another).
    after_previous: bool = False


@dataclass(frozen=True)
class Forecast:
    """The runs beat will send for a schedule, and why no more are known."""

    runs: list[Upcoming]
    #: Why there is no run beyond these (the schedule finishes, is paused, waits
    #: for a run to end, ...); None when more would follow.
    end: str | None = None


#: Why a fixed-delay schedule's forecast stops after its next run.
NOTE_FIXED_DELAY = "each later run is due one interval after the run before it completes"
#: How many decisions :func:`forecast` may take per run it is asked for, so that a
#: schedule whose decisions send nothing (catch-up ``none``) still ends the search.
_FORECAST_STEPS = 4
#: How many occurrences on the schedule's calendars :func:`forecast` looks past in all:
#: a week of an every-minute schedule.
FORECAST_EXCLUDED = 10_080
#: Why a forecast stops when its calendars exclude every occurrence it looked at.
NOTE_EXCLUDED = f"the next {FORECAST_EXCLUDED:,} occurrences looked at fall on its calendars"


def forecast(state: State, nextrun: datetime | None, now: datetime, count: int) -> Forecast:
    """The next ``count`` runs beat will send for a row due at ``nextrun``, at most.

    Beat's own rules, step by step: at each wake-up :func:`decide` says what
    is sent, :func:`advance` and :func:`rest` say where the row goes next,
    exactly as beat applies them. So the start and end bounds, the remaining
    runs, jitter, an owed retry, a held occurrence and the catch-up of
    overdue occurrences all come out as beat will act on them. It assumes
    every run ends before the next one is due (a run still open makes beat
    skip, hold or wait as the overlap policy says) and that no one edits the
    schedule meanwhile. A fixed delay's next run is known only once the run
    before it has ended, so at most the first is given.
    """
    found: list[Upcoming] = []
    due, after_previous, end = nextrun, False, None
    steps, excluded_steps = _FORECAST_STEPS * count + 2, FORECAST_EXCLUDED
    while steps > 0:
        if due is None or len(found) >= count:
            break
        tick = max(due, now)
        plan = decide(replace(state, nextrun=due), tick, [])
        # An occurrence on a calendar costs a step of its own budget: a week of holidays
        # between two runs of an hourly schedule is still looked through.
        if plan.excluded and not plan.sends:
            excluded_steps -= 1
            if excluded_steps <= 0:
                end = NOTE_EXCLUDED
                break
        else:
            steps -= 1
        for send in plan.sends:
            found.append(
                Upcoming(
                    occurrence=send.plan_time,
                    fire_at=tick,
                    latest=latest_fire_time(state, send.plan_time),
                    trigger=send.trigger,
                    attempt=send.attempt,
                    after_previous=after_previous,
                )
            )
        after_previous = plan.waiting
        if state.fixed_delay and plan.sends:
            end = NOTE_FIXED_DELAY
            break
        state = advance(state, plan)
        position = rest(state, state.next_occurrence, tick, plan.waiting)
        if position.finished is not None:
            end = position.finished
            break
        due = position.nextrun
    return Forecast(found[:count], end if len(found) <= count else None)


#: Why occurrences a catch-up passes over are not run, by what passed them over.
MISSED_BY_LATEST = "catch-up latest runs only the most recent of those due"
MISSED_BY_NONE = "catch-up none runs none of those due while the schedule was behind"


def missed_by_window(window: timedelta) -> str:
    return f"they fell outside its catch-up window of {short_duration(window)}"


def _due_occurrences(
    state: State, first: datetime, now: datetime, limit: int
) -> tuple[list[datetime], tuple[int, str | None], int, Trigger, datetime | None]:
    """The occurrences to send for a row due since ``first``, per the catch-up policy.

    Returns them oldest first, with the number counted as missed and why, the
    number passed over on the schedule's calendars (excluded, not missed),
    their trigger and the first occurrence left for later. The calendars come
    first: catch-up ``latest`` sends the latest occurrence off them, and
    ``none`` or a window miss only the occurrences that would have been sent.
    """
    timer, policies = state.timer, state.policies
    last = now if policies.end is None else min(now, policies.end)
    if state.fixed_delay:
        # Skipped (a run is open): look again one interval later.
        assert isinstance(timer, IntervalTimer)
        return [first], (0, None), 0, Trigger.SCHEDULED, first + timer.interval
    latest = timer.latest_at_or_before(last)
    assert latest is not None and latest >= first
    behind = count_occurrences(timer, first, latest)
    # Overdue: more than one occurrence behind, or still working off a backlog
    # (the row waited for a run to end and was woken after its fire time).
    woken_late = state.nextrun is not None and state.nextrun > fire_time(state, first)
    trigger = Trigger.CATCHUP if behind > 1 or woken_late else Trigger.SCHEDULED
    following = timer.next_after(latest)

    in_window = first
    missed: tuple[int, str | None] = (0, None)
    on_calendars = 0
    if policies.catchup_window is not None:
        earliest = now - policies.catchup_window
        outside = missed_by_window(policies.catchup_window)
        if latest < earliest:
            count, on_calendars = passed_over(state, first, latest, behind)
            return [], (count, outside), on_calendars, trigger, following
        if first < earliest:
            in_window = first_at_or_after(timer, earliest) or latest
            count, on_calendars = passed_over(state, first, in_window - _TICK)
            missed = (count, outside)

    if behind == 1:
        return [first], (0, None), 0, trigger, following
    if policies.catchup is Catchup.NONE:
        count, on_calendars = passed_over(state, first, latest, behind)
        return [], (count, MISSED_BY_NONE), on_calendars, trigger, following
    if policies.catchup is Catchup.LATEST:
        count, on_calendars = passed_over(state, first, latest, behind)
        sent = latest_off_calendars(state, in_window, latest)
        if sent is None:
            return [], (count, MISSED_BY_LATEST), on_calendars, trigger, following
        return [sent], (count - 1, MISSED_BY_LATEST), on_calendars, trigger, following
    batch: list[datetime] = []
    for occurrence in occurrences(timer, in_window, latest):
        if len(batch) == limit:
            # The rest follow on the next tick, which comes at once.
            return batch, missed, on_calendars, trigger, occurrence
        batch.append(occurrence)
    return batch, missed, on_calendars, trigger, following


def passed_over(
    state: State, first: datetime, last: datetime, total: int | None = None
) -> tuple[int, int]:
    """The occurrences in [first, last] a catch-up passes over, as two counts: those
    off the schedule's calendars (missed) and those on them (excluded, as they would
    have been had beat been on time). Capped together at :data:`COUNT_CAP` for a
    schedule that skips calendars, whose occurrences are then looked at one by one.
    ``total``: their number, when the caller has counted them already (a schedule
    without calendars then costs nothing more: a cron timer's count walks them)."""
    if not state.calendars:
        return (count_occurrences(state.timer, first, last) if total is None else total), 0
    off = on = 0
    for plan in occurrences(state.timer, first, last):
        if state.excluded(plan):
            on += 1
        else:
            off += 1
        if off + on >= COUNT_CAP:
            break
    return off, on


def latest_off_calendars(state: State, first: datetime, latest: datetime) -> datetime | None:
    """The latest occurrence from ``first`` to ``latest`` (an occurrence) that is off the
    schedule's calendars; None when every one of them is on one (or the
    :data:`COUNT_CAP` latest are)."""
    plan: datetime | None = latest
    for _ in range(COUNT_CAP):
        if plan is None or plan < first:
            return None
        if not state.excluded(plan):
            return plan
        plan = state.timer.latest_at_or_before(plan - _TICK)
    return None


# -- the outcome of a run ------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """A run that has just reached a final status."""

    trigger: Trigger
    status: RunStatus
    plan_time: datetime | None
    attempt: int
    finished_at: datetime
    error: str | None = None
    #: Seconds the run executed (None: it never started, or the worker did not say).
    runtime: float | None = None

    @classmethod
    def of(cls, run: Any) -> Outcome:
        """The outcome of a final run, given as its record's columns (a row or a mapping).

        A run ended without a finish time (beat giving it up, say) ended when
        its status last changed.
        """
        value = functools.partial(column_of, run)
        return cls(
            trigger=Trigger(value("trigger")),
            status=RunStatus(value("status")),
            plan_time=value("plan_time"),
            attempt=value("attempt"),
            finished_at=value("finished_at") or value("updated_at"),
            error=value("error"),
            runtime=value("runtime"),
        )


@dataclass(frozen=True)
class Thresholds:
    """The app's alert thresholds (``bridge_default_alert_after``,
    ``bridge_default_recover_after``), which a schedule's own policies override."""

    alert_after: int = 1
    recover_after: int = 1


@dataclass(frozen=True)
class Streaks:
    """How a schedule's runs have been going: its failures in a row, and whether (since
    when) it is failing, with its successes in a row since it began to."""

    failures: int
    successes: int
    failing_since: datetime | None


def streaks_after(state: State, failed: bool, at: datetime, thresholds: Thresholds) -> Streaks:
    """A schedule's streaks after an occurrence failed for good (``failed``) or succeeded
    at ``at``.

    It is failing from its ``alert_after``-th failure in a row, and recovers at
    its ``recover_after``-th success in a row: a flaky schedule that fails now and
    then never reaches the first, and one that recovers does not flap back on
    its next failure before the second. Successes are counted only while it is
    failing, so a schedule that keeps succeeding writes nothing.
    """
    policies = state.policies
    alert_after = policies.alert_after or thresholds.alert_after
    recover_after = policies.recover_after or thresholds.recover_after
    if failed:
        failures = state.failure_streak + 1
        since = state.failing_since
        if since is None and failures >= alert_after:
            since = at
        return Streaks(failures, 0, since)
    if state.failing_since is None:
        return Streaks(0, 0, None)
    successes = state.success_streak + 1
    if successes >= recover_after:
        return Streaks(0, 0, None)
    return Streaks(0, successes, state.failing_since)


#: How the note of a schedule the breaker disabled begins; what follows says why.
BROKEN_NOTE = "broken: "


@dataclass(frozen=True)
class Settlement:
    """Changes to a schedule after one of its runs ended (None: leave the column)."""

    retry: tuple[datetime, int, datetime] | None = None
    streaks: Streaks | None = None
    broken_note: str | None = None
    next_occurrence: datetime | None = None
    #: Wake beat now: a held occurrence may start.
    wake: bool = False
    #: The schedule is done (a fixed delay whose next run would pass its end).
    finish_note: str | None = None
    #: The run expired before it started: counted on the schedule.
    expired: bool = False


def settle(
    state: State, outcome: Outcome, is_latest: bool, now: datetime, thresholds: Thresholds
) -> Settlement:
    """What a final status does to the schedule.

    A failed attempt with attempts left owes a retry after the backoff (one
    retry is owed at a time: a failure while another is owed is final); the
    last failed attempt of an occurrence counts once towards the breaker; a
    success resets it; REVOKED does neither. Manual and backfill runs change
    nothing but may free a held occurrence. ``is_latest`` says the run is the
    schedule's latest one, whose end starts a fixed delay's interval. A run
    whose message expired is counted, whatever its trigger. Whether the schedule
    is failing follows :func:`streaks_after` with ``thresholds`` (the app's).
    """
    result = _settle(state, outcome, is_latest, now, thresholds)
    if outcome.status is RunStatus.REVOKED and outcome.error == EXPIRED:
        result = replace(result, expired=True)
    return result


def _settle(
    state: State, outcome: Outcome, is_latest: bool, now: datetime, thresholds: Thresholds
) -> Settlement:
    wake = state.held is not None or _owes_work(state, now)
    if outcome.trigger not in SCHEDULED_TRIGGERS or outcome.plan_time is None:
        return Settlement(wake=wake)
    policies = state.policies
    if outcome.status in (RunStatus.FAILURE, RunStatus.LOST):
        owed = (state.retry_plan, state.retry_attempt)
        # The owed retry is this very attempt when it fails before beat clears it.
        free = state.retry_plan is None or owed == (outcome.plan_time, outcome.attempt)
        if outcome.attempt < policies.max_attempts and free:
            retry_at = outcome.finished_at + policies.retry_delay(outcome.attempt)
            return Settlement(retry=(outcome.plan_time, outcome.attempt + 1, retry_at), wake=wake)
        streaks = streaks_after(state, True, outcome.finished_at, thresholds)
        streak = streaks.failures
        note = None
        if policies.max_failures is not None and streak >= policies.max_failures:
            last_error = (outcome.error or outcome.status.value).splitlines()[0]
            note = f"{BROKEN_NOTE}{streak} consecutive failed runs; last error: {last_error}"
        return replace(
            _after_completion(state, outcome, is_latest),
            streaks=streaks,
            broken_note=note,
            wake=wake,
        )
    succeeded = outcome.status is RunStatus.SUCCESS
    return replace(
        _after_completion(state, outcome, is_latest),
        streaks=streaks_after(state, False, outcome.finished_at, thresholds) if succeeded else None,
        wake=wake,
    )


def _owes_work(state: State, now: datetime) -> bool:
    """Whether the row has a retry or catch-up occurrence that waits for a run to end."""
    retry_due = state.retry_at is not None and state.retry_at <= now
    overdue = state.next_occurrence is not None and state.next_occurrence <= now
    return retry_due or overdue


def _after_completion(state: State, outcome: Outcome, is_latest: bool) -> Settlement:
    """A fixed delay's next occurrence, one interval after its latest run ended."""
    if not (state.fixed_delay and is_latest and state.next_occurrence is None):
        return Settlement()
    assert isinstance(state.timer, IntervalTimer)
    following = bounded_occurrence(state, outcome.finished_at + state.timer.interval)
    if following is None:
        return Settlement(finish_note=NOTE_PAST_END)
    return Settlement(next_occurrence=following)


def wait_seconds(next_due: datetime | None, now: datetime, ceiling: float) -> float:
    """How long beat may sleep: until the earliest ``nextrun``, at most ``ceiling``."""
    if next_due is None:
        return ceiling
    return max(0.0, min(ceiling, (next_due - now).total_seconds()))
