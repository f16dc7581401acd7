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

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.utils import floatToGoString

from bridge.clock import utcnow
from bridge.manage.api import ENDED_COLUMNS, Bridge, Overview, RunsSeen, Status
from bridge.manage.web.marks import shown
from bridge.manage.web.reading import SharedReading
from bridge.rules.decisions import FINISHED_NOTES
from bridge.rules.health import HELD_BY_WORKER


def exposition_for(bridge: Bridge, queues: SharedReading[list[str]]) -> SharedReading[bytes]:
    """The text a scrape answers, as a :class:`SharedReading`: scrapes that come together
    (several Prometheus servers) share one reading of the database and one rendering of
    its samples, instead of each scanning the table and rendering thousands of samples."""
    return SharedReading(ScheduleCollector(bridge, queues).exposition)


class ScheduleCollector:
    """Reads the overview and writes it in Prometheus's text format."""

    def __init__(self, bridge: Bridge, queues: SharedReading[list[str]]) -> None:
        self.bridge = bridge
        #: The queues the schedules send to, read at most once a minute.
        self.queues = queues

    def exposition(self) -> bytes:
        """The answer to a scrape: each schedule's series (:func:`schedule_series`), then
        the totals, the instances and the queues (rendered by prometheus_client)."""
        now = utcnow()
        seen = self.bridge.overview(now)
        status = self.bridge.status(now)
        states = [self.bridge.health_of(row, seen.seen, now).health.value for row in seen.schedules]
        series = schedule_series(seen.schedules, seen.seen, states)
        return series.encode() + generate_latest(_Families(self._totals(seen, status)))

    def _totals(self, seen: Overview, status: Status) -> Iterator[Any]:
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
        with_series = GaugeMetricFamily(
            "bridge_metrics_schedules_shown",
            "Schedules with series of their own (at most bridge_metrics_max_schedules).",
            value=len(seen.schedules),
        )
        yield with_series
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


class _Families:
    """Metric families already made, in the shape ``generate_latest`` reads."""

    def __init__(self, families: Iterator[Any]) -> None:
        self.families = list(families)

    def collect(self) -> list[Any]:
        return self.families


#: Each schedule's series: name, type, what it says. Written here rather than through
#: prometheus_client's families: 1,000 schedules make 21,000 samples, which it built and
#: rendered in a tenth of a second of the interpreter every 2 s, while the requests of
#: every other client waited for it.
_INFO = ("bridge_schedule_info", "gauge", "A schedule's definition.")
_TIMES = (
    (
        "nextrun",
        "bridge_schedule_next_run_timestamp_seconds",
        "When the schedule is next due (UNIX time).",
    ),
    (
        "last_run_at",
        "bridge_schedule_last_run_timestamp_seconds",
        "When a run of the schedule was last sent.",
    ),
    (
        "last_success_at",
        "bridge_schedule_last_success_timestamp_seconds",
        "When a run last ended SUCCESS.",
    ),
    (
        "last_failure_at",
        "bridge_schedule_last_failure_timestamp_seconds",
        "When a run last ended FAILURE or LOST.",
    ),
)
_FLAGS = (
    ("enabled", "1 when the schedule fires."),
    ("paused", "1 when someone paused the schedule (not broken, not finished)."),
    ("finished", "1 when beat disabled the schedule with nothing left to fire."),
    ("broken", "1 when the breaker disabled the schedule."),
    ("running", "Runs of the schedule a worker has received or started."),
    ("open_runs", "Runs of the schedule not yet final."),
    ("consecutive_failures", "Failed occurrences in a row (the breaker's count)."),
)
_RUNS = ("bridge_schedule_runs_total", "counter", "Runs ended, by final status.")
_COUNTS = (
    (
        "skipped_count",
        "bridge_schedule_skipped_total",
        "Occurrences skipped by the overlap policy.",
    ),
    (
        "missed_count",
        "bridge_schedule_missed_total",
        "Occurrences missed outside the catch-up window.",
    ),
    ("excluded_count", "bridge_schedule_excluded_total", "Occurrences on its calendars, not sent."),
    (
        "expired_count",
        "bridge_schedule_expired_total",
        "Runs whose message expired before they started.",
    ),
    (
        "runtime_total",
        "bridge_schedule_runtime_seconds_total",
        "Seconds the ended runs ran in all.",
    ),
)
_HEALTH = (
    "bridge_schedule_health",
    "gauge",
    "1 on a schedule's health: ok, running, late, overrun, failing, broken, paused, finished, new.",
)
#: What the info series says of a schedule besides its name.
_DEFINITION = ("task", "timer", "timezone", "overlap", "catchup")


def schedule_series(
    schedules: Sequence[dict[str, Any]], seen: RunsSeen, states: Sequence[str]
) -> str:
    """The series of each of ``schedules`` (rows of ``periodic_task``) in Prometheus's text
    format, as prometheus_client writes it (labels in order, numbers as Go writes them):
    its definition, its times, its flags, its runs and occurrences counted, and its health,
    ``states`` (one for each schedule)."""
    info: list[str] = []
    times: dict[str, list[str]] = {column: [] for column, _, _ in _TIMES}
    flags: dict[str, list[str]] = {name: [] for name, _ in _FLAGS}
    runs: list[str] = []
    counts: dict[str, list[str]] = {column: [] for column, _, _ in _COUNTS}
    health: list[str] = []
    for row, state in zip(schedules, states, strict=True):
        name = _label(row["name"])
        labels = {key: _label(str(row[key])) for key in _DEFINITION}
        defined = ",".join(
            f'{key}="{value}"' for key, value in sorted({**labels, "schedule": name}.items())
        )
        info.append(f"{_INFO[0]}{{{defined}}} 1.0\n")
        one = f'{{schedule="{name}"}} '
        for column, lines in times.items():
            moment = row[column]
            if moment is not None:
                lines.append(f"{one}{_number(moment.timestamp())}\n")
        held = sum(run.status in HELD_BY_WORKER for run in seen.runs.get(row["id"], ()))
        finished = not row["enabled"] and not row["broken"] and row["note"] in FINISHED_NOTES
        for key, value in (
            ("enabled", row["enabled"]),
            ("paused", not row["enabled"] and not row["broken"] and not finished),
            ("finished", finished),
            ("broken", row["broken"]),
            ("running", held),
            ("open_runs", seen.open_counts.get(row["id"], 0)),
            ("consecutive_failures", row["failure_streak"]),
        ):
            flags[key].append(f"{one}{_number(value)}\n")
        for final, column in ENDED_COLUMNS.items():
            status = f'{{schedule="{name}",status="{final.value}"}} '
            runs.append(f"{status}{_number(row[column])}\n")
        for column, lines in counts.items():
            lines.append(f"{one}{_number(row[column])}\n")
        health.append(f'{{schedule="{name}",state="{_label(state)}"}} 1.0\n')
    parts = [_family(*_INFO, info, prefixed=True)]
    parts += [_family(metric, "gauge", text, times[column]) for column, metric, text in _TIMES]
    parts += [
        _family(f"bridge_schedule_{name}", "gauge", text, flags[name]) for name, text in _FLAGS
    ]
    parts.append(_family(*_RUNS, runs))
    parts += [_family(metric, "counter", text, counts[column]) for column, metric, text in _COUNTS]
    parts.append(_family(*_HEALTH, health))
    return "".join(parts)


def _family(name: str, kind: str, text: str, lines: list[str], prefixed: bool = False) -> str:
    """A family: its help and type, then its samples (``lines`` hold the name when
    ``prefixed``, else begin at their labels)."""
    head = f"# HELP {name} {text}\n# TYPE {name} {kind}\n"
    return head + "".join(lines if prefixed else [name + line for line in lines])


def _number(value: float) -> str:
    """A sample's value as prometheus_client writes it (Go's way: ``1.0``, ``1.7e+09``)."""
    return floatToGoString(value)  # type: ignore[no-untyped-call,no-any-return]


def _label(value: str) -> str:
    """A label's value as the text format writes it; a lone surrogate (only an older
    release may have stored one) as its escape, which UTF-8 can carry."""
    if not value.isascii():
        value = shown(value)
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
