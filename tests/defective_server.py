"""The reference Celery app with one defect in what the server reads (tests only).

``celery -A tests.defective_server bridge serve`` is the real server process of
the CLI, whose ``Bridge.incidents`` raises: it stands for the defect nobody
has found yet, reached through a real route of the API and of the dashboard.
"""

from __future__ import annotations

from typing import Any

from bridge.manage.api import Bridge
from workers.app import app


def _incidents(_bridge: Bridge, *_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("a defect in reading the incidents")


Bridge.incidents = _incidents  # type: ignore[method-assign]

__all__ = ["app"]
