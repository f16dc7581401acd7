"""The health of a schedule: one state, judged from its row, its open runs and ``now``.

What ``ls``, ``show``, the API, the metrics and the watchdog all show, so
that they never disagree. The states, most pressing first:

``broken``
    the breaker disabled it;
``paused``
    someone paused it;
``finished``
    beat disabled it with nothing left to fire: a one-shot that has run, an
    end that has passed, no runs remaining (or it was imported so);
``overrun``
    a run has been going longer than its ``max_runtime``;
``late``
    an occurrence due more than its ``grace`` ago has not started: beat has
    not sent it, or no worker has started the run sent for it within the
    grace, and none has started a run of the schedule since (a run is waited
    for from when it was sent, so that occurrences beat catches up after an
    outage are not late the moment they go out; a run whose message expired
    unstarted still counts, so that a stopped worker makes its schedules late
    even when each run expires at the next occurrence);
``failing``
    from its ``alert_after``-th failed occurrence in a row (``failing_since``)
    until its ``recover_after``-th successful run in a row, and the breaker
    has not tripped;
``running``
    a worker has one of its runs;
``new``
    it has never run;
``ok``
    none of the above.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bridge.rules.decisions import FINISHED_NOTES
from bridge.rules.kinds import NON_FINAL_STATUSES as NON_FINAL
from bridge.rules.kinds import RunStatus
from bridge.rules.values import column_of
from bridge.rules.words import short_duration


class Health(enum.StrEnum):
    BROKEN = "broken"
    PAUSED = "paused"
    FINISHED = "finished"
    OVERRUN = "overrun"
    LATE = "late"
    FAILING = "failing"
    RUNNING = "running"
    NEW = "new"
    OK = "ok"


#: The states that are trouble: the watchdog opens an incident for each.
TROUBLE = frozenset({Health.BROKEN, Health.OVERRUN, Health.LATE, Health.FAILING})
#: A run a worker holds.
HELD_BY_WORKER = frozenset({RunStatus.RECEIVED, RunStatus.STARTED, RunStatus.RETRY})
#: A run not started yet, or one that ended (expired) before it started.
UNSTARTED = frozenset({RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED, RunStatus.REVOKED})


@dataclass(frozen=True)
class OpenRunView:
    """A run as the health needs it: one not final, or one that expired before it started
    (status ``REVOKED``, no start)."""

    id: str
    status: str
    plan_time: datetime | None
    started_at: datetime | None
    #: When it was recorded to be sent (None: not known).
    queued_at: datetime | None = None

    @property
    def waited_from(self) -> datetime | None:
        """Since when a worker could have started it: its occurrence, or its sending if later."""
        if self.plan_time is None or self.queued_at is None:
            return self.plan_time
        return max(self.plan_time, self.queued_at)


@dataclass(frozen=True)
class Watched:
    """What a schedule's health is judged from: its row's columns, its limits and open runs."""

    enabled: bool
    broken: bool
    note: str | None
    nextrun: datetime | None
    failure_streak: int
    last_run_at: datetime | None
    #: The schedule's grace and max runtime, its own or the app's (None: no limit).
    grace: timedelta
    max_runtime: timedelta | None
    open_runs: Sequence[OpenRunView] = ()
    #: When a run of the schedule last started (recently; None: not known).
    last_started: datetime | None = None
    #: Since when it is failing (its ``alert_after``-th failure in a row), and its
    #: successes in a row since; None and 0 while it is not.
    failing_since: datetime | None = None
    success_streak: int = 0


@dataclass(frozen=True)
class State:
    """A schedule's health: the state, since when, why in words, and the runs concerned."""

    health: Health
    since: datetime | None = None
    reason: str = ""
    runs: tuple[str, ...] = ()

    @property
    def trouble(self) -> bool:
        return self.health in TROUBLE


def watched(
    row: Any,
    open_runs: Sequence[OpenRunView],
    default_grace: float,
    default_max_runtime: float,
    last_started: datetime | None = None,
) -> Watched:
    """What to judge a schedule by: its row's columns (a row or a mapping), its open runs,
    and its own ``grace`` and ``max_runtime`` or else the app's (0: no max runtime)."""
    value = functools.partial(column_of, row)
    grace = value("grace") or default_grace
    max_runtime = value("max_runtime") or default_max_runtime or None
    return Watched(
        enabled=value("enabled"),
        broken=value("broken"),
        note=value("note"),
        nextrun=value("nextrun"),
        failure_streak=value("failure_streak"),
        last_run_at=value("last_run_at"),
        failing_since=value("failing_since"),
        success_streak=value("success_streak"),
        grace=timedelta(seconds=grace),
        max_runtime=None if max_runtime is None else timedelta(seconds=max_runtime),
        open_runs=tuple(open_runs),
        last_started=last_started,
    )


def _failing_reason(watched: Watched) -> str:
    """Why a failing schedule is failing: its failures in a row, or, while it recovers, the
    successes it has had since (not yet its ``recover_after``)."""
    count = watched.failure_streak
    if count:
        return f"its last {count} occurrence{'s' if count > 1 else ''} failed"
    good = watched.success_streak
    if not good:
        return "it failed"
    return f"it failed, and has succeeded {good} time{'s' if good > 1 else ''} in a row since"


def health_of(watched: Watched, now: datetime) -> State:
    """The schedule's state at ``now``; see the module docstring for the order."""
    if watched.broken:
        return State(Health.BROKEN, None, watched.note or "the breaker disabled it")
    if not watched.enabled:
        if watched.note is not None and watched.note in FINISHED_NOTES:
            return State(Health.FINISHED, None, watched.note.removeprefix("finished: "))
        return State(Health.PAUSED, None, watched.note or "paused")
    overrun = _overrun(watched, now)
    if overrun is not None:
        return overrun
    late = _late(watched, now)
    if late is not None:
        return late
    if watched.failing_since is not None:
        return State(Health.FAILING, watched.failing_since, _failing_reason(watched))
    held = [run for run in watched.open_runs if run.status in HELD_BY_WORKER]
    open_runs = [run for run in watched.open_runs if run.status in NON_FINAL]
    if held:
        started = [run.started_at for run in held if run.started_at is not None]
        return State(
            Health.RUNNING,
            min(started) if started else None,
            "a run is under way",
            tuple(run.id for run in held),
        )
    if watched.last_run_at is None and not open_runs:
        return State(Health.NEW, None, "it has never run")
    return State(Health.OK)


def _overrun(watched: Watched, now: datetime) -> State | None:
    if watched.max_runtime is None:
        return None
    limit = watched.max_runtime
    over = [
        run
        for run in watched.open_runs
        if run.status == RunStatus.STARTED
        and run.started_at is not None
        and now - run.started_at > limit
    ]
    if not over:
        return None
    since = min(run.started_at for run in over if run.started_at is not None) + limit
    return State(
        Health.OVERRUN,
        since,
        f"a run has been going for more than its max runtime of {short_duration(limit)}",
        tuple(run.id for run in over),
    )


def waiting_since(runs: Mapping[int, Sequence[OpenRunView]]) -> dict[int, datetime]:
    """Per schedule with a run waiting to start (not started, not ended but for an expiry),
    since when the earliest of them waits: what a run's latest start is compared with."""
    found: dict[int, datetime] = {}
    for schedule_id, open_runs in runs.items():
        waits = [run.waited_from for run in open_runs if _waiting(run)]
        known = [moment for moment in waits if moment is not None]
        if known:
            found[schedule_id] = min(known)
    return found


def _waiting(run: OpenRunView) -> bool:
    return run.status in UNSTARTED and run.started_at is None and run.waited_from is not None


def _late(watched: Watched, now: datetime) -> State | None:
    grace = watched.grace
    waiting = [
        run
        for run in watched.open_runs
        if _waiting(run)
        and run.waited_from is not None
        and now - run.waited_from > grace
        and (watched.last_started is None or watched.last_started < run.waited_from)
    ]
    if waiting:
        oldest = min(run.waited_from for run in waiting if run.waited_from is not None)
        return State(
            Health.LATE,
            oldest,
            f"a run sent {short_duration(now - oldest)} ago has not started "
            f"(grace {short_duration(grace)})",
            tuple(run.id for run in waiting),
        )
    if watched.nextrun is not None and now - watched.nextrun > grace:
        return State(
            Health.LATE,
            watched.nextrun,
            f"due {short_duration(now - watched.nextrun)} ago and not sent "
            f"(grace {short_duration(grace)})",
        )
    return None


def worst(states: Sequence[Health]) -> Health:
    """The most pressing of several states (``ok`` for none)."""
    order = list(Health)
    return min(states, key=order.index, default=Health.OK)


@dataclass(frozen=True)
class StateCounts:
    """How many schedules are in each state their row's columns give, and the schedules
    whose runs or open incidents name another state: that state, and their columns'."""

    by_columns: dict[str, int]
    others: list[tuple[str, str]]


def states_counted(states: StateCounts) -> dict[str, int]:
    """How many schedules are in each health state: a schedule whose runs or incidents name
    a state moves to it where it is the more pressing (an overrun or late run beats
    failing, which beats running)."""
    counts = dict(states.by_columns)
    for state, was in states.others:
        if state != was and worst([Health(state), Health(was)]) is Health(state):
            counts[was] -= 1
            counts[state] = counts.get(state, 0) + 1
    return counts
