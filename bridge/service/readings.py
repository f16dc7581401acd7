"""Schedules read for operators, each with its health judged from its runs.

A schedule's health (late, overrunning, failing, ...) is not a column: it is
judged at a moment from the schedule's open runs and latest start, read in
the same call as the rows (:mod:`bridge.rules.health`), its own limits
falling back on the app's. Every view of a schedule the management side
returns is built here, so that a page, a single schedule and the metrics
judge it alike.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.rules import paging
from bridge.rules.canvas import stored_canvas
from bridge.rules.definition import check_label
from bridge.rules.health import State, health_of, waiting_since, watched
from bridge.rules.values import column_of, flag, lookup_text, whole_number
from bridge.service.views import Page, Schedule
from bridge.storage.database import Database
from bridge.storage.health import HealthStore
from bridge.storage.runs import RunsSeen
from bridge.storage.schedules import SORTS, ScheduleFilter, ScheduleStore


class Readings:
    """Schedules read and judged, against one database, with the app's default limits."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self.settings = settings
        self.store = ScheduleStore(database)
        self.health_store = HealthStore(database)

    def get(self, name: str) -> Schedule:
        """The schedule called ``name``, with its health."""
        return self.judged([self.store.get(lookup_text("name", name))])[0]

    def named(self, names: Collection[str]) -> list[Schedule]:
        """The schedules called ``names`` that exist, by name, each with its health judged."""
        if not names:
            return []
        return self.judged(self.store.named(names))

    def every(self) -> list[Schedule]:
        """Every schedule, by name, with its health."""
        return self.judged(self.store.all())

    def queues(self, configured: Collection[str]) -> list[str]:
        """The queues the schedules send to: ``configured`` (the app's) and those the
        schedules' options and canvases name, by name. A read of every schedule whose
        options mention a queue: callers that ask often keep the answer a while."""
        in_canvases: set[str] = set()
        for text in self.store.canvases_naming_a_queue():
            try:
                in_canvases |= stored_canvas(text).queues
            except ValidationError:
                continue  # written by hand: the schedule's page says what is wrong with it
        return sorted(set(configured) | self.store.queues_named() | in_canvases)

    def judged(self, rows: Sequence[Any], now: datetime | None = None) -> list[Schedule]:
        """Views of ``rows`` (table rows), each with its health judged from its open runs at
        ``now``."""
        now = now or utcnow()
        seen = self.health_store.runs_seen([row.id for row in rows], now, waiting_since)
        return self._views(rows, seen, now)

    def _views(self, rows: Sequence[Any], seen: RunsSeen, now: datetime) -> list[Schedule]:
        """Views of ``rows`` (table rows or mappings of their columns), each with its health
        judged from ``seen`` at ``now``."""
        return [Schedule.of(row, self.health_of(row, seen, now)) for row in rows]

    def health_of(self, row: Any, seen: RunsSeen, now: datetime) -> State:
        """The health of the schedule ``row`` (columns or a mapping) from ``seen``, its own
        limits falling back on the app's."""
        row_id = column_of(row, "id")
        subject = watched(
            row,
            seen.runs.get(row_id, ()),
            self.settings.default_grace,
            self.settings.default_max_runtime,
            seen.last_started.get(row_id),
        )
        return health_of(subject, now)

    def page(
        self,
        *,
        prefix: str | None,
        task: str | None,
        enabled: bool | None,
        paused: bool | None,
        broken: bool | None,
        failing: bool | None,
        label: str | None,
        late: bool | None,
        finished: bool | None,
        sort: str,
        cursor: str | None,
        limit: int,
        now: datetime | None,
    ) -> Page[Schedule]:
        """One page of schedules, filtered, by name or by next run, and the next page's
        cursor; every value checked before the one read (see
        :meth:`bridge.manage.api.Bridge.schedules`)."""
        if sort not in SORTS:
            raise ValidationError("sort", sort, " or ".join(SORTS))
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        now = now or utcnow()
        kinds: tuple[type, ...] = (datetime, int) if sort == "next" else (str,)
        after = None if cursor is None else paging.decode(cursor, kinds)
        flags = (
            ("enabled", enabled),
            ("paused", paused),
            ("finished", finished),
            ("broken", broken),
            ("failing", failing),
        )
        for field, value in flags:
            if value is not None:
                flag(field, value)
        where = ScheduleFilter(
            prefix=None if prefix is None else lookup_text("prefix", prefix),
            task=None if task is None else lookup_text("task", task),
            enabled=enabled,
            paused=paused,
            finished=finished,
            broken=broken,
            failing=failing,
            label=None if label is None else check_label(label),
            late_at=now if late else None,
            default_grace=self.settings.default_grace,
        )
        if late is False:
            raise ValidationError("late", late, "true, or left out")
        found = self.store.page(where, sort, after, limit + 1, now, waiting_since)
        items = self._views(found.rows[:limit], found.seen, now)
        key: Callable[[Any], tuple[Any, ...]] = (
            (lambda row: (row["nextrun"], row["id"]))
            if sort == "next"
            else (lambda row: (row["name"],))
        )
        return Page(items, paging.following(found.rows, limit, key))
