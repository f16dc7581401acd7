"""Sends the bridge's models to the database that holds its tables, and keeps Django's
``migrate`` away from them (``celery -A PROJ bridge migrate`` owns that schema)."""

from __future__ import annotations

from typing import Any

from bridge.contrib.django.conf import database_alias

LABEL = "bridge"


class BridgeRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return database_alias() if model._meta.app_label == LABEL else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return database_alias() if model._meta.app_label == LABEL else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if app_label == LABEL else None
