"""Where the bridge's store is, read from the Django settings.

``CELERY_BRIDGE_DATABASE_URL`` (the name under which Celery's Django integration hands
``bridge_database_url`` to the app) names the store outright. Without it, the store is
the Django database named by ``BRIDGE_DJANGO_DATABASE`` (``default``), its URL made from
that database's settings: the admin reads the tables through Django, the Bridge changes
them through its own connection, and both must see the same database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

#: The drivers the bridge speaks to each of Django's database engines with.
SCHEMES = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.mysql": "mysql+pymysql",
    "django.db.backends.sqlite3": "sqlite",
}


def database_alias() -> str:
    """The Django database holding the bridge's tables."""
    alias = getattr(settings, "BRIDGE_DJANGO_DATABASE", "default")
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"BRIDGE_DJANGO_DATABASE: got {alias!r}, expected one of DATABASES:"
            f" {', '.join(sorted(settings.DATABASES))}"
        )
    return str(alias)


def database_url() -> str:
    """The URL of the bridge's store: ``CELERY_BRIDGE_DATABASE_URL``, or the one of the
    Django database :func:`database_alias` names."""
    given = getattr(settings, "CELERY_BRIDGE_DATABASE_URL", None)
    if given:
        return str(given)
    return url_of(settings.DATABASES[database_alias()])


def url_of(database: Mapping[str, Any]) -> str:
    """A SQLAlchemy URL for a Django database's settings."""
    engine = str(database.get("ENGINE", ""))
    scheme = SCHEMES.get(engine)
    if scheme is None:
        raise ImproperlyConfigured(
            f"DATABASES ENGINE: got {engine!r}, expected one of {', '.join(SCHEMES)}"
            " (or set CELERY_BRIDGE_DATABASE_URL)"
        )
    name = str(database.get("NAME") or "")
    if scheme == "sqlite":
        return f"sqlite:///{name}"
    user = quote(str(database.get("USER") or ""), safe="")
    password = quote(str(database.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(database.get("HOST") or "127.0.0.1")
    port = f":{database['PORT']}" if database.get("PORT") else ""
    return f"{scheme}://{credentials}{host}{port}/{quote(name, safe='')}"
