"""The mark is a lease: held while renewed, taken over once it expires, or at once on
PostgreSQL, MySQL and MariaDB when the instance that holds it has died (its instance lock
is gone)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from celery import Celery
from sqlalchemy import select

from bridge import Bridge
from bridge.beat.fire import FireSequence
from bridge.celery import broker
from bridge.celery.broker import CeleryBroker
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.rules.decisions import Thresholds, endable
from bridge.rules.fire import OLDEST_OPEN_READ, resumable
from bridge.service.fire import Firing
from bridge.service.sweeps import Sweeps
from bridge.storage.beat import BeatStore, Replaced
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask, TaskExecution
from bridge.storage.presence import InstanceLock
from tests.support import on_every_store, wait_for

pytestmark = on_every_store

LEASE = timedelta(seconds=30)
QUICK = "workers.app.quick"


@contextmanager
def alive(database: Database, *instances: str) -> Iterator[dict[str, InstanceLock]]:
    """These instances hold their instance locks, as live beats do (none on SQLite)."""
    if database.engine.dialect.name == "sqlite":
        yield {}
        return
    locks = {instance: InstanceLock(database, instance) for instance in instances}
    try:
        for lock in locks.values():
            assert lock.hold()
        yield locks
    finally:
        for lock in locks.values():
            lock.close()


def test_a_renewed_lease_holds_and_an_expired_one_is_taken_over(api: Bridge) -> None:
    with alive(api.database, "beat-1", "beat-2"):
        renewed_and_expired(api)


def renewed_and_expired(api: Bridge) -> None:
    for name in ("a", "b"):
        api.add(name, task="workers.app.quick", timer="every 1h")
    store = BeatStore(api.database)
    due = utcnow() + timedelta(hours=2)  # both rows are due by then
    mine = store.claim_due("beat-1", due, LEASE, 10).rows
    assert sorted(row.name for row in mine) == ["a", "b"]

    # Renewed before it expired: another instance claims nothing.
    renewed_at = due + timedelta(seconds=20)
    assert store.renew("beat-1", [row.id for row in mine], renewed_at) == {r.id for r in mine}
    assert store.claim_due("beat-2", due + timedelta(seconds=40), LEASE, 10).rows == []

    # Not renewed again: once the lease has run out, another instance takes the rows over,
    # and the first one can no longer renew them or write through its old mark.
    taken = store.claim_due("beat-2", renewed_at + LEASE + timedelta(seconds=1), LEASE, 10).rows
    assert sorted(row.name for row in taken) == ["a", "b"]
    assert store.renew("beat-1", [row.id for row in mine], renewed_at + LEASE) == set()
    assert store.reread([mine[0].id], "beat-1", renewed_at) == {}


def test_a_beat_that_lost_its_lease_revokes_disables_and_records_nothing(
    api: Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overlap ``replace`` and a bad row, fired by a beat whose marks were taken over: it
    neither ends nor terminates the running run, nor disables the row; the new holder does."""
    api.add("replacing", task=QUICK, timer="every 10s", overlap="replace")
    api.add("bad", task=QUICK, timer="every 10s")
    now = utcnow()
    running = "0b5e7c8e-2f4a-4d51-9a3e-6c1f0d2b7a90"
    with api.database.session() as session:
        rows = {row.name: row for row in session.scalars(select(PeriodicTask))}
        for row in rows.values():
            row.next_occurrence = row.nextrun = row.anchor
        rows["bad"].timer = "every fortnight"
        replacing = rows["replacing"]
        session.add(
            TaskExecution(
                id=running,
                periodic_task_id=replacing.id,
                task=QUICK,
                plan_time=replacing.anchor - timedelta(seconds=10),
                attempt=1,
                trigger="scheduled",
                status="STARTED",
                updated_at=now,
            )
        )
    revoked: list[list[str]] = []
    monkeypatch.setattr(broker, "revoke", lambda app, ids, *_, **__: revoked.append(list(ids)))
    app = Celery("lease-test", broker="memory://")
    store = BeatStore(api.database)

    def fire(instance: str, claimed: list[PeriodicTask]) -> int:
        fires = FireSequence(
            CeleryBroker(app),
            Settings(),
            Firing(api.database, Thresholds()),
            Sweeps(api.database, Thresholds()),
            instance,
        )
        return fires.fire(claimed, lambda: False)

    with alive(api.database, "beat-1", "beat-2"):
        mine = store.claim_due("beat-1", now, LEASE, 10).rows
        theirs = store.claim_due("beat-2", now + LEASE + timedelta(seconds=1), LEASE, 10).rows
    assert {row.name for row in mine} == {row.name for row in theirs} == {"replacing", "bad"}

    assert fire("beat-1", mine) == 0
    assert revoked == []
    with api.database.session() as session:
        run = session.get(TaskExecution, running)
        assert run is not None and (run.status, run.error) == ("STARTED", None)
        assert session.scalars(select(TaskExecution.id)).all() == [running]
        bad = session.scalars(select(PeriodicTask).where(PeriodicTask.name == "bad")).one()
        assert (bad.enabled, bad.note, bad.worker) == (True, None, "beat-2")

    assert fire("beat-2", theirs) == 1
    assert revoked == [[running]]
    [new] = [r for r in api.history("replacing") if r.id != running]
    with api.database.session() as session:
        run = session.get(TaskExecution, running)
        assert run is not None and (run.status, run.error) == (
            "REVOKED",
            f"replaced by run {new.id}",
        )
        bad = session.scalars(select(PeriodicTask).where(PeriodicTask.name == "bad")).one()
        assert not bad.enabled and bad.note is not None
        assert bad.note.startswith("disabled by beat: bad row: timer: got 'every fortnight'")


def test_the_marks_of_a_dead_instance_are_taken_over_at_once(api: Bridge) -> None:
    """Its lock gone with its session, a beat's rows are claimable before the lease runs out;
    a live beat's are not. SQLite knows no such locks: there the lease is all."""
    api.add("held", task=QUICK, timer="every 1h")
    store = BeatStore(api.database)
    due = utcnow() + timedelta(hours=2)
    locking = api.database.engine.dialect.name != "sqlite"
    with alive(api.database, "beat-1", "beat-2") as locks:
        [mine] = store.claim_due("beat-1", due, LEASE, 10).rows
        assert store.claim_due("beat-2", due + timedelta(seconds=1), LEASE, 10).rows == []
        assert store.next_due(due + timedelta(seconds=1), LEASE) is None
        if locking:
            locks["beat-1"].close()  # the session ends, as when the process is killed
        later = due + timedelta(seconds=1)
        if locking:
            # The server ends the session a moment after the client closes it.
            taken = wait_for(lambda: store.claim_due("beat-2", later, LEASE, 10).rows, 10)
            assert [row.name for row in taken] == ["held"]
            assert store.reread([mine.id], "beat-1", due) == {}
        else:
            assert store.claim_due("beat-2", later, LEASE, 10).rows == []
            assert store.next_due(later, LEASE) is None


def test_a_claim_takes_rows_due_now_before_a_backlog(api: Bridge) -> None:
    """A schedule falling due now goes out in the next tick, however long the backlog
    ahead of it (beat was down; catch-up ``all``): the on-time rows come first."""
    now = utcnow()
    for name, due in (("old", now - timedelta(minutes=10)), ("older", now - timedelta(hours=1))):
        api.add(name, task=QUICK, timer="every 1h", anchor=due, catchup="all")
    api.add("now", task=QUICK, timer="every 1h", anchor=now)
    with api.database.session() as session:
        for row in session.scalars(select(PeriodicTask)):
            row.next_occurrence = row.nextrun = row.anchor
    store = BeatStore(api.database)
    later = now + timedelta(seconds=30)
    with alive(api.database, "beat-1"):
        [first] = store.claim_due("beat-1", now, LEASE, 1).on_time
        # Between two fires of a backlog, beat claims the rows on time alone.
        alone = store.claim_due(
            "beat-1", later, LEASE, 10, since=now - timedelta(seconds=1), behind=False
        )
        # After a tick longer than a second, a row due since the claim given is on time.
        again = store.claim_due("beat-1", later, LEASE, 1, since=now - timedelta(seconds=1))
        # Kept out while its batch is still finishing: the backlog, the oldest first.
        backlog = store.claim_due("beat-1", later, LEASE, 10, besides=[first.id])
        rest = store.claim_due("beat-1", later, LEASE, 10)
    assert first.name == "now"
    assert ([row.name for row in alone.on_time], alone.behind) == (["now"], [])
    assert ([row.name for row in again.on_time], again.behind) == (["now"], [])
    assert (backlog.on_time, [row.name for row in backlog.behind]) == ([], ["older", "old"])
    # The mark of the first claim is the instance's own: claimed again, now late; owing one
    # run (catch-up latest), it goes before the older backlog owing every occurrence.
    assert (rest.on_time, [row.name for row in rest.behind]) == ([], ["now", "older", "old"])


def test_beat_reads_a_rows_oldest_open_runs_and_all_its_fire_may_have_recorded(
    api: Bridge,
) -> None:
    """To decide a row, beat reads a few of its oldest open runs and every run the
    unfinished fire of the row may have recorded, however many runs are open: a backlog
    sent to workers that fell behind leaves hundreds. SQLite reads them all."""
    api.add("piled", task=QUICK, timer="every 1s", overlap="allow")
    base = utcnow() - timedelta(hours=1)
    cursor = base + timedelta(minutes=10)
    retry = cursor - timedelta(seconds=80)

    def run(
        run_id: str, plan: datetime, age: int, status: str = "SENT", attempt: int = 1
    ) -> TaskExecution:
        return TaskExecution(
            id=run_id,
            periodic_task_id=row.id,
            task=QUICK,
            plan_time=plan,
            attempt=attempt,
            trigger="scheduled",
            status=status,
            updated_at=base + timedelta(seconds=age),
        )

    with api.database.session() as session:
        row = session.scalars(select(PeriodicTask)).one()
        row.next_occurrence = row.nextrun = cursor
        row.retry_plan, row.retry_attempt = retry, 2
        oldest = [f"old-{index:02}" for index in range(OLDEST_OPEN_READ + 10)]
        session.add_all(
            run(run_id, cursor - timedelta(seconds=100 - index), index)
            for index, run_id in enumerate(oldest)
        )
        session.add_all(
            [
                run("unsent", cursor - timedelta(seconds=50), 100, status="PENDING"),
                run("waiting", cursor, 101),
                run("retry", retry, 102, attempt=2),
                run("other", cursor - timedelta(seconds=60), 103),
                run("ended", cursor - timedelta(seconds=40), 104, status="SUCCESS"),
            ]
        )
        session.flush()
        wanted = resumable(row)
    found = BeatStore(api.database).open_runs_to_decide([wanted])
    recorded = ["unsent", "waiting", "retry"]
    if api.database.is_postgres:
        expected = oldest[:OLDEST_OPEN_READ] + recorded
    else:
        expected = [*oldest, *recorded, "other"]
    assert [open_run.id for open_run in found[wanted.schedule_id]] == expected


@contextmanager
def holding(database: Database, schedule_id: int, run_id: str) -> Iterator[None]:
    """A schedule and a run locked by another transaction, by their keys, as an edit in the
    API or a worker's record does (SQLite locks the whole file: nothing there)."""
    if database.engine.dialect.name == "sqlite":
        yield
        return
    with database.engine.connect() as holder, holder.begin():
        holder.execute(
            select(PeriodicTask.id).where(PeriodicTask.id == schedule_id).with_for_update()
        )
        holder.execute(select(TaskExecution.id).where(TaskExecution.id == run_id).with_for_update())
        yield


HELD_RUN = "5d2c1b9e-7f0a-4c3e-8b6d-1a2f3e4d5c6b"


def test_a_batch_fires_while_other_schedules_and_their_runs_are_held(api: Bridge) -> None:
    """While another transaction holds another schedule and a run of its (an edit in the
    API, a worker writing its record), beat fires a batch without waiting for it: each of
    its statements locks the batch's own rows. Left to choose, MariaDB read a table of a
    few rows whole to advance a batch and mark its runs sent, so locked every row, and beat
    and the holder deadlocked."""
    for name in ("fired", "held-1", "held-2", "held-3"):
        api.add(name, task=QUICK, timer="every 1h")
    now = utcnow()
    with api.database.session() as session:
        rows = {row.name: row for row in session.scalars(select(PeriodicTask))}
        fired_row = rows["fired"]
        fired_row.next_occurrence = fired_row.nextrun = fired_row.anchor
        held = rows["held-2"].id
        session.add(
            TaskExecution(
                id=HELD_RUN,
                periodic_task_id=held,
                task=QUICK,
                plan_time=now - timedelta(minutes=1),
                attempt=1,
                trigger="scheduled",
                status="SENT",
                updated_at=now,
            )
        )
    fires = FireSequence(
        CeleryBroker(Celery("locks-test", broker="memory://")),
        Settings(),
        Firing(api.database, Thresholds()),
        Sweeps(api.database, Thresholds()),
        "beat-1",
    )
    store = fires.store
    fired: list[int] = []
    with alive(api.database, "beat-1"):
        claimed = store.claim_due("beat-1", now, LEASE, 10).rows
        assert [row.name for row in claimed] == ["fired"]
        with holding(api.database, held, HELD_RUN):
            firing = threading.Thread(
                target=lambda: fired.append(fires.fire(claimed, lambda: False))
            )
            firing.start()
            firing.join(20)
            done_while_held = not firing.is_alive()
        firing.join()
    assert done_while_held and fired == [1]
    [run] = api.history("fired")
    assert run.status == "SENT"
    with api.database.session() as session:
        row = session.scalars(select(PeriodicTask).where(PeriodicTask.name == "fired")).one()
        assert row.worker is None and row.nextrun > now


@pytest.mark.parametrize("terminate", [False, True])
def test_a_replaced_run_a_worker_started_since_it_was_read_is_left_to_finish(
    api: Bridge, terminate: bool
) -> None:
    """``replace_with revoke`` decides on runs read before the record transaction: a run read
    ``SENT`` that a worker has started since is not ended, nor named to be revoked; it
    finishes beside the new run. ``terminate`` ends it all the same."""
    api.add("replacing", task=QUICK, timer="every 10s", overlap="replace")
    now = utcnow()
    with api.database.session() as session:
        row = session.scalars(select(PeriodicTask)).one()
        row.next_occurrence = row.nextrun = row.anchor
        for run_id, status in (("read-sent-now-started", "STARTED"), ("still-sent", "SENT")):
            session.add(
                TaskExecution(
                    id=run_id,
                    periodic_task_id=row.id,
                    task=QUICK,
                    plan_time=row.anchor - timedelta(seconds=10 * len(status)),
                    attempt=1,
                    trigger="scheduled",
                    status=status,
                    updated_at=now,
                )
            )
    store = BeatStore(api.database)
    with alive(api.database, "beat-1"):
        [claimed] = store.claim_due("beat-1", now, LEASE, 10).rows
        displaced = ["read-sent-now-started", "still-sent"]
        replacing = Replaced(claimed.id, displaced, "replaced by run new", endable(terminate))
        recorded = store.record_runs([], "beat-1", claimed.marked, now, replaced=[replacing])
    ended = {"read-sent-now-started", "still-sent"} if terminate else {"still-sent"}
    assert recorded.revoked == ended
    with api.database.session() as session:
        statuses = dict(session.execute(select(TaskExecution.id, TaskExecution.status)).all())
    assert statuses == {
        "read-sent-now-started": "REVOKED" if terminate else "STARTED",
        "still-sent": "REVOKED",
    }
