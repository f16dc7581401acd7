"""Beat's statements for the fire sequence: claim, record, mark sent, renew, release, and
the rows a mark still holds, locked for the advance (:mod:`bridge.service.fire`).

Every write that follows the claim names the claiming instance in its
``WHERE`` clause, so an instance whose mark was taken over can no longer move
a schedule it does not hold. Each method is one transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    Table,
    Update,
    bindparam,
    delete,
    select,
    update,
)
from sqlalchemy.orm import Session

from bridge.rules.decisions import OpenRun
from bridge.rules.fire import OLDEST_OPEN_READ, Resumable
from bridge.rules.kinds import RunStatus
from bridge.rules.policy import Catchup
from bridge.storage import runs
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, TaskExecution, UTCDateTime
from bridge.storage.presence import claimable
from bridge.storage.rows import Row, rows_of
from bridge.storage.runs import Sent
from bridge.storage.sql import (
    among,
    changed_rows,
    dialect_of,
    one_of,
)

__all__ = [
    "BeatStore",
    "Claimed",
    "Recorded",
    "Replaced",
    "Row",
    "Sent",
]

_TABLE: Table = PeriodicTask.__table__  # type: ignore[assignment]

#: How far back a row's ``nextrun`` may lie and still be on time, claimed before a backlog.
ON_TIME = timedelta(seconds=1)


def on_time_after(now: datetime, since: datetime | None) -> datetime:
    """The ``nextrun`` after which a due row is on time for a claim at ``now`` (see
    :meth:`BeatStore.claim_due`)."""
    return now - ON_TIME if since is None else min(now - ON_TIME, since)


class Claimed(NamedTuple):
    """The rows a claim marked, in its two parts, each oldest ``nextrun`` first."""

    #: Due since the claim before the last, or within :data:`ON_TIME`.
    on_time: list[Row]
    #: Due before that (a burst longer than a tick, a backlog): the rows owing one run at
    #: most first, then those under catch-up ``all``.
    behind: list[Row]

    @property
    def rows(self) -> list[Row]:
        return self.on_time + self.behind


@dataclass(frozen=True)
class Replaced:
    """The open runs of a row that overlap ``replace`` ends ``REVOKED``, why, and the
    statuses each may still be in to be ended."""

    schedule_id: int
    run_ids: Sequence[str]
    reason: str
    statuses: Collection[RunStatus]


@dataclass(frozen=True)
class Recorded:
    """What recording a batch of runs found.

    ``inserted``: the runs this call wrote (the others existed already);
    ``statuses``: the status now of each run of a row still held;
    ``lost``: the rows whose mark was taken over, for which nothing was recorded,
    revoked or disabled;
    ``revoked``: the displaced runs ended ``REVOKED``, to be revoked on the workers.
    """

    inserted: set[str]
    statuses: dict[str, RunStatus]
    lost: set[int]
    revoked: set[str]


class BeatStore(runs.RunEnding):
    """The fire sequence's statements against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def claim_due(
        self,
        instance: str,
        now: datetime,
        lease: timedelta,
        limit: int,
        besides: Collection[int] = (),
        since: datetime | None = None,
        behind: bool = True,
    ) -> Claimed:
        """Mark up to ``limit`` due rows for ``instance``: those on time first, then (with
        ``behind``) the older ones under any catch-up but ``all``, then the older ones
        under ``all``, each part oldest ``nextrun`` first.

        A row is on time when it fell due within the last :data:`ON_TIME`, or
        after ``since``, whichever reaches further back: a tick of a backlog
        can outlast a second, and a row that fell due during it has had no
        claim yet (beat passes the claim before its last, as a row of a batch
        still finishing sits out one claim). On time first, so that a backlog (beat was down,
        catch-up ``all``) or a burst longer than a tick never holds back a
        schedule falling due now: it goes out in the next tick, whatever
        lies behind it. Of the rows behind, those that owe one run at most
        (catch-up ``latest`` or ``none``: beat was down, or they slipped
        past a claim) go before those owing every occurrence, which would
        otherwise hold them back, missing occurrence after occurrence, until
        the whole backlog had drained.

        A row is claimable when it is unmarked, its mark has expired, the
        instance that marked it is dead (:mod:`bridge.storage.presence`), or the
        mark is this instance's own (left by a tick that failed half-way). On
        PostgreSQL the candidate rows are locked with ``SKIP LOCKED`` so that
        concurrent instances claim disjoint batches without waiting; SQLite
        serialises writers, which makes the same statement a compare-and-set.
        Each part reads a range of the due index. Rows in ``besides`` (this
        instance's, still being finished) are left out.
        """
        late = on_time_after(now, since)
        values = {
            "instance": instance,
            "now": now,
            "late": late,
            "lease_start": now - lease,
            "besides": list(besides),
        }
        with self.database.session() as session:
            on_time = self._claim(session, _ON_TIME, values, limit)
            older: list[Row] = []
            for part in (_OWING_ONE, _OWING_ALL):
                if behind and len(on_time) + len(older) < limit:
                    older += self._claim(session, part, values, limit - len(on_time) - len(older))
        return Claimed(on_time, older)

    @staticmethod
    def _claim(session: Session, part: str, values: dict[str, Any], limit: int) -> list[Row]:
        """Mark up to ``limit`` due rows of the claim's ``part``; sorted by ``nextrun``, then
        id. ``values`` are the claim's (:func:`_claim_candidates`)."""
        dialect = dialect_of(session)
        candidates = _claim_candidates(dialect, part, bool(values["besides"]))
        bound = {**values, "limit": limit}
        if dialect == "mysql":
            # MySQL neither updates a table by a subquery of it nor returns the rows.
            chosen = session.connection().scalars(candidates, bound).all()
            claim = (
                update(_TABLE)
                .where(_TABLE.c.id.in_(chosen))
                .values(worker=values["instance"], marked=values["now"])
            )
            found = changed_rows(session, claim, _TABLE.c.id, *_TABLE.c, by_key=True)
            rows = [Row(**row._asdict()) for row in found]
        else:
            rows = rows_of(session, _claim_statement(dialect, part, bool(values["besides"])), bound)
        return sorted(rows, key=lambda row: (row.nextrun or values["now"], row.id))

    def open_runs_of(self, schedule_ids: Sequence[int]) -> dict[int, list[OpenRun]]:
        """Every open run of each of these schedules, oldest first."""
        with self.database.session() as session:
            return runs.open_runs_of(session, schedule_ids)

    def open_runs_to_decide(self, wanted: Sequence[Resumable]) -> dict[int, list[OpenRun]]:
        """Of each claimed row's open runs, oldest first, those its decision needs: the
        :data:`~bridge.rules.fire.OLDEST_OPEN_READ` first, and every one its unfinished
        fire may have recorded."""
        with self.database.session() as session:
            return runs.open_runs_to_decide(session, wanted, OLDEST_OPEN_READ)

    def record_runs(
        self,
        records: Sequence[dict[str, Any]],
        instance: str,
        marked: datetime,
        now: datetime,
        replaced: Sequence[Replaced] = (),
        bad: Mapping[int, str] | None = None,
    ) -> Recorded:
        """Record a batch's runs (``PENDING``) for the rows whose mark ``instance`` still
        holds, end the runs they replace and disable the rows set aside (``bad``: their
        notes), all in one transaction.

        The records are inserted, the runs ``replace`` displaces are locked,
        then the schedule rows are locked and their marks checked. Only for
        the rows still held are the displaced runs ended ``REVOKED`` with
        their reason (those still in a status their replacement ends: a
        worker may have started one since it was read) and the bad rows
        disabled; the records of rows whose
        lease was taken over are removed again, so an instance that lost a
        lease writes nothing through it and learns it must neither revoke
        nor publish. The lock keeps another instance from taking a row over
        in between (its claim skips locked rows). Runs are locked before the
        schedule rows, in id order, the order the workers use (a run, then
        its schedule), so the two never deadlock. The statuses returned say
        which runs still need publishing.
        """
        bad = bad or {}
        schedule_ids = sorted(
            {record["periodic_task_id"] for record in records}
            | {replacing.schedule_id for replacing in replaced}
            | set(bad)
        )
        run_ids = [record["id"] for record in records]
        displaced = sorted({run_id for replacing in replaced for run_id in replacing.run_ids})
        with self.database.session() as session:
            inserted = runs.insert_runs(session, records)
            if displaced:
                session.execute(
                    select(TaskExecution.id)
                    .where(among(session, TaskExecution.id, displaced))
                    .order_by(TaskExecution.id)
                    .with_for_update()
                    .with_hint(TaskExecution, "FORCE INDEX (PRIMARY)", "mysql")
                )
            held = set(
                session.scalars(
                    _held(session, schedule_ids, instance, marked, PeriodicTask.id)
                    .order_by(PeriodicTask.id)
                    .with_for_update()
                )
            )
            lost = set(schedule_ids) - held
            undone = [r["id"] for r in records if r["periodic_task_id"] in lost]
            if undone:
                session.execute(
                    delete(TaskExecution).where(
                        among(session, TaskExecution.id, inserted & set(undone))
                    )
                )
            revoked: set[str] = set()
            for replacing in replaced:
                if replacing.schedule_id in held:
                    revoked.update(
                        runs.finish_runs(
                            session,
                            replacing.run_ids,
                            RunStatus.REVOKED,
                            now,
                            replacing.reason,
                            replacing.statuses,
                        )
                    )
            _disable(session, {key: note for key, note in bad.items() if key in held}, now)
            statuses = {
                run_id: RunStatus(status)
                for run_id, status in session.execute(
                    select(TaskExecution.id, TaskExecution.status).where(
                        among(session, TaskExecution.id, run_ids),
                        among(session, TaskExecution.periodic_task_id, held),
                    )
                )
            }
        return Recorded(inserted - set(undone), statuses, lost, revoked)

    def mark_sent(self, sent: Sequence[Sent], now: datetime) -> None:
        """``PENDING`` → ``SENT`` for these runs, each with its message's expiry."""
        if not sent:
            return
        with self.database.session() as session:
            runs.mark_sent(session, sent, now)

    def renew(self, instance: str, schedule_ids: Sequence[int], now: datetime) -> set[int]:
        """Restart the leases ``instance`` still holds on these rows; the ids it holds.

        A row another instance has taken over is not renewed and not returned.
        """
        with self.database.session() as session:
            renewed = changed_rows(
                session,
                update(PeriodicTask)
                .where(
                    among(session, PeriodicTask.id, schedule_ids),
                    PeriodicTask.worker == instance,
                )
                .values(marked=now),
                PeriodicTask.id,
                PeriodicTask.id,
                by_key=True,
            )
            return {schedule_id for (schedule_id,) in renewed}

    def reread(
        self, schedule_ids: Sequence[int], instance: str, marked: datetime
    ) -> dict[int, Row]:
        """Those of the rows as they are now whose mark ``instance`` still holds, by id."""
        with self.database.session() as session:
            rows = rows_of(session, _held(session, schedule_ids, instance, marked))
        return {row.id: row for row in rows}

    def disable(self, notes: dict[int, str], instance: str, now: datetime) -> None:
        """Take rows that cannot be used out of rotation, each with the reason, and unmark them."""
        if not notes:
            return
        with self.database.session() as session:
            _disable(session, notes, now, PeriodicTask.worker == instance)

    def release(self, instance: str, schedule_ids: Sequence[int] | None = None) -> None:
        """Clear the marks ``instance`` holds (all of them, or those of ``schedule_ids``)."""
        statement = update(PeriodicTask).where(PeriodicTask.worker == instance)
        with self.database.session() as session:
            if schedule_ids is not None:
                statement = statement.where(among(session, PeriodicTask.id, schedule_ids))
            session.execute(
                statement.values(worker=None, marked=None).execution_options(
                    synchronize_session=False
                )
            )

    def next_due(self, now: datetime, lease: timedelta) -> datetime | None:
        """The earliest ``nextrun`` of the enabled schedules no live instance holds.

        Rows a live instance holds are left out: it unmarks them when done. A
        holder that dies is noticed at the next look, a poll interval later at
        most, and so is a mark that expires.
        """
        with self.database.session() as session:
            statement = _next_due_statement(dialect_of(session))
            return session.connection().scalar(statement, {"lease_start": now - lease})


#: The parts of a claim, in their order: the rows on time, then the older ones that owe
#: one run at most, then the older ones under catch-up ``all``.
_ON_TIME, _OWING_ONE, _OWING_ALL = "on time", "owing one", "owing all"


@functools.cache
def _claim_candidates(dialect: str, part: str, leaving_out: bool) -> Select[int]:
    """The rows a claim's ``part`` may mark, locked and skipping those locked, built once
    per dialect (beat claims at every tick with a row due, and building the statement anew,
    with the look-up of the live instances in it, cost more CPU than running it). Bound:
    ``now``, ``late`` (the on-time bound), ``lease_start``, ``instance``, ``limit`` and,
    when ``leaving_out``, ``besides`` (the ids of the rows left out)."""
    late = bindparam("late", type_=UTCDateTime())
    where = {
        _ON_TIME: (PeriodicTask.nextrun > late,),
        _OWING_ONE: (PeriodicTask.nextrun <= late, PeriodicTask.catchup != Catchup.ALL),
        _OWING_ALL: (PeriodicTask.nextrun <= late, PeriodicTask.catchup == Catchup.ALL),
    }[part]
    others = (
        (~one_of(PeriodicTask.id, postgres=dialect == "postgresql", name="besides"),)
        if leaving_out
        else ()
    )
    instance = bindparam("instance", type_=String())
    lease_start = bindparam("lease_start", type_=UTCDateTime())
    return (
        select(PeriodicTask.id)
        .where(
            PeriodicTask.enabled,
            PeriodicTask.nextrun <= bindparam("now", type_=UTCDateTime()),
            *where,
            *others,
            claimable(dialect, instance, lease_start),
        )
        .order_by(PeriodicTask.nextrun)
        .limit(bindparam("limit", type_=Integer()))
        .with_for_update(skip_locked=True)
    )


@functools.cache
def _claim_statement(dialect: str, part: str, leaving_out: bool) -> Update:
    """The claim of ``part`` where the database updates a table by a subquery of it and
    returns the rows (PostgreSQL, SQLite): :func:`_claim_candidates` marked for
    ``instance`` at ``now``, their whole rows returned."""
    candidates = _claim_candidates(dialect, part, leaving_out)
    return (
        update(_TABLE)
        .where(_TABLE.c.id.in_(candidates.scalar_subquery()))
        .values(
            worker=bindparam("instance", type_=String()),
            marked=bindparam("now", type_=UTCDateTime()),
        )
        .returning(*_TABLE.c)
    )


@functools.cache
def _next_due_statement(dialect: str) -> Select[datetime | None]:
    """The statement of :meth:`BeatStore.next_due`, built once (bound: ``lease_start``):
    an idle beat runs it every second, and building it anew, with the look-up of the
    live instances in it, cost more CPU than running it.

    The first row in ``nextrun`` order rather than ``min(nextrun)``: both walk the
    due index from its start on PostgreSQL, but MySQL and MariaDB read every
    enabled row for a ``min()`` under a condition the index does not hold (40 ms
    a look at 100,000 schedules); in order, they stop at the first claimable row.
    """
    lease_start = bindparam("lease_start", type_=UTCDateTime())
    return (
        select(PeriodicTask.nextrun)
        .where(
            PeriodicTask.enabled,
            PeriodicTask.nextrun.is_not(None),
            claimable(dialect, None, lease_start),
        )
        .order_by(PeriodicTask.nextrun)
        .limit(1)
    )


def _disable(
    session: Session, notes: Mapping[int, str], now: datetime, *guards: ColumnElement[bool]
) -> None:
    """Take rows out of rotation, each with its note, and unmark them (where ``guards`` hold)."""
    for schedule_id, note in sorted(notes.items()):
        session.execute(
            update(PeriodicTask)
            .where(PeriodicTask.id == schedule_id, *guards)
            .values(enabled=False, note=note, worker=None, marked=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )


def _held(
    session: Session, schedule_ids: Sequence[int], instance: str, marked: datetime, *columns: Any
) -> Select[Any]:
    """``columns`` (whole rows by default) of the rows whose mark is still exactly the one
    ``instance`` wrote."""
    return select(*(columns or (_TABLE,))).where(
        among(session, PeriodicTask.id, schedule_ids),
        PeriodicTask.worker == instance,
        PeriodicTask.marked == marked,
    )


def locked_held(
    session: Session, schedule_ids: Sequence[int], instance: str, marked: datetime
) -> dict[int, Row]:
    """Those of the rows whose mark ``instance`` still holds, locked for update, by id.

    Locked in id order, so two transactions locking overlapping sets cannot
    deadlock on each other.
    """
    statement = (
        _held(session, schedule_ids, instance, marked).order_by(PeriodicTask.id).with_for_update()
    )
    return {row.id: row for row in rows_of(session, statement)}
