"""RedBeat's ``RedBeatScheduler`` for ``bench/peers.py``.

Its keys live in the broker's Redis database under ``<queue>:redbeat:``, so
the bench's clean-up of the run's queue removes them too. Run as a script, it
writes the burst's entries::

    python -m redbeat_app

Each entry is written the way ``RedBeatSchedulerEntry.save`` and
``reschedule`` write one: the definition and the meta (``last_run_at``) in
the entry's hash, and its due time as its score in the schedule's sorted set.
The score is the due instant itself, as RedBeat sets it after a run; ``save``
on a fresh entry would compute it from the time of seeding instead.
"""

from __future__ import annotations

import json

import burst_entries
from celery import Celery
from celery.schedules import schedule
from redbeat.decoder import RedBeatJSONEncoder, to_timestamp
from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

from bench.beat_app import TASK, shared_settings

app = Celery("peers-redbeat")
app.conf.update(shared_settings())
app.conf.update(
    beat_scheduler="redbeat.RedBeatScheduler",
    redbeat_redis_url=app.conf.broker_url,
    redbeat_key_prefix=f"{app.conf.task_default_queue}:redbeat:",
)


def seed() -> None:
    client = get_redis(app)
    every = schedule(burst_entries.EVERY, app=app)
    meta = json.dumps({"last_run_at": burst_entries.last_run_at()}, cls=RedBeatJSONEncoder)
    score = to_timestamp(burst_entries.due())
    with client.pipeline(transaction=False) as pipe:
        for i, name in enumerate(burst_entries.names(), 1):
            entry = RedBeatSchedulerEntry(name, TASK, every, app=app)
            definition = {
                "name": entry.name,
                "task": entry.task,
                "args": entry.args,
                "kwargs": entry.kwargs,
                "options": entry.options,
                "schedule": entry.schedule,
                "enabled": entry.enabled,
            }
            pipe.hset(
                entry.key,
                mapping={
                    "definition": json.dumps(definition, cls=RedBeatJSONEncoder),
                    "meta": meta,
                },
            )
            pipe.zadd(app.redbeat_conf.schedule_key, {entry.key: score})
            if i % 1000 == 0:
                pipe.execute()
        pipe.execute()


if __name__ == "__main__":
    seed()
