"""Beat's housekeeping waits for a burst: the runs whose message expired are ended after it."""

from __future__ import annotations

from datetime import timedelta

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


def test_expired_runs_are_ended_once_the_claims_are_no_longer_full(api: Bridge) -> None:
    """While beat's claims are full (a burst), a run whose message expired stays ``SENT``;
    the first tick after the burst ends it ``REVOKED`` as expired."""
    api.add("every-minute", task=QUICK, timer="every 1m")
    now = utcnow()
    run_id = "01000000-0000-8000-8000-000000000001"
    with api.database.session() as session:
        schedule = session.scalars(select(PeriodicTask)).one()
        session.add(
            TaskExecution(
                id=run_id,
                periodic_task_id=schedule.id,
                task=QUICK,
                plan_time=now - timedelta(minutes=1),
                attempt=1,
                trigger="scheduled",
                status="SENT",
                queued_at=now - timedelta(minutes=1),
                expires_at=now - timedelta(seconds=10),
                updated_at=now - timedelta(minutes=1),
            )
        )
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
