"""Pictures of the runs and fires, laid out here and drawn by the templates as SVG.

The dashboard draws on the server: no script and no chart library reach the
browser, and the picture is there before any script runs. This module only
computes where each mark goes; the template writes the SVG elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bridge.manage.api import TIMELINE_FIRES, Gap, Run, Timeline
from bridge.rules.kinds import RunStatus

#: The picture's size in its own units (the page scales it to the column's width).
WIDTH, HEIGHT = 600.0, 160.0
#: Room kept at the edges, for the marks' radius.
MARGIN = 6.0
#: The runs a schedule's picture shows at most, the newest.
RUNS_SHOWN = 100


@dataclass(frozen=True)
class Mark:
    """One run in the picture: where its duration and its start delay go, and what
    hovering it says: its plan time (in UTC until the page's script writes it in the
    browser's zone), then ``said``."""

    x: float
    duration_y: float | None
    delay_y: float | None
    failed: bool
    at: datetime
    said: str

    @property
    def title(self) -> str:
        return f"{self.at.isoformat()}: {self.said}"


@dataclass(frozen=True)
class DurationChart:
    """The runs that ended, oldest first, on one scale of seconds from 0 to ``top``."""

    marks: list[Mark]
    top: float
    width: float = WIDTH
    height: float = HEIGHT

    def points(self, series: str) -> str:
        """A polyline's points of the durations (``duration_y``) or start delays."""
        return " ".join(
            f"{mark.x:.1f},{y:.1f}"
            for mark in self.marks
            if (y := getattr(mark, series)) is not None
        )


def duration_chart(runs: Sequence[Run]) -> DurationChart | None:
    """The durations of the runs that ended (failures marked apart) and their start delay
    (from the plan time to the start), oldest first; None without a run that started and
    ended."""
    ended = [
        run
        for run in reversed(runs)
        if run.runtime is not None and run.started_at is not None and run.plan_time is not None
    ]
    if not ended:
        return None
    delays = [max((run.started_at - run.plan_time).total_seconds(), 0.0) for run in ended]  # type: ignore[operator]
    top = max(max(run.runtime or 0.0 for run in ended), max(delays), 0.001)
    step = (WIDTH - 2 * MARGIN) / max(len(ended) - 1, 1)

    def y(seconds: float) -> float:
        return HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * seconds / top

    marks = [
        Mark(
            x=MARGIN + index * step,
            duration_y=y(run.runtime or 0.0),
            delay_y=y(delay),
            failed=RunStatus(run.status) in (RunStatus.FAILURE, RunStatus.LOST),
            at=run.plan_time,  # type: ignore[arg-type]  # every run drawn has one
            said=f"{run.status}, ran {run.runtime:.3f} s,"
            f" started {delay:.3f} s after its plan time",
        )
        for index, (run, delay) in enumerate(zip(ended, delays, strict=True))
    ]
    return DurationChart(marks, top)


# -- the strip of a schedule's latest occurrences ------------------------------------------

#: The occurrences a schedule's strip shows at most, the newest.
OCCURRENCES_SHOWN = 100
#: The marks of occurrences not run, beside those of the runs' statuses.
SKIPPED, MISSED = "SKIPPED", "MISSED"


@dataclass(frozen=True)
class Occurrence:
    """One mark of a schedule's strip: a run (its plan time and status), or the occurrences
    skipped or missed in an hour (the hour's start, and how many)."""

    at: datetime
    status: str
    count: int = 1

    @property
    def title(self) -> str:
        """What hovering the mark says (the page's script puts the time in the browser's
        zone)."""
        if self.status in (SKIPPED, MISSED):
            return f"{self.count} {self.status.lower()} in the hour from then"
        return self.status


def occurrence_strip(
    runs: Sequence[Run], gaps: Sequence[Gap], shown: int = OCCURRENCES_SHOWN
) -> list[Occurrence]:
    """The latest ``shown`` occurrences, oldest first: each run at its plan time, and the
    occurrences skipped and missed in an hour as one mark each, at the hour's start (the
    tallies know the hour a skip or miss was decided in, not its minute).

    ``runs`` are the schedule's latest runs, newest first (a full list of ``shown``
    covers the span the strip can show: gaps older than its oldest run are left out),
    ``gaps`` its hours with skips or misses.
    """
    marks = [Occurrence(run.plan_time, run.status) for run in runs if run.plan_time is not None]
    oldest = min((mark.at for mark in marks), default=None) if len(runs) >= shown else None
    for gap in gaps:
        if oldest is not None and gap.hour + HOUR <= oldest:
            continue
        marks += [
            Occurrence(gap.hour, status, count)
            for status, count in ((SKIPPED, gap.skipped), (MISSED, gap.missed))
            if count
        ]
    marks.sort(key=lambda mark: mark.at)
    return marks[-shown:]


# -- the timeline of the next day's fires --------------------------------------------------

HOUR = timedelta(hours=1)
#: The timeline's size in its own units, the height of its bars and of each lane.
TIMELINE_WIDTH, BARS_HEIGHT, LANE_HEIGHT = 720.0, 90.0, 16.0
#: Above the bars, the hours.
AXIS_HEIGHT = 14.0
#: Left of the lanes, their timers' names.
LABEL_WIDTH = 180.0
#: The timeline's bars: fires counted per quarter of an hour.
BUCKET = timedelta(minutes=15)
#: The lanes drawn, the timers most schedules share.
LANES_SHOWN = 12
#: The hours marked on the axis: every third.
AXIS_EVERY = 3


@dataclass(frozen=True)
class Bar:
    """The fires of a quarter of an hour."""

    x: float
    y: float
    height: float
    at: datetime
    fires: int

    @property
    def title(self) -> str:
        return f"{self.fires} fires in the 15 minutes from then"


@dataclass(frozen=True)
class Lane:
    """One timer's fires, as ticks, labelled with the timer and how many schedules share it."""

    y: float
    label: str
    title: str
    ticks: list[int]
    more: bool


@dataclass(frozen=True)
class AxisMark:
    x: float
    at: datetime


@dataclass(frozen=True)
class TimelineChart:
    """The fires of the next day across schedules: bars of fires per quarter of an hour
    (where load piles up), then a lane per timer (what runs when)."""

    bars: list[Bar]
    lanes: list[Lane]
    axis: list[AxisMark]
    peak: int
    bar_width: float
    #: Schedules due within the span that no bar counts, and that no lane shows.
    left_out: int
    lanes_left_out: int
    #: A timer was cut short: the fires worked out reached ``fires_cap``.
    capped: bool
    fires_cap: int = TIMELINE_FIRES
    width: float = TIMELINE_WIDTH

    @property
    def height(self) -> float:
        return AXIS_HEIGHT + BARS_HEIGHT + MARGIN + LANE_HEIGHT * len(self.lanes)


def timeline_chart(timeline: Timeline) -> TimelineChart:
    """Lay out ``timeline``: each timer's fires weighed by the schedules that share it,
    counted per :data:`BUCKET` over the whole span; the :data:`LANES_SHOWN` largest timers
    as lanes."""
    span = timeline.until - timeline.since
    plot = TIMELINE_WIDTH - LABEL_WIDTH - MARGIN

    def x(moment: datetime) -> float:
        return LABEL_WIDTH + plot * ((moment - timeline.since) / span)

    slots = max(int(span / BUCKET), 1)
    counts = [0] * slots
    for group in timeline.groups:
        for fire in group.fires:
            counts[min(int((fire - timeline.since) / BUCKET), slots - 1)] += group.schedules
    peak = max(counts, default=0)
    width = plot / slots
    bars = [
        Bar(
            x=LABEL_WIDTH + index * width,
            y=AXIS_HEIGHT + BARS_HEIGHT * (1 - fires / peak),
            height=BARS_HEIGHT * fires / peak,
            at=timeline.since + index * BUCKET,
            fires=fires,
        )
        for index, fires in enumerate(counts)
        if fires
    ]
    lanes = [
        Lane(
            y=AXIS_HEIGHT + BARS_HEIGHT + MARGIN + LANE_HEIGHT * (index + 0.5),
            label=_shortened(f"{group.words} ({group.schedules:,})", 30),
            title=f"{group.timer} ({group.timezone}): {group.schedules} schedule(s), such as"
            f" {group.first_name}; {len(group.fires)}{'+' if group.more else ''} fires",
            # One tick per unit of width: a timer firing every second fires 86,400 times a day.
            ticks=sorted({round(x(fire)) for fire in group.fires}),
            more=group.more,
        )
        for index, group in enumerate(timeline.groups[:LANES_SHOWN])
    ]
    first_hour = timeline.since.replace(minute=0, second=0, microsecond=0) + HOUR
    axis = [
        AxisMark(x(at), at)
        for step in range(0, int(span / HOUR) + 1, AXIS_EVERY)
        if (at := first_hour + step * HOUR) < timeline.until
    ]
    return TimelineChart(
        bars,
        lanes,
        axis,
        peak,
        width,
        timeline.left_out,
        sum(group.schedules for group in timeline.groups[LANES_SHOWN:]),
        any(group.more for group in timeline.groups),
    )


def _shortened(text: str, length: int) -> str:
    """``text`` cut to ``length`` characters, an ellipsis saying so."""
    return text if len(text) <= length else text[: length - 1] + "…"
