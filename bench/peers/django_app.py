"""django-celery-beat's ``DatabaseScheduler`` for ``bench/peers.py``.

Run as a script, it creates django-celery-beat's tables (``migrate``) and the
burst's rows: one ``IntervalSchedule`` of an hour and N ``PeriodicTask`` rows
on it, inserted with ``bulk_create``::

    python -m django_app
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_settings")

import burst_entries
import django
from celery import Celery

from bench.beat_app import TASK, shared_settings

django.setup()

app = Celery("peers-django")
app.conf.update(
    shared_settings(),
    beat_scheduler="django_celery_beat.schedulers:DatabaseScheduler",
)


def seed() -> None:
    from django.core.management import call_command
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    call_command("migrate", verbosity=0)
    every = IntervalSchedule.objects.create(
        every=int(burst_entries.EVERY.total_seconds()), period=IntervalSchedule.SECONDS
    )
    last_run = burst_entries.last_run_at()
    PeriodicTask.objects.bulk_create(
        (
            PeriodicTask(name=name, task=TASK, interval=every, last_run_at=last_run)
            for name in burst_entries.names()
        ),
        batch_size=5000,
    )


if __name__ == "__main__":
    seed()
