"""Beat's watchdog: schedules gone wrong become incidents and alerts; history is pruned.

A daemon thread in every beat process, apart from the tick, so that its
reads never delay a fire. Every ``bridge_watchdog_interval`` it

1. judges the schedules whose trouble may have changed (:meth:`HealthStore.at_risk`)
   with :func:`~bridge.rules.health.health_of`, opens an incident for each
   one late, overrunning, failing or broken, and closes those whose trouble
   is over; the scheduler's "no beat" incident is closed, since this beat
   ticks. A run that overruns is revoked or terminated when its schedule's
   ``on_overrun`` says so;
2. sends the alerts the incidents owe to ``bridge_alert_task`` and the
   ``bridge_alert_urls``: one when an incident opens, again every
   ``bridge_alert_repeat`` while it stays open and unacknowledged, and one
   when it closes;
3. prunes (:mod:`bridge.storage.retention`): looks at the schedules that
   ended runs since the last pass and at a slice of all of them (every
   schedule once an hour), prunes those that hold runs to delete, and sweeps
   the runs that passed their age limit, set by set. With nothing ending and
   nothing ageing, a pass is a handful of index reads.

Several beats run it side by side: the incident rows and the claims on
their alerts make each incident opened once and each alert sent once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.notify import Notifier
from bridge.rules.health import TROUBLE, Health, State, health_of, waiting_since, watched
from bridge.rules.policy import OnOverrun
from bridge.rules.retention import FinalRuns, Limits, slice_of, to_look_at
from bridge.rules.turns import Turns, pause_after
from bridge.service import alerting, sending
from bridge.service.ports import Broker
from bridge.storage.beat import BeatStore
from bridge.storage.database import Database, DatabaseError, error_reason
from bridge.storage.health import AtRisk, Cursors, HealthStore
from bridge.storage.incidents import IncidentStore, Opening
from bridge.storage.retention import BATCH, Cursor, Retention

logger = logging.getLogger("bridge.watchdog")

#: The most schedules of each kind of risk one pass judges (the failing and broken ones
#: in turn, when there are more).
AT_RISK_LIMIT = 1000
#: The schedules of a pass read and judged at once: with the workers down a pass finds
#: thousands, and holding all their rows and runs at once, while beat fires, grew the
#: interpreter's memory at each such pass for good (docs/performance.md, Lag and memory).
JUDGED_AT_ONCE = 200
#: The schedules that ended runs since the last pass, counted at once: with the workers
#: down, every schedule's expired run ends in the same minute, and counting them all at
#: once grew the interpreter's memory for good, as judging them did (see above).
COUNTED_AT_ONCE = 200
#: The time one pass may spend pruning.
PRUNE_BUDGET = 1.0
#: Every schedule's runs are counted once in this time, a slice at each pass: what catches
#: a lowered limit, or runs whose end the look at recent ends missed.
COUNT_ROUND = timedelta(hours=1)
#: How far before the last pass the next one looks for runs that ended: room for the
#: transactions that wrote an earlier ``updated_at`` but committed after the last look.
ENDED_SLACK = timedelta(seconds=10)
#: How often the age limits in use are read again (one read of every schedule's row).
DAYS_EVERY = timedelta(minutes=10)
#: Pruning runs only while beat sleeps between two ticks, and starts a schedule's
#: transaction only this long before the next tick at the latest: longer than one
#: transaction takes (a batch of deletes), so that pruning does not run beside this
#: beat's fires (a change notification that wakes beat early aside).
QUIET_MARGIN = 0.25
#: How often pruning looks for beat's next sleep while it waits for one, in seconds.
QUIET_POLL = 0.02
#: A beat with no quiet this long (a long backlog, ticks back to back) prunes anyway,
#: for one :data:`PRUNE_BUDGET`: slowly, but its history does not grow unchecked.
STARVED_AFTER = 60.0
#: The share of a core the watchdog's judging takes at most, the passes
#: spaced by :func:`~bridge.rules.turns.pause_after`: a beat at rest is to cost 1 % of a
#: core in all, and with 3,000 schedules at risk among 1,000,000 (failing, running) a
#: pass takes 70 to 150 ms; with hundreds of open runs per schedule it took 1.5 s.
WATCH_SHARE = 0.005
#: The longest pause between two passes, whatever they cost, in watchdog intervals (a
#: minute at the default of 5 s): a schedule in trouble is told within a minute or so,
#: even when judging the schedules at risk takes seconds, and sooner where the interval
#: is set shorter to hear of trouble sooner.
WATCH_PAUSE_INTERVALS = 12
#: The CPU of a pass not counted in its share: a pass's few statements at any scale
#: (2 to 10 ms), so that a watchdog with little at risk passes at every interval.
WATCH_ALLOWANCE = 0.02
#: The passes whose cost spaces the next: the cheapest of the last three.
WATCH_COSTS_KEPT = 3
#: How long closed incidents are kept.
CLOSED_KEPT = timedelta(days=30)
#: Incidents the watchdog keeps open until their trouble is over, not judged by health.
EVENTS = frozenset({"missed", "no_beat"})
#: Incidents that stay open until their opening is alerted, however soon their trouble
#: ends: a missed occurrence is over as it is counted, and an overrun the watchdog
#: revokes or terminates is over by the next pass, yet both need telling.
ALERTED_BEFORE_CLOSING = frozenset({"missed", "overrun"})
#: The states each kind of incident lasts through: a failing schedule that breaks is
#: still failing (no recovery is sent for it as it breaks).
LASTS_THROUGH = {
    Health.FAILING.value: frozenset({Health.FAILING, Health.BROKEN}),
}
#: Incidents whose message counts what grows while they are open ("its last 5
#: occurrences failed"): restated when their schedule is judged (the pass after one of its
#: runs ends, which is what grows the count), so that it never says 1 after five.
RESTATED = frozenset({Health.FAILING})


class Watchdog:
    """The watchdog thread of one beat process; see the module docstring."""

    def __init__(
        self,
        broker: Broker,
        settings: Settings,
        database: Database,
        quiet_for: Callable[[], float] = lambda: math.inf,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.broker = broker
        self.settings = settings
        #: Seconds left of beat's sleep before its next tick (0 while it fires).
        self.quiet_for = quiet_for
        #: Whether beat found the schema it expects: no pass before (a beat started before
        #: ``migrate`` would meet the tables half made while the migration runs).
        self.ready = ready
        self.incidents = IncidentStore(database)
        #: Sends to the alert URLs; set when beat really starts, which checks them.
        self.notifier: Notifier | None = None
        self.health = HealthStore(database)
        self.retention = Retention(database)
        self.runs = BeatStore(database)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bridge-watchdog", daemon=True)
        self._pruning = Turns(QUIET_MARGIN, STARVED_AFTER, PRUNE_BUDGET, time.monotonic())
        #: Schedules found to need a look, not yet pruned to their limits.
        self._pending: dict[int, FinalRuns] = {}
        self._ended_since: datetime | None = None
        #: The round over the schedules that ended runs: the last one counted, and when the
        #: round began.
        self._ended_after = 0
        self._ended_round = utcnow()
        self._count_after = 0
        self._count_slice = 0
        #: Per age limit in use, where its sweep has read to, and when they were read.
        self._swept: dict[int, Cursor | None] = {}
        self._days_read: datetime | None = None
        self._failing: str | None = None
        #: The pause before the next pass, in seconds: the interval, or longer while judging
        #: costs more than its share.
        self._pause = settings.watchdog_interval
        #: Where the next look goes on from (the first one reads no ended run: a slow
        #: round over the failing schedules catches what ended while no beat judged).
        self._cursors = Cursors()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.settings.watchdog_interval + 5)

    def _loop(self) -> None:
        pause = self.settings.watchdog_interval
        # The CPU of the last passes' judging: the passes are spaced by the cheapest, what
        # each pass costs, not by a one-off (the first pass compiling its statements, a
        # garbage collection in the middle of one); the first ones come at the interval.
        costs: deque[float] = deque(maxlen=WATCH_COSTS_KEPT)
        while not self._stop.wait(pause):
            if not self.ready():
                continue
            try:
                judging = self.watch(utcnow())
            except Exception as exc:
                reason = error_reason(exc) if isinstance(exc, DatabaseError) else repr(exc)
                if self._failing != reason:
                    logger.error("bridge: watchdog pass failed (%s); retrying", reason)
                self._failing = reason
            else:
                if self._failing is not None:
                    logger.warning("bridge: watchdog passes again")
                self._failing = None
                if judging is not None:  # a pass cut short or left to another beat costs little
                    costs.append(judging)
            pause = self._pause = pause_after(
                self.settings.watchdog_interval,
                min(costs) if len(costs) == costs.maxlen else 0.0,
                WATCH_SHARE,
                WATCH_PAUSE_INTERVALS * self.settings.watchdog_interval,
                WATCH_ALLOWANCE,
            )

    def watch(self, now: datetime) -> float | None:
        """One pass: judge (if no other beat is judging), alert, prune; the CPU seconds
        the judging took from beat's fires, which spaces the passes (what grows with the
        schedules at risk; alerts are sent as incidents come, and pruning waits for
        beat's quiet instead), or None when another beat judged."""
        started = time.thread_time()
        with self.health.judging() as judging:
            if judging:
                self.judge(now)
        took = time.thread_time() - started if judging else None
        if self.settings.alerting:
            repeat = timedelta(seconds=self.settings.alert_repeat)
            alerting.send_alerts(
                self.broker,
                self.incidents,
                self.settings.alert_task,
                repeat,
                notifier=self.notifier,
            )
        self.prune(now)
        return took

    # -- 1. judge ---------------------------------------------------------------------------

    def judge(self, now: datetime) -> None:
        """Judge the schedules a look finds, :data:`JUDGED_AT_ONCE` at a time: their incidents
        opened, restated or closed as their health says."""
        settings = self.settings
        found, following = self.health.at_risk(
            now,
            settings.default_grace,
            settings.default_max_runtime,
            AT_RISK_LIMIT,
            self._cursors,
            ENDED_SLACK,
        )
        for start in range(0, max(len(found), 1), JUDGED_AT_ONCE):
            # Once at least, with no schedule: each part looks at the scheduler's incidents
            # too, and this beat ticks, so no "no beat" incident goes on.
            part = found[start : start + JUDGED_AT_ONCE]
            self._judge(self.health.judged(part, now, waiting_since=waiting_since), now)
        self._cursors = following  # only now: a pass that failed is looked at again

    def _judge(self, at_risk: list[AtRisk], now: datetime) -> None:
        states = {risk.columns["id"]: (risk, self.state_of(risk, now)) for risk in at_risk}
        troubled = {
            (state.health.value, schedule_id)
            for schedule_id, (_, state) in states.items()
            if state.trouble
        }
        # The incidents of a schedule not in this part stay as they are until a part judges it.
        open_now = self.incidents.open_incidents(sorted(states))
        over = [
            incident.id
            for incident in open_now
            if not self._lasts(incident.kind, incident.periodic_task_id, troubled, states)
            and (
                incident.kind not in ALERTED_BEFORE_CLOSING
                or incident.alerted_at
                or not self.settings.alert_task
            )
        ]
        self.incidents.close(over, now)
        going_on = [incident for incident in open_now if incident.id not in over]
        self.incidents.restate(
            {
                incident.id: state.reason
                for incident in going_on
                if incident.periodic_task_id in states
                for _, state in [states[incident.periodic_task_id]]
                if state.health in RESTATED
                and state.health.value == incident.kind
                and state.reason != incident.message
            }
        )
        known = {(i.kind, i.periodic_task_id) for i in going_on}
        self.incidents.open(
            [
                Opening(
                    kind, schedule_id, risk.columns["name"], state.since, state.reason, state.runs
                )
                for kind, schedule_id in sorted(troubled - known)
                for risk, state in [states[schedule_id]]
            ],
            now,
        )
        for risk, state in states.values():
            if state.health is Health.OVERRUN:
                self._act_on_overrun(risk, state)

    def state_of(self, risk: AtRisk, now: datetime) -> State:
        """A schedule's health, its own limits falling back on the app's."""
        settings = self.settings
        subject = watched(
            risk.columns,
            risk.open_runs,
            settings.default_grace,
            settings.default_max_runtime,
            risk.last_started,
        )
        return health_of(subject, now)

    @staticmethod
    def _lasts(
        kind: str,
        schedule_id: int | None,
        troubled: set[tuple[str, int]],
        states: dict[int, tuple[AtRisk, State]],
    ) -> bool:
        """Whether an open incident's trouble goes on (this beat ticks: no beat is over)."""
        if kind == "no_beat":
            return False
        if schedule_id is None:
            return True
        state = states.get(schedule_id)
        if kind in EVENTS:
            # A missed occurrence ends once its schedule is out of trouble.
            return state is not None and state[1].health in TROUBLE
        if kind in LASTS_THROUGH:
            return state is not None and state[1].health in LASTS_THROUGH[kind]
        return (kind, schedule_id) in troubled

    def _act_on_overrun(self, risk: AtRisk, state: State) -> None:
        action = OnOverrun(risk.columns["on_overrun"])
        if action is OnOverrun.NONE:
            return
        limit = risk.columns["max_runtime"] or self.settings.default_max_runtime
        reason = f"overran its max runtime of {limit:g}s; {action.value}d by the watchdog"
        revoked = sending.revoke(
            self.broker,
            self.runs,
            list(state.runs),
            reason,
            terminate=action is OnOverrun.TERMINATE,
        )
        for run_id in revoked:
            logger.warning("bridge: run %s of %r %s", run_id, risk.columns["name"], reason)

    # -- 3. prune ---------------------------------------------------------------------------

    def prune(self, now: datetime) -> None:
        """Prune for up to :data:`PRUNE_BUDGET` seconds, one transaction after another
        (:meth:`_prune_steps`), carrying on next pass where this one stopped.

        Only in beat's sleep between two ticks, each transaction started at
        least :data:`QUIET_MARGIN` before the next tick: pruning beside a fire
        would take the process's CPU and the database's from it, and the runs
        it deletes can wait. A beat that has had no such quiet for
        :data:`STARVED_AFTER` seconds prunes anyway, for one budget.
        """
        limits = Limits(self.settings.history_keep_runs, self.settings.history_keep_days)
        steps = self._prune_steps(now, limits)
        deadline = time.monotonic() + PRUNE_BUDGET
        while time.monotonic() < deadline:
            if not self._may_prune():
                if self._stop.wait(QUIET_POLL):
                    return
                continue
            # A turn taken without quiet gets its whole budget, wherever in the pass it began.
            deadline = max(deadline, self._pruning.starved_until)
            if not next(steps, False):
                return

    def _prune_steps(self, now: datetime, limits: Limits) -> Iterator[bool]:
        """A pass's pruning, one step (a transaction or two) per item, each yielding True:
        what it needs is kept on the watchdog, so that a pass cut short loses nothing."""
        retention = self.retention
        since = self._ended_since or now - ENDED_SLACK
        if not self._ended_after:
            self._ended_round = now
        ended = retention.ended_since(since, self._ended_after)
        for start in range(0, len(ended), COUNTED_AT_ONCE):
            part = ended[start : start + COUNTED_AT_ONCE]
            self._flag(to_look_at(retention.final_runs(part, limits, now)))
            self._ended_after = part[-1]
            yield True
        # The next round looks from when this one began: a pass cut short goes on after the
        # last schedule it counted, and those it had counted may have ended runs since.
        self._ended_since, self._ended_after = self._ended_round - ENDED_SLACK, 0
        yield True
        if not self._count_after:
            # As many slices as passes come in a round, at their current spacing.
            passes = COUNT_ROUND / timedelta(seconds=self._pause)
            self._count_slice = slice_of(retention.schedules(), int(passes))
        counted = retention.count_slice(self._count_after, self._count_slice, limits, now)
        self._flag(to_look_at(counted.counted))
        self._count_after = counted.last_id or 0
        if counted.last_id is None:
            self.incidents.forget_closed(now - CLOSED_KEPT)
        yield True
        while self._pending:
            flagged = next(iter(self._pending.values()))
            if retention.prune_schedule(flagged, now) < BATCH:
                del self._pending[flagged.id]
            yield True
        if self._days_read is None or now - self._days_read >= DAYS_EVERY:
            in_use = retention.keep_days_in_use(limits)
            self._swept = {days: self._swept.get(days) for days in in_use}
            self._days_read = now
            yield True
        for days in sorted(self._swept):
            while True:
                swept = retention.sweep_age(days, self._swept[days], limits, now)
                self._swept[days] = swept.cursor
                yield True
                if swept.done:
                    break

    def _flag(self, flagged: list[FinalRuns]) -> None:
        for schedule in flagged:
            self._pending.setdefault(schedule.id, schedule)

    def _may_prune(self) -> bool:
        """Whether a pruning transaction may start now (see :meth:`prune`)."""
        return self._pruning.may_start(time.monotonic(), self.quiet_for())
