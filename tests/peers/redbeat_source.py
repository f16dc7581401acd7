"""A RedBeat store made by RedBeat's own code, for the import tests.

Run in the peers' virtualenv with ``SOURCE_REDIS_URL`` and ``SOURCE_PREFIX``:
``python redbeat_source.py`` saves the entries below through
``RedBeatSchedulerEntry`` (and the static ones through RedBeat's beat_schedule
upsert); ``python redbeat_source.py show`` prints each entry's ``enabled``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta

from celery import Celery
from celery.schedules import crontab, schedule
from redbeat.schedulers import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.schedules import rrule

app = Celery("source", set_as_current=True)
app.conf.update(
    timezone="UTC",
    redbeat_redis_url=os.environ["SOURCE_REDIS_URL"],
    redbeat_key_prefix=os.environ["SOURCE_PREFIX"],
    beat_schedule={
        "config-heartbeat": {
            "task": "workers.app.quick",
            "schedule": 30.0,
            "kwargs": {"x": 0, "y": 0},
        }
    },
)
NOW = datetime.now(UTC).replace(microsecond=0)
TASK = "workers.app.quick"


def seed() -> None:
    entry = RedBeatSchedulerEntry(
        "every-3s", TASK, schedule(timedelta(seconds=3)), kwargs={"x": 1, "y": 1}, app=app
    )
    entry.last_run_at = NOW - timedelta(seconds=2)
    entry.save()
    entry.reschedule(NOW - timedelta(seconds=2))
    RedBeatSchedulerEntry(
        "nightly",
        TASK,
        crontab(minute="0", hour="3", day_of_month="1-7", day_of_week="mon"),
        args=[1, 2],
        options={"queue": "reports", "priority": 3, "expires": 120},
        app=app,
    ).save()
    RedBeatSchedulerEntry(
        "paused", TASK, schedule(timedelta(hours=1)), enabled=False, app=app
    ).save()
    RedBeatSchedulerEntry(
        "rrule-weekly", TASK, rrule("WEEKLY", dtstart=NOW, byweekday=[0, 2]), app=app
    ).save()
    # The static entries, as RedBeat's beat stores them when it starts.
    scheduler = RedBeatScheduler.__new__(RedBeatScheduler)
    scheduler.app = app
    scheduler.update_from_dict(app.conf.beat_schedule)
    from redbeat.schedulers import get_redis

    get_redis(app).sadd(app.redbeat_conf.statics_key, *app.conf.beat_schedule)


def show() -> None:
    from redbeat.schedulers import get_redis

    client = get_redis(app)
    keys = client.zrange(app.redbeat_conf.schedule_key, 0, -1)
    rows = {}
    for key in keys:
        definition = json.loads(client.hget(key, "definition"))
        rows[definition["name"]] = {"enabled": definition["enabled"]}
    print(json.dumps(rows))


if __name__ == "__main__":
    show() if sys.argv[1:] == ["show"] else seed()
