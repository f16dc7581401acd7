"""Beat's own metrics, served by each beat process on ``bridge_beat_metrics_port``.

What only the beat process knows: how long its ticks take, how late it
publishes each run after the row fell due, how many rows a tick claims, how
many marks it lost to another instance mid-fire, and its outages. The
metrics of the schedules themselves come from ``bridge serve``'s
``/metrics``, read from the database. With the port at 0 (the default) beat
keeps no metrics and imports nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.extras import NeedsExtra

#: Seconds from a row falling due to its run's publish.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Rows claimed by one tick.
BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)


class BeatMetrics:
    """Beat's counters; this base keeps none (the port is 0)."""

    def ticked(self, seconds: float, claimed: int) -> None:
        """A tick took ``seconds`` and claimed ``claimed`` rows."""

    def published(self, lateness: Iterable[float]) -> None:
        """Runs went out, each ``lateness`` seconds after its row fell due."""

    def lost_marks(self, count: int) -> None:
        """Another instance took over ``count`` rows this one was firing."""

    def outage(self, kind: str) -> None:
        """Trouble of ``kind`` (``database``, ``broker``, ``conflict``, ``defect``) began."""


class PrometheusBeatMetrics(BeatMetrics):
    """Beat's counters in a registry of their own, served over HTTP on ``port``."""

    def __init__(self, port: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self._tick = Histogram(
            "bridge_beat_tick_seconds", "How long one tick took.", registry=self.registry
        )
        self._batch = Histogram(
            "bridge_beat_claimed_rows",
            "Rows one tick claimed.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._lateness = Histogram(
            "bridge_beat_fire_lateness_seconds",
            "From a row falling due to its run's publish.",
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        )
        self._lost = Counter(
            "bridge_beat_lost_marks",
            "Rows another instance took over while this one fired them.",
            registry=self.registry,
        )
        self._outages: Any = Counter(
            "bridge_beat_outages",
            "Outages and defects beat rode out, by kind.",
            ["kind"],
            registry=self.registry,
        )
        start_http_server(port, registry=self.registry)

    def ticked(self, seconds: float, claimed: int) -> None:
        self._tick.observe(seconds)
        self._batch.observe(claimed)

    def published(self, lateness: Iterable[float]) -> None:
        for seconds in lateness:
            self._lateness.observe(max(0.0, seconds))

    def lost_marks(self, count: int) -> None:
        if count:
            self._lost.inc(count)

    def outage(self, kind: str) -> None:
        self._outages.labels(kind).inc()


def beat_metrics(settings: Settings) -> BeatMetrics:
    """The metrics beat keeps with these settings: served on the port, or none."""
    if not settings.beat_metrics_port:
        return BeatMetrics()
    try:
        return PrometheusBeatMetrics(settings.beat_metrics_port)
    except ImportError as exc:
        raise NeedsExtra("bridge_beat_metrics_port", "metrics", exc) from None
    except OSError as exc:  # the port is taken, or not this process's to open
        raise ValidationError(
            "bridge_beat_metrics_port", settings.beat_metrics_port, f"a free port ({exc.strerror})"
        ) from None
