"""A django-celery-beat store made by django-celery-beat's own code, for the import tests.

Run in the peers' virtualenv: ``python django_source.py`` migrates the
database of ``SOURCE_DATABASE_URL`` and writes the schedules below through
the package's models (and its ``beat_schedule`` upsert), then prints their
names as JSON. ``python django_source.py show`` prints every row's name,
``enabled`` and ``last_run_at``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_settings")

import django
from celery import Celery

django.setup()

from django.core.management import call_command  # noqa: E402
from django_celery_beat.models import (  # noqa: E402
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from django_celery_beat.schedulers import ModelEntry  # noqa: E402

app = Celery("source", set_as_current=True)
app.conf.timezone = "UTC"
NOW = datetime.now(UTC).replace(microsecond=0)


def seed() -> None:
    call_command("migrate", verbosity=0)
    every_2s = IntervalSchedule.objects.create(every=2, period=IntervalSchedule.SECONDS)
    hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    berlin = CrontabSchedule.objects.create(
        minute="30", hour="2", day_of_week="mon-fri", timezone="Europe/Berlin"
    )
    friday_13 = CrontabSchedule.objects.create(
        minute="0", hour="0", day_of_month="13", day_of_week="fri"
    )
    quarterly = CrontabSchedule.objects.create(minute="*/15", hour="*")
    sunset = SolarSchedule.objects.create(event="sunset", latitude=52.52, longitude=13.405)
    launch = ClockedSchedule.objects.create(clocked_time=NOW + timedelta(days=30))
    task = "workers.app.quick"
    PeriodicTask.objects.create(
        name="every-2s",
        task=task,
        interval=every_2s,
        kwargs=json.dumps({"x": 20, "y": 22}),
        last_run_at=NOW - timedelta(seconds=1),
        total_run_count=5,
        description="fast one",
    )
    PeriodicTask.objects.create(
        name="weekday-0230-berlin",
        task=task,
        crontab=berlin,
        args=json.dumps([1, 2]),
        queue="reports",
        exchange="reports",
        routing_key="reports.daily",
        priority=5,
        headers=json.dumps({"team": "finance"}),
        expire_seconds=600,
        last_run_at=NOW - timedelta(days=1),
        total_run_count=40,
    )
    PeriodicTask.objects.create(name="friday-13", task=task, crontab=friday_13)
    PeriodicTask.objects.create(name="quarter-hours", task=task, crontab=quarterly)
    PeriodicTask.objects.create(name="sunset-berlin", task=task, solar=sunset)
    PeriodicTask.objects.create(name="launch", task=task, clocked=launch, one_off=True)
    PeriodicTask.objects.create(
        name="done-once",
        task=task,
        interval=hourly,
        one_off=True,
        enabled=False,
        total_run_count=0,
        last_run_at=NOW - timedelta(hours=3),
    )
    PeriodicTask.objects.create(name="paused-hourly", task=task, interval=hourly, enabled=False)
    PeriodicTask.objects.create(
        name="ends-in-a-week", task=task, interval=hourly, expires=NOW + timedelta(days=7)
    )
    PeriodicTask.objects.create(
        name="starts-tomorrow", task=task, crontab=quarterly, start_time=NOW + timedelta(days=1)
    )
    PeriodicTask.objects.create(name="needs-a-worker-only", task="elsewhere.task", interval=hourly)
    # The app's beat_schedule, upserted as django-celery-beat's beat does.
    ModelEntry.from_entry(
        "config-heartbeat",
        app=app,
        task=task,
        schedule=30.0,
        kwargs={"x": 0, "y": 0},
    )


def show() -> None:
    rows = {
        task.name: {
            "enabled": task.enabled,
            "last_run_at": task.last_run_at.isoformat() if task.last_run_at else None,
        }
        for task in PeriodicTask.objects.all()
    }
    print(json.dumps(rows))


if __name__ == "__main__":
    show() if sys.argv[1:] == ["show"] else seed()
