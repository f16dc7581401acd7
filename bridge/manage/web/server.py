"""Running the application: ``celery -A APP bridge serve`` on uvicorn.

One process serves the application built for the command's Celery app.
With several (``--workers``), uvicorn starts fresh processes that import
the application by name, so each builds it anew for the app named by
``-A``, passed to them in :data:`APP_VARIABLE`.
"""

from __future__ import annotations

import os

from bridge.manage.api import Bridge, default_actor
from bridge.manage.web.security import check_bind

#: The environment variable that tells a server process which Celery app to load.
APP_VARIABLE = "BRIDGE_SERVE_APP"


def serve(bridge: Bridge, host: str, port: int, workers: int, app_path: str | None) -> None:
    """Serve until interrupted; refuses a non-loopback ``host`` when no token is set."""
    import uvicorn

    check_bind(host, bridge.settings)
    bridge.check_schema()
    # uvicorn would believe X-Forwarded-For from 127.0.0.1 by default: any local process
    # could then name the address the audit log records. The application reads those
    # headers itself, from the proxies bridge_trusted_proxies names only.
    options = {
        "host": host,
        "port": port,
        "log_level": "info",
        "server_header": False,
        "proxy_headers": False,
    }
    if workers == 1:
        from bridge.manage.web.app import create_app

        uvicorn.run(create_app(bridge=bridge), **options)  # type: ignore[arg-type]
        return
    if app_path:
        os.environ[APP_VARIABLE] = app_path
    target = f"{__name__}:application"
    uvicorn.run(target, factory=True, workers=workers, **options)  # type: ignore[arg-type]


def application() -> object:
    """The application of one of several server processes, for the app in :data:`APP_VARIABLE`."""
    from celery.app.utils import find_app

    from bridge.manage.web.app import create_app

    path = os.environ.get(APP_VARIABLE)
    celery_app = find_app(path) if path else None
    return create_app(bridge=Bridge(celery_app, actor=default_actor("http")))
