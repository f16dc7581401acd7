"""The scheduler as operators watch it: its instances and workers, its health, its totals.

``bridge status``, ``bridge health``, the dashboard's summary and a scrape of
``/metrics`` read here. Each is judged at one moment from what the store
holds, against the app's lease and grace: a beat that has not ticked within
the lease is as good as gone (its rows are taken over), a schedule due for
longer than the grace is late. The health asks for the schema first, since
a store behind or ahead of this release may have no tables to read the
rest from.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.rules.health import states_counted, waiting_since
from bridge.rules.values import seconds
from bridge.service.views import Instance, SchedulerHealth, Status, Worker
from bridge.storage.database import Database, shown_url
from bridge.storage.health import HealthStore
from bridge.storage.overview import Overview, OverviewStore
from bridge.storage.schedules import ScheduleStore
from bridge.version import __version__


class Watch:
    """The beat instances, workers and totals of one database, judged with the app's
    settings."""

    def __init__(
        self,
        database: Database,
        settings: Settings,
        store: ScheduleStore,
        health_store: HealthStore,
    ) -> None:
        self.database = database
        self.settings = settings
        self.store = store
        self.health_store = health_store
        self.overview_store = OverviewStore(database)

    @property
    def grace(self) -> timedelta:
        """How long a schedule may be due before it counts as late."""
        return timedelta(seconds=self.settings.default_grace)

    def status(self, now: datetime | None) -> Status:
        """The beat instances and workers, the due rows nobody holds and the worst lateness."""
        now = now or utcnow()
        lease_start = now - timedelta(seconds=self.settings.lease_seconds)
        late = self.store.lateness(now, lease_start)
        return Status(
            instances=[Instance.of(row) for row in late.instances],
            workers=[Worker.of(row) for row in late.workers],
            due_unclaimed=late.due_unclaimed,
            worst_lateness=(
                None if late.oldest_due is None else (now - late.oldest_due).total_seconds()
            ),
            now=now,
            beat_timeout=self.settings.lease_seconds,
        )

    def health(self, beat_timeout: float | None, now: datetime | None) -> SchedulerHealth:
        """Whether a beat ticked within ``beat_timeout`` seconds (the lease when None) and the
        schema is one this release runs against."""
        schema = self.database.schema()
        problem = schema.refusal(__version__, shown_url(self.database.url))
        if problem is not None:
            # The tables may not be there to read the instances from.
            empty = Status([], [], 0, None, now or utcnow(), self.settings.lease_seconds)
            return SchedulerHealth(schema.revision, schema.head, empty, problem)
        status = self.status(now)
        if beat_timeout is not None:
            status = replace(status, beat_timeout=seconds("beat_timeout", beat_timeout))
        return SchedulerHealth(schema.revision, schema.head, status)

    def health_counts(self, now: datetime | None) -> dict[str, int]:
        """How many schedules are in each health state."""
        found = self.health_store.counts(now or utcnow(), self.settings.default_grace)
        return states_counted(found)

    def overview(self, now: datetime | None) -> Overview:
        """The first ``bridge_metrics_max_schedules`` schedules by name with their counters,
        and the totals of every schedule."""
        now = now or utcnow()
        return self.overview_store.read(
            self.settings.metrics_max_schedules, now - self.grace, now, waiting_since
        )
