"""The HTTP API's JSON answers: what orjson writes of the views is what their ``to_json`` says.

The API hands pages of schedules and runs to the encoder as views, which
write their own times and tuples (:meth:`bridge.service.views._View.json_fields`);
every other surface (the CLI's ``--json``, the Python API) takes ``to_json``.
Both must say the same for any value a row may hold, including those
refused on the way in that an older release may have stored.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.manage.web.answers import JSONAnswer
from bridge.rules.health import Health, State
from bridge.rules.values import answerable
from bridge.service.views import Page, Run, Schedule

T0 = datetime(2026, 3, 29, 1, 30, 15, 250_000, tzinfo=UTC)
HEALTH = ("health", "health_reason", "health_since")


def schedule_row(**given: Any) -> dict[str, Any]:
    """A ``periodic_task`` row (with its labels) as the page's read gives it: every column."""
    row: dict[str, Any] = {}
    for item in fields(Schedule):
        kind = str(item.type)
        if item.name in HEALTH:
            continue
        if "datetime" in kind:
            row[item.name] = T0
        elif kind.startswith("tuple"):
            row[item.name] = ("nightly", "team:data")
        elif kind.startswith("bool"):
            row[item.name] = False
        elif kind.startswith("int"):
            row[item.name] = 3
        elif kind.startswith("float"):
            row[item.name] = 2.5
        else:
            row[item.name] = f"{item.name} é ✓"
    row.update(args="[1, 2]", kwargs='{"a": {"b": [null, true]}}', options="{}", signature=None)
    row.update(skip_calendars="holidays,weekends", nextrun=None)
    return row | given


def stdlib_answer(value: Any) -> Any:
    """What the answer said before orjson, decoded: the standard library's encoding of
    ``to_json``, numbers that are not finite as null."""
    return json.loads(json.dumps(answerable(value.to_json()), ensure_ascii=True))


def test_a_schedule_view_holds_every_field_in_order_as_its_class_would_make_it() -> None:
    state = State(Health.LATE, T0, "due 2m ago")
    view = Schedule.of(schedule_row(), state)
    values = {name: value for name, value in schedule_row().items() if name in vars(view)}
    values["skip_calendars"] = ("holidays", "weekends")
    made = Schedule(**values, health="late", health_reason="due 2m ago", health_since=T0)
    assert view == made
    assert list(vars(view)) == [item.name for item in fields(Schedule)]
    assert (view.health, view.health_reason, view.health_since) == ("late", "due 2m ago", T0)
    unjudged = Schedule.of(schedule_row())
    assert (unjudged.health, unjudged.health_reason, unjudged.health_since) == ("ok", "", None)


def test_a_page_is_answered_byte_for_byte_as_the_standard_library_wrote_it() -> None:
    offset = timezone(timedelta(hours=5, minutes=30))
    page = Page(
        [
            Schedule.of(schedule_row()),
            Schedule.of(schedule_row(id=4, anchor=T0.replace(microsecond=0).astimezone(offset))),
        ],
        "bmV4dA",
    )
    expected = json.dumps(page.to_json(), ensure_ascii=False, separators=(",", ":"))
    assert JSONAnswer(page).body == expected.encode()
    assert JSONAnswer(page.to_json()).body == expected.encode()


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and the infinities among them
    | st.text()
    | st.sampled_from(["\udfff", "a\ud800b", "\x00"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
TIMES = st.none() | st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3, minutes=-30))])
)


@settings(deadline=None)
@example(args=[2**64 + 1, -(2**63) - 1], kwargs=None, started=None, ended=None, text="")
@given(args=JSON_VALUES, kwargs=JSON_VALUES, started=TIMES, ended=TIMES, text=st.text())
def test_any_stored_value_is_answered_as_to_json_says_it(
    args: Any, kwargs: Any, started: datetime | None, ended: datetime | None, text: str
) -> None:
    schedule = Schedule.of(
        schedule_row(
            args=json.dumps(args),  # as an older release may have stored it: NaN and all
            kwargs=json.dumps(kwargs)[:-1] or "not json",  # cut short: shown as its text
            note=text,
            held=started,
        )
    )
    run = Run(
        id="r-1",
        schedule_id=7,
        schedule="report",
        task="proj.tasks.report",
        plan_time=T0,
        attempt=1,
        trigger="schedule",
        status="SUCCESS",
        queued_at=started,
        expires_at=None,
        started_at=started,
        finished_at=ended,
        runtime=0.25,
        worker="w1@host",
        result=json.dumps(args),
        error=text,
        traceback=None,
    )
    for page in (Page([schedule], None), Page([run], "bmV4dA")):
        assert json.loads(JSONAnswer(page).body) == stdlib_answer(page)
    assert json.loads(JSONAnswer(schedule).body) == stdlib_answer(schedule)
