"""How the status changes a worker reports apply to a run's record.

Each change a worker signal reports (received, started, retried, ended) is a
compare-and-set: it applies only while the run is in one of the statuses it
may move from, so a late or repeated report finds the run moved on and
changes nothing, and of two deliveries starting one run only the first
starts it. :meth:`Effects.of` applies a batch of changes in order to the
runs as they were read, exactly as if each had been written on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bridge.rules.decisions import Outcome
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus, Trigger

#: Statuses a worker may move a run out of (it never reopens a final run).
OPEN = NON_FINAL_STATUSES
#: Statuses of a run no delivery has started yet (a RETRY waits for its next delivery).
NOT_STARTED = frozenset({RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED, RunStatus.RETRY})
#: Never back from STARTED: a second delivery of a running run must not make it
#: look unstarted. A run RECEIVED again (the broker redelivered it) now belongs
#: to the worker that has it.
NOT_RECEIVED = frozenset({RunStatus.PENDING, RunStatus.SENT, RunStatus.RECEIVED})
#: A run under way: a later task of its canvas moves it on to the worker that runs that task.
ON_ITS_WAY = frozenset({RunStatus.STARTED})


class Answer(Protocol):
    """Where the maker of a change that waits for it learns whether it applied
    (True or False, or None when the database could not answer)."""

    def give(self, value: bool | None) -> None: ...

    def wait(self, timeout: float) -> bool | None: ...


@dataclass(frozen=True)
class Change:
    """One status change of one run, as a worker signal reported it."""

    run_id: str
    status: RunStatus
    #: The statuses the run must be in for the change to apply.
    moves_from: frozenset[RunStatus]
    #: When it happened: the run's ``updated_at``.
    at: datetime
    #: Other columns it sets.
    values: Mapping[str, Any] = field(default_factory=dict)
    #: Set ``queued_at`` to ``at`` if the run has none (a delivery's receipt).
    queued: bool = False
    #: The task name of a run the bridge did not send, whose record is created first.
    external_task: str | None = None
    #: Given once the change is written, for a maker that waits for it.
    reply: Answer | None = None
    #: A success of one of the tasks that end a canvas: the run ends ``SUCCESS`` with the
    #: last of them (see :mod:`bridge.rules.canvas`).
    part: bool = False

    @property
    def key(self) -> str:
        return self.run_id

    @property
    def what(self) -> str:
        return f"{self.status.value} of run {self.run_id}"

    def external_record(self) -> dict[str, Any]:
        """The record of a run the bridge did not send, created by its first change."""
        return {
            "id": self.run_id,
            "task": self.external_task,
            "trigger": Trigger.EXTERNAL.value,
            "status": RunStatus.RECEIVED.value,
            "updated_at": self.at,
        }


@dataclass
class Effects:
    """What a batch of changes does to the runs it names, locked as they were read."""

    #: The runs as read: status, schedule, trigger, plan time, attempt, queued_at, started_at
    #: and canvas_left.
    runs: Mapping[str, Any]
    #: Per run that changed, the columns to set: its changes merged, the last one winning.
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per run, its status once the batch is written.
    status: dict[str, RunStatus] = field(default_factory=dict)
    #: The runs the batch makes final, in the order they ended.
    ended: list[str] = field(default_factory=list)
    #: The answers owed to the makers of changes that wait for one.
    replies: list[tuple[Answer, bool]] = field(default_factory=list)
    #: Per run of a canvas, how many of the tasks that end it have yet to succeed.
    left: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, changes: Sequence[Change], runs: Mapping[str, Any]) -> Effects:
        """Check each change against its run's status as the changes before it left it.

        A change so applies exactly when it would have in a transaction of
        its own: a late or repeated one finds the run moved on and is left
        out, and of two compare-and-set starts of one run only the first wins.
        """
        effects = cls(runs, status={run_id: RunStatus(run.status) for run_id, run in runs.items()})
        for change in changes:
            run = runs.get(change.run_id)
            applies = run is not None and effects.status[change.run_id] in change.moves_from
            if change.reply is not None:
                # A run without a record is not the bridge's to guard.
                effects.replies.append((change.reply, applies or run is None))
            if run is None or not applies:
                continue
            values = effects.values.setdefault(change.run_id, {})
            if change.part and effects._one_part_less(change, run, values):
                continue
            if change.queued and run.queued_at is None and "queued_at" not in values:
                values["queued_at"] = change.at
            values.update(change.values, status=change.status.value, updated_at=change.at)
            if change.status.is_final and run.canvas_left is not None:
                # A canvas's run lasts from its first task's start to its end, whichever
                # task ended it; the worker that saw the end did not see the start.
                started = values.get("started_at", run.started_at)
                ended = values.get("finished_at", change.at)
                values.setdefault("runtime", None if started is None else _seconds(started, ended))
            effects.status[change.run_id] = change.status
            if change.status.is_final:
                effects.ended.append(change.run_id)
        return effects

    def _one_part_less(self, change: Change, run: Any, values: dict[str, Any]) -> bool:
        """Count a success of one of the tasks that end a canvas; True while others remain
        (the run is then left open), False when it was the last."""
        left = self.left.get(change.run_id, run.canvas_left)
        if left is None or left <= 1:
            if left is not None:
                values["canvas_left"] = 0
            return False
        self.left[change.run_id] = values["canvas_left"] = left - 1
        values["updated_at"] = change.at
        # Between its tasks a canvas is on no worker: the one that ran this task may go.
        values["worker"] = None
        return True

    def outcome(self, run_id: str) -> Outcome:
        """The end of a run the batch made final, for its schedule's settlement."""
        run = self.runs[run_id]
        columns = ("trigger", "plan_time", "attempt")
        ended = {"finished_at": None, "error": None, "runtime": None, **self.values[run_id]}
        return Outcome.of({**{name: getattr(run, name) for name in columns}, **ended})


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())
