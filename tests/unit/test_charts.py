"""Where the dashboard's pictures of runs and fires put each mark, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.manage.web.charts import (
    AXIS_HEIGHT,
    BARS_HEIGHT,
    HEIGHT,
    LABEL_WIDTH,
    LANE_HEIGHT,
    MARGIN,
    TIMELINE_WIDTH,
    WIDTH,
    duration_chart,
    occurrence_strip,
    timeline_chart,
)
from bridge.service.views import Gap, Timeline, TimerGroup

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


# -- the strip of occurrences -----------------------------------------------------------------


def test_runs_and_the_hours_skips_and_misses_oldest_first() -> None:
    runs = [run(90, 1.0, "FAILURE"), run(30, 1.0), run(5, 1.0)]  # 09:05, 09:30, 10:30
    gaps = [Gap(PLAN + timedelta(hours=1), 4, 0), Gap(PLAN, 2, 1)]
    strip = occurrence_strip(runs, gaps)
    assert [(mark.at.strftime("%H:%M"), mark.status, mark.count) for mark in strip] == [
        ("09:00", "SKIPPED", 2),
        ("09:00", "MISSED", 1),
        ("09:05", "SUCCESS", 1),
        ("09:30", "SUCCESS", 1),
        ("10:00", "SKIPPED", 4),
        ("10:30", "FAILURE", 1),
    ]
    assert strip[0].title == "2 skipped in the hour from then"
    assert strip[-1].title == "FAILURE"


def test_a_full_strip_leaves_out_the_hours_before_its_oldest_run() -> None:
    runs = [run(minute, 1.0) for minute in range(134, 104, -1)]  # 10:45 to 11:14
    early, late = Gap(PLAN, 5, 0), Gap(PLAN + timedelta(hours=2), 0, 3)  # 09:00, 11:00
    strip = occurrence_strip(runs, [late, early], shown=30)
    assert len(strip) == 30 and strip[-1].status == "SUCCESS"
    assert ("MISSED", 3) in [(mark.status, mark.count) for mark in strip]
    assert "SKIPPED" not in [mark.status for mark in strip]
    # Not full: every gap read is shown.
    assert occurrence_strip(runs[:5], [late, early], shown=30)[0].status == "SKIPPED"


@given(
    st.lists(st.integers(0, 10_000), max_size=150),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 9), st.integers(0, 9)), max_size=50),
)
def test_the_strip_is_in_time_order_and_never_longer_than_asked(
    minutes: list[int], hours: list[tuple[int, int, int]]
) -> None:
    runs = [run(minute, 1.0) for minute in sorted(minutes, reverse=True)]
    gaps = [Gap(PLAN + timedelta(hours=h), skipped, missed) for h, skipped, missed in hours]
    strip = occurrence_strip(runs, gaps, shown=100)
    assert len(strip) <= 100
    assert [mark.at for mark in strip] == sorted(mark.at for mark in strip)
    assert all(mark.count > 0 for mark in strip)


# -- the timeline of the next day ---------------------------------------------------------------


def group(every: timedelta, schedules: int, start: datetime, count: int, more: bool = False) -> Any:
    fires = [start + index * every for index in range(count)]
    return TimerGroup("t", "UTC", "words", schedules, "first", fires, more)


def test_each_timers_fires_weighed_by_the_schedules_that_share_it() -> None:
    since = PLAN
    nightly = group(timedelta(days=1), 3, PLAN + timedelta(hours=18), 1)
    quarterly = group(timedelta(minutes=15), 1, PLAN, 96)
    chart = timeline_chart(Timeline(since, since + timedelta(hours=24), [quarterly, nightly], 7))
    assert chart.peak == 4 and len(chart.bars) == 96
    [tall] = [bar for bar in chart.bars if bar.fires == 4]
    assert tall.at == PLAN + timedelta(hours=18) and tall.y == AXIS_HEIGHT
    assert tall.title == "4 fires in the 15 minutes from then"
    assert [lane.label for lane in chart.lanes] == ["words (1)", "words (3)"]
    assert len(chart.lanes[1].ticks) == 1 and chart.left_out == 7 and not chart.capped
    assert [mark.at.hour for mark in chart.axis] == [10, 13, 16, 19, 22, 1, 4, 7]


def test_a_timer_firing_every_second_draws_one_tick_per_unit_of_width() -> None:
    second = group(timedelta(seconds=1), 1, PLAN, 86_400)
    chart = timeline_chart(Timeline(PLAN, PLAN + timedelta(hours=24), [second], 0))
    assert chart.peak == 900 and len(chart.lanes[0].ticks) <= TIMELINE_WIDTH


@given(
    st.lists(
        st.tuples(st.integers(1, 1000), st.lists(st.integers(0, 86_399), max_size=50)),
        min_size=1,
        max_size=20,
    )
)
def test_every_bar_and_tick_lies_inside_the_picture(groups: list[tuple[int, list[int]]]) -> None:
    timeline = Timeline(
        PLAN,
        PLAN + timedelta(hours=24),
        [
            TimerGroup(
                "t",
                "UTC",
                "w",
                count,
                "n",
                [PLAN + timedelta(seconds=s) for s in sorted(at)],
                False,
            )
            for count, at in groups
        ],
        0,
    )
    chart = timeline_chart(timeline)
    assert sum(bar.fires for bar in chart.bars) == sum(c * len(at) for c, at in groups)
    for bar in chart.bars:
        assert LABEL_WIDTH <= bar.x < TIMELINE_WIDTH and 0 < bar.height <= BARS_HEIGHT
        assert AXIS_HEIGHT - 1e-6 <= bar.y <= AXIS_HEIGHT + BARS_HEIGHT
    for lane in chart.lanes:
        assert all(LABEL_WIDTH <= tick <= TIMELINE_WIDTH - MARGIN for tick in lane.ticks)
        assert lane.y + LANE_HEIGHT / 2 <= chart.height
