"""Where the dashboard's picture of a schedule's runs puts each mark, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.manage.web.charts import HEIGHT, MARGIN, WIDTH, duration_chart

PLAN = datetime(2026, 11, 29, 9, tzinfo=UTC)


def run(minute: int, runtime: float | None, status: str = "SUCCESS", delay: float = 0.5) -> Any:
    plan = PLAN + timedelta(minutes=minute)
    started = None if runtime is None else plan + timedelta(seconds=delay)
    return SimpleNamespace(plan_time=plan, started_at=started, runtime=runtime, status=status)


def test_the_runs_that_ended_oldest_first_failures_marked() -> None:
    newest_first = [run(3, 2.0, "FAILURE"), run(2, None, "STARTED"), run(1, 1.0), run(0, 4.0)]
    chart = duration_chart(newest_first)
    assert chart is not None and chart.top == 4.0
    assert [mark.failed for mark in chart.marks] == [False, False, True]
    assert [mark.x for mark in chart.marks] == [MARGIN, WIDTH / 2, WIDTH - MARGIN]
    assert chart.marks[0].duration_y == MARGIN  # the longest at the top
    assert chart.marks[1].duration_y == HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) / 4
    assert chart.marks[2].title.startswith("2026-11-29T09:03:00+00:00: FAILURE, ran 2.000 s")
    assert chart.points("delay_y").count(",") == 3


def test_no_picture_without_a_run_that_ended() -> None:
    assert duration_chart([]) is None
    assert duration_chart([run(0, None, "SENT")]) is None


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), min_size=1, max_size=100))
def test_every_mark_lies_inside_the_picture(durations: list[tuple[float, float]]) -> None:
    chart = duration_chart([run(i, d, delay=s) for i, (d, s) in enumerate(durations)])
    assert chart is not None
    for mark in chart.marks:
        assert MARGIN - 1e-6 <= mark.x <= WIDTH - MARGIN + 1e-6
        for y in (mark.duration_y, mark.delay_y):
            assert y is not None and MARGIN - 1e-6 <= y <= HEIGHT - MARGIN + 1e-6
