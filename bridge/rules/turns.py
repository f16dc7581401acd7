"""When beat's background work may take a turn: pruning in the quiet between two ticks,
the watchdog's judging no more than a share of a core, and the sweeps of open runs
after a burst rather than during it.

A prune transaction beside a fire takes the process's CPU and the
database's from it. Beat knows how long it will sleep before its next tick,
so the watchdog starts a transaction only while at least a margin of that
sleep is left. A beat that never sleeps that long (ticks back to back
through a long backlog) would never prune, and its history would grow
without bound: once it has had no quiet for a while, the work goes ahead
anyway for one budget, then waits as long again.

The watchdog's passes cannot wait for quiet (a backlog is when alerts
matter most), and a pass reads every open run of the schedules at risk:
hundreds each when a backlog went to workers that fell behind. Beat's
threads share one interpreter lock, so a long pass is followed by a wait
that keeps its judging to a share of a core (:func:`pause_after`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Turns:
    """The turns of one kind of background work; times are ``time.monotonic()`` seconds."""

    #: The least quiet left before the next tick in which a turn may start.
    margin: float
    #: How long without quiet before the work goes ahead anyway.
    starved_after: float
    #: How long it then goes ahead.
    budget: float
    #: When the work last had quiet, or last went ahead without it.
    quiet_seen: float
    #: Until when the work goes ahead without quiet.
    starved_until: float = 0.0

    def may_start(self, at: float, quiet_left: float) -> bool:
        """Whether a turn may start at ``at`` with ``quiet_left`` seconds before the next tick."""
        if quiet_left >= self.margin:
            self.quiet_seen = at
            return True
        if at - self.quiet_seen >= self.starved_after:
            self.quiet_seen = at
            self.starved_until = at + self.budget
        return at < self.starved_until


def pause_after(
    interval: float, took: float, share: float, at_most: float, allowance: float = 0.0
) -> float:
    """How long to wait after a pass that took ``took`` seconds (of CPU): ``interval``, or
    longer, so that what passes take beyond ``allowance`` each is at most ``share`` of
    the time; but no longer than ``at_most`` (unless ``interval`` is), so that a pass
    costly enough to need a longer pause than that still comes that often."""
    counted = max(0.0, took - allowance)
    return max(interval, min(at_most, counted * (1.0 - share) / share))


def put_off(busy_since: float | None, at: float, at_most: float) -> bool:
    """Whether work that may wait is put off at ``at``, beat having claimed full batches
    since ``busy_since`` (None: its last claim was not full): for ``at_most`` seconds of a
    burst or a backlog, then no longer, so that a backlog of hours does not starve it."""
    return busy_since is not None and at - busy_since < at_most
