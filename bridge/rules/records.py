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

    #: The runs as read: status, schedule, trigger, plan time, attempt, queued_at.
    runs: Mapping[str, Any]
    #: Per run that changed, the columns to set: its changes merged, the last one winning.
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per run, its status once the batch is written.
    status: dict[str, RunStatus] = field(default_factory=dict)
    #: The runs the batch makes final, in the order they ended.
    ended: list[str] = field(default_factory=list)
    #: The answers owed to the makers of changes that wait for one.
    replies: list[tuple[Answer, bool]] = field(default_factory=list)

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
            if change.queued and run.queued_at is None and "queued_at" not in values:
                values["queued_at"] = change.at
            values.update(change.values, status=change.status.value, updated_at=change.at)
            effects.status[change.run_id] = change.status
            if change.status.is_final:
                effects.ended.append(change.run_id)
        return effects

    def outcome(self, run_id: str) -> Outcome:
        """The end of a run the batch made final, for its schedule's settlement."""
        run = self.runs[run_id]
        columns = ("trigger", "plan_time", "attempt")
        ended = {"finished_at": None, "error": None, "runtime": None, **self.values[run_id]}
        return Outcome.of({**{name: getattr(run, name) for name in columns}, **ended})
