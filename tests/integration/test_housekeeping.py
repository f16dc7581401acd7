"""Beat's housekeeping waits for a burst: the runs whose message expired are ended after it."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from bridge import Bridge
from bridge.beat.housekeeping import Housekeeper
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.rules.decisions import Thresholds
from bridge.service.sweeps import Sweeps
from bridge.storage.models import PeriodicTask, TaskExecution
from tests.support import on_every_store

pytestmark = on_every_store

QUICK = "workers.app.quick"
SEC = timedelta(seconds=1)


def record_run(
    api: Bridge,
    name: str,
    run_id: str,
    status: str,
    now: datetime,
    expires_at: datetime | None,
    minutes_ago: int = 1,
) -> None:
    """A run of the schedule ``name`` sent ``minutes_ago`` before ``now``, recorded
    ``status``, and the schedule's latest run."""
    with api.database.session() as session:
        schedule = session.scalars(select(PeriodicTask).where(PeriodicTask.name == name)).one()
        sent = now - timedelta(minutes=minutes_ago)
        session.add(
            TaskExecution(
                id=run_id,
                periodic_task_id=schedule.id,
                task=QUICK,
                plan_time=sent,
                attempt=1,
                trigger="scheduled",
                status=status,
                queued_at=sent,
                expires_at=expires_at,
                updated_at=sent,
            )
        )
        schedule.last_run_id, schedule.last_run_at, schedule.last_status = run_id, sent, status


def test_expired_runs_are_ended_once_the_claims_are_no_longer_full(api: Bridge) -> None:
    """While beat's claims are full (a burst), a run whose message expired stays ``SENT``;
    the first tick after the burst ends it ``REVOKED`` as expired."""
    api.add("every-minute", task=QUICK, timer="every 1m")
    now = utcnow()
    run_id = "01000000-0000-8000-8000-000000000001"
    record_run(api, "every-minute", run_id, "SENT", now, now - timedelta(seconds=10))
    housekeeper = Housekeeper(Sweeps(api.database, Thresholds()), Settings(), "beat-1", now)

    def status() -> tuple[str, str | None]:
        with api.database.session() as session:
            run = session.get(TaskExecution, run_id)
            assert run is not None
            return run.status, run.error

    housekeeper.run(now, 0, busy=True)
    housekeeper.run(now, 0, busy=True)
    assert status() == ("SENT", None)
    housekeeper.run(now, 0, busy=False)
    assert status() == ("REVOKED", "expired")


def test_a_latest_run_the_sweeps_end_is_shown_with_its_end(api: Bridge) -> None:
    """A schedule shows the status of its latest run (``bridge ls``, the API, the
    dashboard): one whose message expired unreceived shows ``REVOKED``, one left silent
    by its worker ``LOST``, not the ``SENT`` or ``STARTED`` they were."""
    now = utcnow()
    sweeps = Sweeps(api.database, Thresholds())
    api.add("expiring", task=QUICK, timer="every 1m")
    api.add("silent", task=QUICK, timer="every 1m")
    api.add("other", task=QUICK, timer="every 1m")
    record_run(api, "expiring", "01000000-0000-8000-8000-000000000002", "SENT", now, now - SEC)
    record_run(api, "silent", "01000000-0000-8000-8000-000000000003", "STARTED", now, None)
    record_run(api, "other", "01000000-0000-8000-8000-000000000004", "SUCCESS", now, None, 2)
    record_run(api, "other", "01000000-0000-8000-8000-000000000005", "STARTED", now, None)
    assert [run.id[-1] for run in sweeps.expire_unreceived(now, now, 100)] == ["2"]
    assert [run.id[-1] for run in sweeps.sweep_stale(now, timedelta(seconds=30), "silent")] == [
        "3",
        "5",
    ]
    assert [(s.name, s.last_status) for s in api.schedules().items] == [
        ("expiring", "REVOKED"),
        ("other", "LOST"),
        ("silent", "LOST"),
    ]
