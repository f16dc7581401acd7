"""The server's application with one defect added: ``GET /defect`` raises.

Served by uvicorn in a subprocess (``uvicorn --factory tests.defective_app:build``)
so that a test can see what a client sees of a 500 on a real connection. No
route of the real application raises; this one stands for the defect that
nobody has found yet.
"""

from __future__ import annotations

from fastapi import FastAPI

from bridge.manage.api import Bridge
from bridge.manage.web import create_app


def build() -> FastAPI:
    app = create_app(bridge=Bridge(actor="http"))

    @app.get("/defect")
    def defect() -> None:
        raise RuntimeError("a defect")

    return app
