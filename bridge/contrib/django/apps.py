"""The Django app of the bridge."""

from __future__ import annotations

from django.apps import AppConfig


class BridgeConfig(AppConfig):
    name = "bridge.contrib.django"
    #: The label the admin's URLs and permissions carry: ``/admin/bridge/schedule/``.
    label = "bridge"
    verbose_name = "Periodic schedules"
    default_auto_field = "django.db.models.AutoField"
