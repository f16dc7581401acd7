"""Pictures of a schedule's runs, laid out here and drawn by the templates as SVG.

The dashboard draws on the server: no script and no chart library reach the
browser, and the picture is there before any script runs. This module only
computes where each mark goes; the template writes the SVG elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bridge.manage.views import Run
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
    hovering it says."""

    x: float
    duration_y: float | None
    delay_y: float | None
    failed: bool
    title: str


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
            title=f"{run.plan_time.isoformat() if run.plan_time else '-'}: {run.status},"
            f" ran {run.runtime:.3f} s, started {delay:.3f} s after its plan time",
        )
        for index, (run, delay) in enumerate(zip(ended, delays, strict=True))
    ]
    return DurationChart(marks, top)
