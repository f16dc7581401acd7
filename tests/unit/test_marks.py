"""The list's rows, written in Python: what the user wrote is escaped, and each state says
why the schedule does not fire."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.manage.web.marks import schedule_row_html
from bridge.rules.health import Health, State
from bridge.service.views import Schedule
from tests.unit.test_answers import schedule_row

T0 = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
#: A run's plan time as the list's read gives it.
AT = "2026-03-29T01:30:00Z"
GLYPHS = {"SUCCESS": "✓", "FAILURE": "✗"}


def row_html(tick: bool = True, state: State | None = None, **given: object) -> str:
    schedule = Schedule.of(schedule_row(**given), state)
    marks = [(AT, "SUCCESS"), (AT, "FAILURE")]
    return str(
        schedule_row_html(schedule, "/schedules/x", "every minute", marks, 0.5, GLYPHS, tick)
    )


def test_what_a_user_wrote_is_escaped_wherever_the_row_shows_it() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    html = row_html(name=hostile, labels=(hostile,), timer=hostile, broken=True, note=hostile)
    assert "<img" not in html
    # The name four times (the row, the box, its label, the link), the label, timer and note.
    assert html.count("&lt;img src=x onerror=&#34;alert(1)&#34;&gt;") == 7
    lone = row_html(name="a\udfffb")
    assert "a\\udfffb" in lone and "\udfff" not in lone


def test_the_row_says_why_a_schedule_does_not_fire_and_offers_the_box_to_admins_only() -> None:
    assert 'class="badge health-broken">broken</span> <span class="reason">tripped' in row_html(
        broken=True, enabled=False, note="tripped"
    )
    paused = row_html(enabled=False, note=None)
    assert 'health-paused">paused</span></td>' in paused and "reason" not in paused
    finished = row_html(enabled=False, state=State(Health.FINISHED, T0, "no occurrence left"))
    assert 'health-finished">finished</span> <span class="reason">no occurrence left' in finished
    assert 'type="checkbox"' in row_html() and 'type="checkbox"' not in row_html(tick=False)
    assert "<td>50%</td>" in row_html() and 'aria-label="last 2 runs: 1 succeeded' in row_html()


def test_each_mark_gives_its_time_to_the_page_script_and_in_utc_on_hover() -> None:
    html = row_html()
    assert 'data-at="2026-03-29T01:30:00Z" title="2026-03-29 01:30:00 UTC: SUCCESS">✓' in html
    assert 'data-at="2026-03-29T01:30:00Z" title="2026-03-29 01:30:00 UTC: FAILURE">✗' in html
