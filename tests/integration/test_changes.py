"""A change to a schedule wakes a sleeping beat at once on PostgreSQL.

Beat runs with a poll interval of two minutes, so only the change
notification (migration 0005's triggers, ``bridge.storage.listener``) can explain a
run that starts within seconds of the change. Each test waits far longer
than the notification needs and far shorter than the poll.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge import Bridge
from tests.support import Env, rows, wait_for

pytestmark = pytest.mark.e2e

#: Long enough that a run seen before it can only come from a notification.
POLL = "120"
#: How long a notified change may take to fire, with room for a busy machine.
PROMPT = 15


def fired(env: Env, name: str) -> list[object]:
    return rows(
        env.database_url,
        "SELECT r.id FROM task_execution r JOIN periodic_task p ON p.id = r.periodic_task_id"
        " WHERE p.name = :name",
        name=name,
    )


def soon() -> str:
    return f"at {(datetime.now(UTC) + timedelta(seconds=1)).isoformat()}"


@pytest.fixture
def api(pg_env: Env) -> Bridge:
    from workers.app import app

    bridge = Bridge(app, database_url=pg_env.database_url)
    yield bridge
    bridge.database.dispose()


@pytest.fixture
def idle_beat(pg_env: Env, api: Bridge) -> Env:
    """A beat asleep for the poll interval: one schedule, due in an hour."""
    api.add("later", task="workers.app.quick", timer="every 1h")
    beat = pg_env.start("beat", BRIDGE_POLL_INTERVAL=POLL)
    beat.wait_log("bridge: beat instance")
    return pg_env


def test_a_schedule_added_while_beat_sleeps_fires_at_once(idle_beat: Env, api: Bridge) -> None:
    api.add("new", task="workers.app.quick", timer=soon())
    wait_for(lambda: fired(idle_beat, "new"), PROMPT, what="the new schedule to fire")


def test_an_edit_that_makes_a_schedule_due_fires_at_once(idle_beat: Env, api: Bridge) -> None:
    api.edit("later", timer=soon())
    wait_for(lambda: fired(idle_beat, "later"), PROMPT, what="the edited schedule to fire")


def test_a_resumed_schedule_fires_at_once(idle_beat: Env, api: Bridge) -> None:
    api.add("paused", task="workers.app.quick", timer="every 1h", enabled=False)
    api.edit("paused", timer=soon())
    assert not fired(idle_beat, "paused")
    api.resume("paused")
    wait_for(lambda: fired(idle_beat, "paused"), PROMPT, what="the resumed schedule to fire")


def test_the_listener_sleeps_its_timeout_wakes_on_a_notification_and_drains_them(
    pg_url: str,
) -> None:
    """Beat's sleep, on PostgreSQL's connection itself: a first wait after connecting says
    to look at the table; without a change a wait lasts its timeout; notifications sent
    meanwhile, several at once, end one wait, and the next one sleeps again."""
    import threading
    import time

    from sqlalchemy import text

    from bridge.storage.database import database_for
    from bridge.storage.listener import CHANNEL, ChangeListener

    database = database_for(pg_url)
    listener = ChangeListener(database)
    try:
        assert listener.wait(5.0) is True  # listening from now: what came before is unseen
        started = time.monotonic()
        assert listener.wait(0.5) is False
        assert time.monotonic() - started >= 0.45

        def notify() -> None:
            time.sleep(0.3)
            with database.engine.begin() as connection:
                for _ in range(3):
                    connection.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})

        sender = threading.Thread(target=notify)
        sender.start()
        started = time.monotonic()
        assert listener.wait(30.0) is True
        assert time.monotonic() - started < 15, "woken by the notification, not the timeout"
        sender.join()
        assert listener.wait(0.5) is False, "the three notifications ended one wait"
    finally:
        listener.close()
        database.dispose()
