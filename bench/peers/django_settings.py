"""Django settings of the django-celery-beat peer: its tables in the run's own database.

``PEERS_DJANGO_DATABASE_URL`` is the PostgreSQL database ``bench/peers.py``
created for the run, as a URL (``postgresql+psycopg://user@host:port/name``).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["PEERS_DJANGO_DATABASE_URL"])

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or 5432),
    }
}
INSTALLED_APPS = ["django_celery_beat"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# Required by Django; nothing here signs anything.
SECRET_KEY = "peers-benchmark"
