"""django-celery-beat's own beat on the source store, for the move walked through in
docs/migrating.md: ``python -m celery -A django_beat beat`` in the peers' virtualenv, with
``SOURCE_DATABASE_URL`` the Django database and ``SOURCE_BROKER_URL`` the broker. It sends
to the queue ``SOURCE_QUEUE``, which nothing consumes, and logs each send."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_settings")

import django
from celery import Celery

django.setup()

app = Celery("source", broker=os.environ["SOURCE_BROKER_URL"])
app.conf.update(
    timezone="UTC",
    task_default_queue=os.environ.get("SOURCE_QUEUE", "source"),
    beat_scheduler="django_celery_beat.schedulers:DatabaseScheduler",
    # A change made in the database is seen within a second, as in the walk-through.
    beat_max_loop_interval=1,
    broker_connection_retry_on_startup=True,
)
