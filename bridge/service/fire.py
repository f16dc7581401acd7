"""The fire sequence's last unit of work: the rows a batch fired, advanced and unmarked.

Beat decides each row's plan when it fires it (:mod:`bridge.beat.fire`);
the advance applies it to the row as it is by then, in one transaction for
the batch: an edit or a worker's settlement made meanwhile stays
(:func:`bridge.service.settlement.apply_plan`). The other phases decide
nothing in the store, and beat calls their gateway, :attr:`Firing.store`,
directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from bridge.rules.decisions import Plan, Thresholds
from bridge.rules.fire import ScheduleRow
from bridge.service.settlement import CLAIMED_READ, PLAN_COLUMNS, apply_plan
from bridge.storage import runs
from bridge.storage.beat import BeatStore, locked_held
from bridge.storage.rows import Row, write_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bridge.storage.database import Database


@dataclass(frozen=True)
class Advance:
    """One fired row to advance: as it was claimed, its plan, and the runs sent for it."""

    claimed: ScheduleRow
    plan: Plan
    #: The ids of the runs this fire sent, the last one last.
    sent: list[str]

    @classmethod
    def of(cls, claimed: ScheduleRow, plan: Plan, sent: list[str]) -> Advance:
        """The advance of a fired row, with only what advancing reads of the row as
        claimed and of its plan (not the runs to send, already recorded): beat hands
        its batches to a process of their own to finish, and pickling whole rows and
        plans cost as much CPU as a seventh of the burst."""
        kept = Row(**{name: getattr(claimed, name) for name in CLAIMED_READ})
        return cls(kept, replace(plan, sends=[], revoke=[]), sent)


@dataclass
class Advanced:
    """What advancing a batch did."""

    #: The rows whose mark was taken over before they could be advanced.
    lost: list[int] = field(default_factory=list)
    #: The rows the advance finished or disabled, with their note.
    finished: dict[int, str | None] = field(default_factory=dict)


class Firing:
    """Beat's fire sequence against one database: the advance, and the gateway for the
    phases that decide nothing in the store (claim, record, mark sent, release)."""

    def __init__(self, database: Database, thresholds: Thresholds) -> None:
        self.store = BeatStore(database)
        #: The app's alert thresholds, which a run already ended when its row advances
        #: is settled with.
        self.thresholds = thresholds

    @property
    def database(self) -> Database:
        return self.store.database

    def advance(
        self, advances: Sequence[Advance], instance: str, marked: datetime, now: datetime
    ) -> Advanced:
        """Move the rows' cursors and clear their marks, except where a mark was taken over.

        One transaction for the batch, the rows locked in id order. Each row
        is advanced from its values as they are now (an edit or a worker's
        settlement made meanwhile stays), with its plan and the status of the
        last run sent for it.
        """
        done = Advanced()
        if not advances:
            return done
        with self.database.session() as session:
            held = locked_held(session, [a.claimed.id for a in advances], instance, marked)
            last = runs.statuses(session, [a.sent[-1] for a in advances if a.sent])
            for step in advances:
                row = held.get(step.claimed.id)
                if row is None:
                    done.lost.append(step.claimed.id)
                    continue
                last_status = last.get(step.sent[-1]) if step.sent else None
                apply_plan(
                    session,
                    row,
                    step.claimed,
                    step.plan,
                    step.sent,
                    now,
                    self.thresholds,
                    last_status,
                )
                if not row.enabled:
                    done.finished[row.id] = row.note
            write_rows(
                session,
                [held[a.claimed.id] for a in advances if a.claimed.id in held],
                PLAN_COLUMNS,
            )
        if done.lost:
            self.store.release(instance, done.lost)
        return done
