"""Spans of the runs beat sends and the workers run (``bridge_tracing``, the ``otel`` extra).

With OpenTelemetry's API installed and ``bridge_tracing`` true, beat opens a
span ``bridge.fire`` for each run it sends, and its context goes in the run's
message headers (W3C ``traceparent``, as OpenTelemetry's propagator writes
them): the worker's span ``bridge.run`` of that run is its child, and so is
the span of OpenTelemetry's own Celery instrumentation where the workers run
it, which reads the same headers. The run's record keeps the trace id, so a
run in the dashboard or the API leads to its trace.

Where the spans go is the application's to say, as for any OpenTelemetry
instrumentation: a tracer provider and an exporter set up in the process
(``opentelemetry-instrument``, or the SDK in the app's module). Without one,
the API's spans are no-ops and no trace id is recorded.

This module is the one part of the bridge that imports OpenTelemetry, and only
when tracing is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bridge.extras import NeedsExtra

#: The message headers a span's context travels in (W3C Trace Context).
TRACE_HEADERS = ("traceparent", "tracestate")


@dataclass(frozen=True)
class Traced:
    """A run's open span: its context as headers, and its trace id (None: not recorded)."""

    span: Any
    headers: tuple[tuple[str, str], ...]
    trace_id: str | None


class Tracer:
    """Opens and ends the bridge's spans, through OpenTelemetry's API."""

    def __init__(self) -> None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError as exc:
            raise NeedsExtra("bridge_tracing", "otel", exc) from None
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._tracer = trace.get_tracer("celery-periodic-bridge")

    def fire(self, run_id: str, schedule: str, plan_time: datetime, trigger: str) -> Traced:
        """Open the span ``bridge.fire`` of a run beat sends."""
        span = self._tracer.start_span(
            "bridge.fire",
            kind=self._trace.SpanKind.PRODUCER,
            attributes={
                "bridge.run_id": run_id,
                "bridge.schedule": schedule,
                "bridge.plan_time": plan_time.isoformat(),
                "bridge.trigger": trigger,
            },
        )
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        found = span.get_span_context()
        trace_id = f"{found.trace_id:032x}" if found.is_valid else None
        return Traced(span, tuple(sorted(carrier.items())), trace_id)

    def run(self, run_id: str, task: str, headers: Mapping[str, Any]) -> Any:
        """Open the span ``bridge.run`` of a run a worker starts, the child of the span
        whose context ``headers`` carry (none: a span of its own trace)."""
        carrier = {key: str(headers[key]) for key in TRACE_HEADERS if headers.get(key)}
        parent = self._propagate.extract(carrier)
        return self._tracer.start_span(
            "bridge.run",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            attributes={"bridge.run_id": run_id, "bridge.task": task},
        )

    def end(self, span: Any, error: str | None = None) -> None:
        """End a span; marked as an error with ``error``."""
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end()
