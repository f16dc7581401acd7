"""Prometheus metrics of the schedules, read from the database at each scrape.

Modelled on kube-state-metrics' CronJob series, which operators already
alert on: per schedule (label ``schedule``) its definition as an info
series, its next and last fire times, last success and failure, whether it
is enabled, paused, broken or running, its runs by final status, skipped,
missed and expired occurrences, and its consecutive failures. The
per-schedule series cover the first ``bridge_metrics_max_schedules``
schedules by name, so that a million schedules do not make a million
series; the totals (``bridge_schedules``, ``bridge_runs_total``, ...) always
cover all of them, and ``bridge_metrics_schedules_shown`` says how many
got series of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from bridge.clock import utcnow
from bridge.manage.api import ENDED_COLUMNS, Bridge, RunsSeen
from bridge.manage.web.reading import SharedReading
from bridge.rules.decisions import FINISHED_NOTES
from bridge.rules.health import HELD_BY_WORKER
from bridge.rules.kinds import NON_FINAL_STATUSES


def exposition_for(bridge: Bridge, queues: SharedReading[list[str]]) -> SharedReading[bytes]:
    """The text a scrape answers, as a :class:`SharedReading`: scrapes that come together
    (several Prometheus servers) share one reading of the database and one rendering of
    its samples, instead of each scanning the table and rendering thousands of samples."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScheduleCollector(bridge, queues))
    return SharedReading(lambda: generate_latest(registry))


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


class ScheduleCollector(Collector):
    """Reads the overview and turns it into metric families."""

    def __init__(self, bridge: Bridge, queues: SharedReading[list[str]]) -> None:
        self.bridge = bridge
        #: The queues the schedules send to, read at most once a minute.
        self.queues = queues

    def collect(self) -> Iterator[Any]:
        return self._read()

    def _read(self) -> Iterator[Any]:
        now = utcnow()
        seen = self.bridge.overview(now)
        status = self.bridge.status(now)
        yield from self._per_schedule(seen.schedules, seen.seen)
        yield self._health(seen.schedules, seen.seen, now)
        incidents = GaugeMetricFamily(
            "bridge_incidents_open", "Open incidents, by kind.", labels=["kind"]
        )
        for kind, count in sorted(seen.incidents.items()):
            incidents.add_metric([kind], count)
        yield incidents
        states = GaugeMetricFamily("bridge_schedules", "Schedules by state.", labels=["state"])
        for state in ("enabled", "paused", "finished", "broken"):
            states.add_metric([state], seen.counts[state])
        states.add_metric(["late"], seen.late)
        yield states
        shown = GaugeMetricFamily(
            "bridge_metrics_schedules_shown",
            "Schedules with series of their own (at most bridge_metrics_max_schedules).",
            value=len(seen.schedules),
        )
        yield shown
        runs = CounterMetricFamily(
            "bridge_runs", "Runs of every schedule ended, by final status.", labels=["status"]
        )
        for final, column in ENDED_COLUMNS.items():
            runs.add_metric([final.value], seen.totals[column])
        yield runs
        for name, column, text in (
            ("bridge_skipped", "skipped_count", "Occurrences skipped by overlap, all schedules."),
            ("bridge_missed", "missed_count", "Occurrences missed outside catch-up windows."),
            ("bridge_excluded", "excluded_count", "Occurrences on the schedules' calendars."),
            ("bridge_expired", "expired_count", "Runs whose message expired unstarted."),
        ):
            yield CounterMetricFamily(name, text, value=seen.totals[column])
        open_runs = GaugeMetricFamily(
            "bridge_open_runs", "Runs not yet final, by status.", labels=["status"]
        )
        for open_status, count in sorted(seen.open_totals.items()):
            open_runs.add_metric([open_status], count)
        yield open_runs
        yield GaugeMetricFamily(
            "bridge_up", "1 when a beat instance ticked within the lease.", value=status.alive
        )
        beats = GaugeMetricFamily(
            "bridge_beat_heartbeat_age_seconds",
            "Seconds since each beat instance's last tick.",
            labels=["instance"],
        )
        for instance in status.instances:
            beats.add_metric([instance.id], status.age(instance.last_tick))
        yield beats
        workers = GaugeMetricFamily(
            "bridge_worker_heartbeat_age_seconds",
            "Seconds since each worker's last heartbeat.",
            labels=["worker"],
        )
        for worker in status.workers:
            workers.add_metric([worker.name], status.age(worker.last_seen))
        yield workers
        yield GaugeMetricFamily(
            "bridge_due_unclaimed",
            "Enabled schedules due that no beat instance holds.",
            value=status.due_unclaimed,
        )
        yield GaugeMetricFamily(
            "bridge_worst_lateness_seconds",
            "How long the most overdue enabled schedule has been due (0: none is).",
            value=status.worst_lateness or 0.0,
        )
        queues = GaugeMetricFamily(
            "bridge_queue_messages",
            "Messages waiting in each queue the schedules send to (none while the broker"
            " does not answer).",
            labels=["queue"],
        )
        for queue, waiting in self.bridge.queue_lengths(self.queues.get()).items():
            if waiting is not None:
                queues.add_metric([queue], waiting)
        yield queues

    def _health(
        self, schedules: list[dict[str, Any]], runs: RunsSeen, now: datetime
    ) -> GaugeMetricFamily:
        """Each schedule's health, as ``ls`` and the API judge it: 1 on its state."""
        family = GaugeMetricFamily(
            "bridge_schedule_health",
            "1 on a schedule's health: ok, running, late, overrun, failing, broken, paused, "
            "finished, new.",
            labels=["schedule", "state"],
        )
        for row in schedules:
            family.add_metric(
                [row["name"], self.bridge.health_of(row, runs, now).health.value], 1.0
            )
        return family

    def _per_schedule(self, schedules: list[dict[str, Any]], seen: RunsSeen) -> Iterator[Any]:
        label = ["schedule"]
        info = InfoMetricFamily("bridge_schedule", "A schedule's definition.", labels=label)
        times = {
            column: GaugeMetricFamily(
                f"bridge_schedule_{name}_timestamp_seconds", text, labels=label
            )
            for column, name, text in (
                ("nextrun", "next_run", "When the schedule is next due (UNIX time)."),
                ("last_run_at", "last_run", "When a run of the schedule was last sent."),
                ("last_success_at", "last_success", "When a run last ended SUCCESS."),
                ("last_failure_at", "last_failure", "When a run last ended FAILURE or LOST."),
            )
        }
        flags = {
            name: GaugeMetricFamily(f"bridge_schedule_{name}", text, labels=label)
            for name, text in (
                ("enabled", "1 when the schedule fires."),
                ("paused", "1 when someone paused the schedule (not broken, not finished)."),
                ("finished", "1 when beat disabled the schedule with nothing left to fire."),
                ("broken", "1 when the breaker disabled the schedule."),
                ("running", "Runs of the schedule a worker has received or started."),
                ("open_runs", "Runs of the schedule not yet final."),
                ("consecutive_failures", "Failed occurrences in a row (the breaker's count)."),
            )
        }
        runs = CounterMetricFamily(
            "bridge_schedule_runs", "Runs ended, by final status.", labels=[*label, "status"]
        )
        counts = {
            column: CounterMetricFamily(f"bridge_schedule_{name}", text, labels=label)
            for column, name, text in (
                ("skipped_count", "skipped", "Occurrences skipped by the overlap policy."),
                ("missed_count", "missed", "Occurrences missed outside the catch-up window."),
                ("excluded_count", "excluded", "Occurrences on its calendars, not sent."),
                ("expired_count", "expired", "Runs whose message expired before they started."),
                ("runtime_total", "runtime_seconds", "Seconds the ended runs ran in all."),
            )
        }
        for row in schedules:
            name = [row["name"]]
            info.add_metric(
                name,
                {key: str(row[key]) for key in ("task", "timer", "timezone", "overlap", "catchup")},
            )
            for column, family in times.items():
                moment = _seconds(row[column])
                if moment is not None:
                    family.add_metric(name, moment)
            opened = [
                run for run in seen.runs.get(row["id"], []) if run.status in NON_FINAL_STATUSES
            ]
            finished = not row["enabled"] and not row["broken"] and row["note"] in FINISHED_NOTES
            paused = not row["enabled"] and not row["broken"] and not finished
            for key, value in (
                ("enabled", row["enabled"]),
                ("paused", paused),
                ("finished", finished),
                ("broken", row["broken"]),
                ("running", sum(run.status in HELD_BY_WORKER for run in opened)),
                ("open_runs", len(opened)),
                ("consecutive_failures", row["failure_streak"]),
            ):
                flags[key].add_metric(name, float(value))
            for final, column in ENDED_COLUMNS.items():
                runs.add_metric([*name, final.value], row[column])
            for column, counter in counts.items():
                counter.add_metric(name, row[column])
        yield info
        yield from times.values()
        yield from flags.values()
        yield runs
        yield from counts.values()
