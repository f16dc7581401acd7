"""Which extra a URL needs, so that a missing library is refused in one line naming it.

A database or broker URL of a kind whose library is not installed would
otherwise fail deep inside SQLAlchemy or kombu with a bare
``ModuleNotFoundError`` (or, for kombu's Redis transport, one naming a
module the user never asked for). The bridge says instead which extra of
the package brings what is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import BridgeError

#: The extra of ``celery-periodic-bridge`` that installs what a URL scheme needs.
EXTRA_OF_SCHEME = {
    "postgresql": "postgres",
    "redis": "redis",
    "rediss": "redis",
    "sentinel": "redis",
}


#: The modules each extra installs that the bridge or kombu import at run time.
EXTRA_MODULES = {
    "postgres": ("psycopg",),
    "redis": ("redis", "packaging"),
}


class MissingExtra(BridgeError):
    """The URL a setting names needs a library that is not installed."""

    def __init__(self, setting: str, scheme: str, problem: ImportError) -> None:
        self.setting = setting
        self.scheme = scheme
        extra = EXTRA_OF_SCHEME.get(scheme)
        remedy = (
            f"pip install 'celery-periodic-bridge[{extra}]'"
            if extra is not None
            else "install the library its kombu transport names"
        )
        detail = str(problem).splitlines()[0] if str(problem) else problem.name
        super().__init__(
            f"{setting}: a {scheme} URL needs a library that is not installed ({detail}): {remedy}"
        )


def scheme_of(url: str) -> str:
    """The part of a URL before ``://`` and any ``+driver``: ``postgresql``, ``redis``, ..."""
    return url.split("://", 1)[0].split("+", 1)[0].lower()


def check_broker(app: Any) -> None:
    """Import what the app's broker transport needs now, so a missing library is one
    line naming its extra rather than an error from deep inside kombu.

    For a scheme an extra covers, its modules are imported first: kombu's
    own failure when one is missing can be an unrelated ``AttributeError``
    raised while its transport module loads. Then the transport is built,
    which imports anything else it needs but opens no connection.
    """
    scheme = scheme_of(str(app.conf.broker_url or "amqp://"))
    try:
        for module in EXTRA_MODULES.get(EXTRA_OF_SCHEME.get(scheme, ""), ()):
            importlib.import_module(module)
        connection = app.connection_for_write()
        try:
            connection.transport  # noqa: B018 - imports and builds the transport
        finally:
            connection.release()
    except ImportError as exc:
        raise MissingExtra("broker_url", scheme, exc) from None
