"""Each schedule's series in Prometheus's text format, written without prometheus_client's
families: what its parser reads back, whatever a schedule's name holds."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from bridge.manage.api import RunsSeen
from bridge.manage.web.metrics import schedule_series
from bridge.rules.health import OpenRunView
from tests.unit.test_answers import schedule_row

T0 = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_schedules_series_read_back_by_prometheus_whatever_its_name_holds() -> None:
    names = ['quote"d', "back\\slash", "new\nline", "uni✓code", "lone\udfffsurrogate"]
    rows = [
        schedule_row(id=n, name=name, nextrun=T0, last_failure_at=None, success_count=7)
        for n, name in enumerate(names)
    ]
    seen = RunsSeen({0: [OpenRunView("r1", "STARTED", T0, T0, T0)]}, {}, {0: 4})
    text = schedule_series(rows, seen, ["running", "ok", "ok", "ok", "late"])
    text.encode("utf-8")  # a lone surrogate, shown as its escape, encodes
    found = samples(text)
    shown = [*names[:4], "lone\\udfffsurrogate"]
    for name in shown:
        one = (("schedule", name),)
        assert found["bridge_schedule_next_run_timestamp_seconds", one] == T0.timestamp()
        assert ("bridge_schedule_last_failure_timestamp_seconds", one) not in found
        assert found["bridge_schedule_runs_total", (("schedule", name), ("status", "SUCCESS"))] == 7
        assert found["bridge_schedule_info", (*sorted({
            "schedule": name, "task": "task é ✓", "timer": "timer é ✓",
            "timezone": "timezone é ✓", "overlap": "overlap é ✓", "catchup": "catchup é ✓",
        }.items()),)] == 1  # fmt: skip
    assert found["bridge_schedule_running", (("schedule", shown[0]),)] == 1
    assert found["bridge_schedule_open_runs", (("schedule", shown[0]),)] == 4  # not all read
    assert found["bridge_schedule_open_runs", (("schedule", shown[1]),)] == 0
    assert found["bridge_schedule_health", (("schedule", shown[4]), ("state", "late"))] == 1
    families = [family.name for family in text_string_to_metric_families(text)]
    assert len(families) == len(set(families)) == 19


def test_no_schedule_still_names_every_series() -> None:
    text = schedule_series([], RunsSeen({}, {}), [])
    assert text.count("# TYPE ") == 19 and "{" not in text
