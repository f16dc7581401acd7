"""Django settings of the django-celery-beat source the import tests read.

``SOURCE_DATABASE_URL`` is a SQLite file (``sqlite:////path``), a
PostgreSQL database (``postgresql://user@host:port/name``) or a MySQL or
MariaDB one (``mysql://user@host:port/name``, through PyMySQL).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["SOURCE_DATABASE_URL"])

if _url.scheme.startswith("sqlite"):
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _url.path[1:]}}
else:
    mysql = _url.scheme.startswith("mysql")
    if mysql:
        import pymysql

        pymysql.install_as_MySQLdb()
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends." + ("mysql" if mysql else "postgresql"),
            "NAME": _url.path.lstrip("/"),
            "USER": _url.username or "",
            "PASSWORD": _url.password or "",
            "HOST": _url.hostname or "",
            "PORT": str(_url.port or (3306 if mysql else 5432)),
        }
    }
INSTALLED_APPS = ["django_celery_beat"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
SECRET_KEY = "bridge-import-tests"
