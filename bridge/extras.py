"""Which extra a URL needs, so that a missing library is refused in one line naming it.

A database or broker URL of a kind whose library is not installed would
otherwise fail deep inside SQLAlchemy or kombu with a bare
``ModuleNotFoundError`` (or, for kombu's Redis transport, one naming a
module the user never asked for). The bridge says instead which extra of
the package brings what is missing.
"""

from __future__ import annotations

from bridge.errors import BridgeError

#: The extra of ``celery-periodic-bridge`` that installs what a URL scheme needs.
EXTRA_OF_SCHEME = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "redis": "redis",
    "rediss": "redis",
    "sentinel": "redis",
}


#: The modules each extra installs that the bridge or kombu import at run time.
EXTRA_MODULES = {
    "postgres": ("psycopg",),
    "mysql": ("pymysql",),
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


class NeedsExtra(BridgeError):
    """A feature whose libraries come with an extra that is not installed."""

    def __init__(self, feature: str, extra: str, problem: ImportError) -> None:
        self.extra = extra
        detail = str(problem).splitlines()[0] if str(problem) else problem.name
        super().__init__(
            f"{feature} needs the {extra} extra ({detail}): "
            f"pip install 'celery-periodic-bridge[{extra}]'"
        )


def scheme_of(url: str) -> str:
    """The part of a URL before ``://`` and any ``+driver``: ``postgresql``, ``redis``, ..."""
    return url.split("://", 1)[0].split("+", 1)[0].lower()
