"""What happened: the runs recorded, their statistics and gaps, the audit log, and pruning.

The recorded runs answer for recent work; the hourly tallies, which pruning
does not touch, for counts over a window; the audit log for who changed
what. Pages are read one past their size to know whether another follows
(:mod:`bridge.rules.paging`), filters checked before the one read. Pruning
removes the oldest final runs as beat's watchdog does over time, a slice of
schedules at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.rules import paging
from bridge.rules.kinds import RunStatus, Trigger
from bridge.rules.policy import duration
from bridge.rules.retention import Limits, to_look_at
from bridge.rules.stats import spread, success_rate
from bridge.rules.values import instant, lookup_text, whole_number
from bridge.service.readings import Readings
from bridge.service.views import AuditRecord, Gap, LabelRate, Page, Run, Stats
from bridge.storage.audit import AuditStore
from bridge.storage.database import Database
from bridge.storage.history import PAGE_KEY, HistoryStore, RunFilter
from bridge.storage.retention import Pruned, Retention

#: The statuses of a run that ``retry`` sends again.
RETRIABLE = (RunStatus.FAILURE, RunStatus.LOST, RunStatus.REVOKED)
#: The latest runs of a window whose durations and start delays :meth:`History.stats` reads.
STATS_SAMPLE = 10_000
#: The labels :meth:`History.label_rates` gives at most, by name.
LABELS_RATED = 200
#: Schedules :meth:`History.prune` reads at a time.
PRUNE_SLICE = 500


class History:
    """The runs, tallies and audit log of one database, with the app's retention limits."""

    def __init__(self, database: Database, settings: Settings, readings: Readings) -> None:
        self.settings = settings
        self.readings = readings
        self.history_store = HistoryStore(database)
        self.audit_store = AuditStore(database)
        self.retention = Retention(database)

    def runs(
        self,
        name: str | None,
        *,
        status: str | Sequence[str] | None,
        trigger: str | Sequence[str] | None,
        since: datetime | str | None,
        until: datetime | str | None,
        cursor: str | None,
        limit: int,
    ) -> Page[Run]:
        """One page of runs, filtered (see :meth:`bridge.manage.api.Bridge.runs`)."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        after = None if cursor is None else paging.decode(cursor, PAGE_KEY)
        store = self.readings.store
        where = RunFilter(
            schedule_id=None if name is None else store.id_of(lookup_text("name", name)),
            statuses=_choices("status", status, [s.value for s in RunStatus]),
            triggers=_choices("trigger", trigger, [t.value for t in Trigger]),
            since=None if since is None else instant("since", since, optional=True),
            until=None if until is None else instant("until", until, optional=True),
        )
        found = [
            Run.of(run, name) for run, name in self.history_store.page(where, after, limit + 1)
        ]
        return Page(
            found[:limit],
            paging.following(found, limit, lambda r: (r.plan_time, r.attempt, r.id)),
        )

    def run(self, run_id: str) -> Run:
        """One run, with its error and traceback; :class:`~bridge.errors.RunNotFound` if none."""
        if not isinstance(run_id, str):
            raise ValidationError("run", run_id, "a run id")
        run, schedule = self.history_store.get(lookup_text("run", run_id))
        return Run.of(run, schedule)

    def retriable(self, runs: Sequence[Run]) -> set[str]:
        """The ids of those of ``runs`` that ended one of :data:`RETRIABLE` and are still the
        latest attempt of their occurrence."""
        ended: dict[int, list[tuple[datetime, Run]]] = {}
        for run in runs:
            if RunStatus(run.status) not in RETRIABLE:
                continue
            if run.schedule_id is not None and run.plan_time is not None:
                ended.setdefault(run.schedule_id, []).append((run.plan_time, run))
        found: set[str] = set()
        for schedule_id, plans in ended.items():
            latest = self.history_store.latest_attempts(schedule_id, [plan for plan, _ in plans])
            found.update(run.id for plan, run in plans if latest.get(plan) == run.attempt)
        return found

    def stats(self, name: str, window: str | float | timedelta, now: datetime | None) -> Stats:
        """The schedule over the last ``window``: its tallies by status, and the durations
        and start delays of its latest :data:`STATS_SAMPLE` runs (see
        :meth:`bridge.manage.api.Bridge.stats`)."""
        span = duration("window", window)
        until = now or utcnow()
        schedule = self.readings.get(name)
        found = self.history_store.window(schedule.id, until - span, until, STATS_SAMPLE)
        ended = (RunStatus.SUCCESS, RunStatus.FAILURE, RunStatus.REVOKED, RunStatus.LOST)
        tallied = {status.value: int(found.tallied[status.value.lower()]) for status in ended}
        counts = {status: count for status, count in {**tallied, **found.open}.items() if count}
        return Stats(
            schedule=schedule.name,
            window=span.total_seconds(),
            since=until - span,
            until=until,
            counts=counts,
            success_rate=success_rate(counts),
            duration=spread(found.runtimes),
            start_delay=spread(found.start_delays),
            skipped=int(found.tallied["skipped"]),
            missed=int(found.tallied["missed"]),
            alerts=int(found.tallied["alerts"]),
            totals={
                RunStatus.SUCCESS.value: schedule.success_count,
                RunStatus.FAILURE.value: schedule.failure_count,
                RunStatus.REVOKED.value: schedule.revoked_count,
                RunStatus.LOST.value: schedule.lost_count,
                "skipped": schedule.skipped_count,
                "missed": schedule.missed_count,
                "excluded": schedule.excluded_count,
                "expired": schedule.expired_count,
                "alerts": schedule.alert_count,
            },
        )

    def recent_statuses(
        self, schedule_ids: Sequence[int], count: int
    ) -> dict[int, list[tuple[str, str]]]:
        """The plan times (ISO 8601 text in UTC) and statuses of each schedule's latest
        ``count`` runs, oldest first: the list's strips."""
        return self.history_store.recent_statuses(schedule_ids, count)

    def gaps(self, name: str, since: datetime, limit: int) -> list[Gap]:
        """The hours since ``since`` in which the schedule skipped or missed occurrences,
        newest first, from the hourly tallies."""
        schedule_id = self.readings.store.id_of(lookup_text("name", name))
        found = self.history_store.gaps(schedule_id, since, whole_number("limit", limit, low=1))
        return [Gap(hour, skipped, missed) for hour, skipped, missed in found]

    def label_rates(self, window: str | float | timedelta, now: datetime | None) -> list[LabelRate]:
        """Each label's runs that ended over the last ``window``, by status, with their success
        rate; the first :data:`LABELS_RATED` labels with any run."""
        span = duration("window", window)
        found = self.history_store.label_tallies((now or utcnow()) - span, LABELS_RATED)
        rates = []
        for label, tallied in found:
            counts = {status.upper(): count for status, count in tallied.items() if count}
            rates.append(LabelRate(label, counts, success_rate(counts)))
        return rates

    def audit(self, name: str | None, cursor: str | None, limit: int) -> Page[AuditRecord]:
        """The audit log, newest first: of the schedule ``name`` (deleted or not), or of
        every schedule."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        before = None if cursor is None else paging.decode(cursor, (int,))[0]
        if name is not None:
            lookup_text("name", name)
        found = [AuditRecord.of(entry) for entry in self.audit_store.trail(name, before, limit + 1)]
        return Page(found[:limit], paging.following(found, limit, lambda e: (e.id,)))

    def prune(self, dry_run: bool) -> Pruned:
        """Prune every schedule's old final runs to the app's limits, :data:`PRUNE_SLICE`
        schedules counted at a time; with ``dry_run``, count what would go only."""
        limits = Limits(self.settings.history_keep_runs, self.settings.history_keep_days)
        now = utcnow()
        schedules = runs = 0
        after = 0
        while True:
            counted = self.retention.count_slice(after, PRUNE_SLICE, limits, now)
            schedules += counted.schedules
            for flagged in to_look_at(counted.counted):
                runs += self.retention.prune_schedule(flagged, now, dry_run, thorough=True)
            if counted.last_id is None:
                return Pruned(schedules, runs)
            after = counted.last_id


def _choices(
    field: str, given: str | Sequence[str] | None, allowed: Sequence[str]
) -> tuple[str, ...]:
    """A filter's values (one, a list, or a comma-separated text), each one of ``allowed``."""
    if given is None:
        return ()
    values = given.split(",") if isinstance(given, str) else list(given)
    for value in values:
        if value not in allowed:
            raise ValidationError(field, value, f"one of {', '.join(allowed)}")
    return tuple(values)
