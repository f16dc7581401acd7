"""The HTTP side of management: the REST API, the metrics and the health checks that
``celery -A APP bridge serve`` serves (install the ``web`` extra).

:func:`create_app` builds the ASGI application for a Celery app.
"""

from __future__ import annotations

from bridge.manage.web.app import create_app

__all__ = ["create_app"]
