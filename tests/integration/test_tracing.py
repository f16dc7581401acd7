"""Tracing with real processes: beat's span of a run, the worker's span as its child.

Beat and a worker on PostgreSQL and Redis with ``bridge_tracing`` on. Each
process sets up OpenTelemetry's SDK as an application would, here from a
``sitecustomize`` module that writes every span it ends to a file of its own
(the SDK's exporters keep spans in the process that made them, and the test
reads those of three processes: beat, the worker and its pool child).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import REPO, Env, free_port, wait_for

pytestmark = pytest.mark.e2e

#: What each process runs at its start: the SDK, with every span written as it ends.
SITECUSTOMIZE = """
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

HERE = os.path.dirname(os.path.abspath(__file__))


class ToFile(SpanExporter):
    def export(self, spans):
        with open(os.path.join(HERE, f"spans-{os.getpid()}.jsonl"), "a") as out:
            for span in spans:
                parent = span.parent
                out.write(json.dumps({
                    "name": span.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_id": f"{parent.span_id:016x}" if parent else None,
                    "attributes": dict(span.attributes or {}),
                    "error": span.status.status_code.name == "ERROR",
                }) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)
"""


def spans(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in folder.glob("spans-*.jsonl")
        for line in path.read_text().splitlines()
    ]


def test_a_run_is_traced_from_beat_to_the_worker(pg_env: Env, tmp_path: Path) -> None:
    """The run's record keeps the trace of beat's span ``bridge.fire``; the worker's span
    ``bridge.run`` of the run is that span's child; a failed run's span is an error."""
    folder = tmp_path / "otel"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    extra = {"PYTHONPATH": os.pathsep.join([str(folder), str(REPO)]), "BRIDGE_TRACING": "true"}
    pg_env.start("worker", **extra).wait_log("ready", timeout=60)
    pg_env.start("beat", **extra)
    pg_env.cli("add", "traced", "--task", "workers.app.quick", "--timer", "every 1s")
    pg_env.cli("add", "traced-fails", "--task", "workers.app.fail", "--timer", "every 1h")
    pg_env.cli("run", "traced-fails")

    def ended(name: str, status: str) -> dict[str, Any] | None:
        runs = json.loads(pg_env.cli("history", name, "--json").stdout)
        return next((run for run in runs if run["status"] == status), None)

    run = wait_for(lambda: ended("traced", "SUCCESS"), 60, what="a traced run that succeeded")
    assert re.fullmatch(r"[0-9a-f]{32}", run["trace_id"] or ""), run

    def pair(run_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        found = {
            s["name"]: s for s in spans(folder) if s["attributes"].get("bridge.run_id") == run_id
        }
        if {"bridge.fire", "bridge.run"} <= set(found):
            return found["bridge.fire"], found["bridge.run"]
        return None

    fire, child = wait_for(lambda: pair(run["id"]), 30, what="the spans of the run")
    assert fire["trace_id"] == child["trace_id"] == run["trace_id"]
    assert child["parent_id"] == fire["span_id"]
    assert fire["attributes"]["bridge.schedule"] == "traced"
    assert fire["attributes"]["bridge.trigger"] in ("scheduled", "catchup")
    assert not child["error"]
    # The API and the dashboard's run log give the trace id.
    port = free_port()
    pg_env.serve(port)
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/api/v1/runs/{run['id']}").json()["trace_id"] == run["trace_id"]
    assert f"trace {run['trace_id']}" in httpx.get(f"{base}/schedules/traced").text
    # A run sent by hand is not beat's: no trace; the worker's span of it has no parent
    # of the bridge's, and says it failed.
    failed = wait_for(lambda: ended("traced-fails", "FAILURE"), 60, what="the failed run")
    assert failed["trace_id"] is None
    alone = wait_for(
        lambda: next(
            (s for s in spans(folder) if s["attributes"].get("bridge.run_id") == failed["id"]),
            None,
        ),
        30,
        what="the worker's span of the failed run",
    )
    assert (alone["name"], alone["parent_id"], alone["error"]) == ("bridge.run", None, True)
