"""The project's Celery app, configured from the Django settings (``CELERY_*``), with the
bridge's store taken from the Django database, as docs/django.md shows."""

from __future__ import annotations

import os

from celery import Celery

import bridge.recorder
from bridge.contrib.django.conf import database_url

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_site.settings")

app = Celery("django_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.bridge_database_url = database_url()
bridge.recorder.install(app)


@app.task(name="django_site.ping")
def ping() -> str:
    return "pong"
