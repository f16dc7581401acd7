"""Tests of bridge.bulk's pure half: reading a line, comparing it with a row, writing a line.

No database: a row is the dict :meth:`Entry.new_row` gives, which is what an
import inserts. Every refusal is the one ``add`` gives for the same value, and
an exported line reads back into the row it came from.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.manage.bulk import LINE_FIELDS, Entry, Rules, export_fields, export_line, parse_line
from bridge.rules.definition import build_definition, require_occurrence
from bridge.rules.policy import POLICY_NAMES

NOW = datetime(2026, 11, 21, 9, 0, 0, 123456, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
QUICK = "workers.app.quick"
RULES = Rules(now=NOW, default_timezone="Europe/Paris", known_tasks=frozenset({QUICK}))


def entry(**fields: Any) -> Entry:
    """A parsed line: a valid schedule with some fields overridden (None removes one)."""
    line = {"name": "report", "task": QUICK, "timer": "0 9 * * *"} | fields
    return parse_line(json.dumps({k: v for k, v in line.items() if v is not None}), 7, RULES)


def refusal(text: str | bytes) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_line(text, 3, RULES)
    return caught.value


def line_refusal(**fields: Any) -> ValidationError:
    line = {"name": "report", "task": QUICK, "timer": "0 9 * * *"} | fields
    return refusal(json.dumps({k: v for k, v in line.items() if v is not None}))


# -------------------------------------------------------------------------- reading


def test_a_minimal_line_is_what_add_makes() -> None:
    parsed = entry()
    definition, timer = build_definition(
        task=QUICK, timer="0 9 * * *", timezone="Europe/Paris", anchor=NOW
    )
    assert parsed.name == "report"
    assert parsed.line == 7
    assert parsed.definition == definition
    assert parsed.enabled is True
    assert parsed.anchor is None
    assert parsed.first == require_occurrence(timer, definition.policies, NOW, "0 9 * * *")
    row = parsed.new_row(NOW)
    assert row["anchor"] == row["created_at"] == row["updated_at"] == NOW
    assert row["nextrun"] == row["next_occurrence"] == parsed.first
    assert (row["source"], row["enabled"], row["total_run_count"]) == ("api", True, 0)


def test_every_field_of_add_is_read() -> None:
    parsed = entry(
        timer="every 90s",
        timezone="Asia/Tokyo",
        anchor="2026-11-21T10:00:00+01:00",
        args=[1, "two"],
        kwargs={"x": 1},
        options={"priority": 5},
        queue="reports",
        enabled=False,
        overlap="allow",
        catchup="all",
        catchup_window="1h",
        jitter="10s",
        start="2026-12-01T00:00:00+00:00",
        end="2027-01-01T00:00:00+00:00",
        remaining=3,
        max_failures=2,
        max_attempts=4,
        backoff="30s,2m",
        expires="10m",
        labels=["team:ops", "nightly", "team:ops"],
    )
    assert set(LINE_FIELDS) == {
        *POLICY_NAMES,
        "name",
        "task",
        "timer",
        "timezone",
        "anchor",
        "signature",
        "args",
        "kwargs",
        "options",
        "queue",
        "enabled",
        "labels",
    }
    assert parsed.labels == ("nightly", "team:ops")
    definition = parsed.definition
    assert (definition.timer, definition.timezone) == ("every 1m30s", "Asia/Tokyo")
    assert parsed.anchor == datetime(2026, 11, 21, 9, tzinfo=UTC)
    assert (definition.args, definition.kwargs) == ('[1,"two"]', '{"x":1}')
    assert json.loads(definition.options) == {"priority": 5, "queue": "reports"}
    assert parsed.enabled is False
    columns = definition.policies.columns()
    assert columns["catchup_window"] == 3600.0
    assert columns["start_at"] == datetime(2026, 12, 1, tzinfo=UTC)
    assert (columns["remaining"], columns["backoff"], columns["expires"]) == (3, "30s,2m", "10m")
    assert parsed.first == datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fields", "field", "value"),
    [
        ({"name": ""}, "name", ""),
        ({"name": None}, "name", None),
        ({"task": None}, "task", None),
        ({"task": "workers.app.nope"}, "task", "workers.app.nope"),
        ({"timer": None}, "timer", None),
        ({"timer": "*/5 * * *"}, "timer", "*/5 * * *"),
        ({"timer": "at 2020-01-01T00:00:00+00:00"}, "timer", "at 2020-01-01T00:00:00+00:00"),
        ({"timezone": "Europe/Pariss"}, "timezone", "Europe/Pariss"),
        ({"timezone": ""}, "timezone", ""),
        ({"timezone": "localtime"}, "timezone", "localtime"),
        ({"timezone": "right/UTC"}, "timezone", "right/UTC"),
        ({"args": {"a": 1}}, "args", {"a": 1}),
        ({"kwargs": [1]}, "kwargs", [1]),
        ({"options": {"colour": "red"}}, "options", "colour"),
        ({"queue": " "}, "queue", " "),
        ({"queue": 5}, "queue", 5),
        ({"enabled": "yes"}, "enabled", "yes"),
        ({"anchor": "tomorrow"}, "anchor", "tomorrow"),
        ({"anchor": "2026-11-21T10:00:00"}, "anchor", "2026-11-21T10:00:00"),
        ({"overlap": "sometimes"}, "overlap", "sometimes"),
        ({"jitter": "soon"}, "jitter", "soon"),
        ({"remaining": 0}, "remaining", 0),
        ({"max_attempts": "none"}, "max_attempts", "none"),
        ({"end": "2026-11-01T00:00:00+00:00"}, "end", "2026-11-01T00:00:00+00:00"),
        ({"timr": "every 10s"}, "field", "timr"),
        ({"labels": ["bad label"]}, "labels", ["bad label"]),
        ({"labels": 5}, "labels", 5),
    ],
)
def test_a_bad_field_is_refused_naming_it(fields: dict[str, Any], field: str, value: Any) -> None:
    line = {"name": "report", "task": QUICK, "timer": "0 9 * * *", **fields}
    err = refusal(json.dumps({k: v for k, v in line.items() if v is not None or k == field}))
    assert (err.field, err.value) == (field, value)
    assert str(err).startswith(f"{field}: got {value!r}, expected ")


def test_refusals_read_as_adds() -> None:
    """The same value gets the same message from an import line and from add's checks."""
    with pytest.raises(ValidationError) as by_add:
        build_definition(task=QUICK, timer="*/5 * * *", timezone="UTC", anchor=NOW)
    assert str(line_refusal(timer="*/5 * * *")) == str(by_add.value)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"a name"', "{'name': 'x'}", "{" * 200])
def test_a_line_that_is_not_a_json_object_is_refused(text: str) -> None:
    err = refusal(text)
    assert err.field == "json"
    assert err.expected == "a JSON object with a schedule's fields"
    assert len(err.value) <= 83


def test_bytes_are_read_as_utf_8_with_or_without_a_byte_order_mark() -> None:
    line = json.dumps({"name": "été", "task": QUICK, "timer": "@daily"}, ensure_ascii=False)
    assert parse_line(line.encode(), 1, RULES).name == "été"
    assert parse_line(b"\xef\xbb\xbf" + line.encode(), 1, RULES).name == "été"
    err = refusal(line.encode("latin-1"))
    assert err.field == "json"
    assert err.value.startswith('{"name": "\ufffd')


def test_a_disabled_line_may_have_nothing_to_come() -> None:
    """A finished schedule exports as a disabled line; it must import back."""
    past = "at 2020-01-01T00:00:00+00:00"
    assert entry(timer=past, enabled=False).first is None
    assert line_refusal(timer=past).field == "timer"
    assert entry(timer="every 1h", end=NOW.isoformat(), enabled=False).first is None
    assert line_refusal(timer="every 1h", end=(NOW + timedelta(minutes=1)).isoformat()).field == (
        "end"
    )


def test_unknown_tasks_are_accepted_when_the_app_does_not_say() -> None:
    rules = Rules(now=NOW, default_timezone="UTC", known_tasks=None)
    line = {"name": "x", "task": "elsewhere.task", "timer": "every 10s"}
    assert parse_line(json.dumps(line), 1, rules).definition.task == "elsewhere.task"


# -------------------------------------------------------------------------- comparing


def stored(parsed: Entry, **changes: Any) -> dict[str, Any]:
    """The row an import of ``parsed`` wrote at NOW, with some columns changed since."""
    return {"id": 1, **parsed.new_row(NOW), **changes}


def test_a_row_that_matches_its_line_is_unchanged() -> None:
    parsed = entry(timer="every 10s", overlap="allow")
    assert parsed.changes(stored(parsed), LATER) is None


def test_a_new_definition_keeps_the_cursor() -> None:
    parsed = entry(timer="every 10s")
    row = stored(parsed)
    changes = entry(timer="every 10s", kwargs={"x": 2}, overlap="allow").changes(row, LATER)
    assert changes is not None
    assert (changes["kwargs"], changes["overlap"], changes["updated_at"]) == (
        '{"x":2}',
        "allow",
        LATER,
    )
    assert not {"anchor", "nextrun", "next_occurrence", "enabled", "note"} & set(changes)


def test_a_new_timer_moves_the_cursor_from_now_as_edit_does() -> None:
    row = stored(entry(timer="every 10s"))
    changes = entry(timer="every 15s").changes(row, LATER)
    assert changes is not None
    assert changes["anchor"] == LATER
    assert changes["nextrun"] == changes["next_occurrence"] == LATER + timedelta(seconds=15)


def test_a_new_zone_keeps_the_grid_and_moves_the_cursor() -> None:
    row = stored(entry(timer="every 10s", timezone="UTC"))
    changes = entry(timer="every 10s", timezone="Asia/Tokyo").changes(row, LATER)
    assert changes is not None
    assert changes["anchor"] == NOW
    assert changes["nextrun"] == NOW + timedelta(minutes=5, seconds=10)


def test_a_given_anchor_is_compared_and_counted_from() -> None:
    row = stored(entry(timer="every 10s"))
    anchor = NOW + timedelta(seconds=3)
    changes = entry(timer="every 10s", anchor=anchor.isoformat()).changes(row, LATER)
    assert changes is not None
    assert changes["anchor"] == anchor
    assert changes["nextrun"] == LATER + timedelta(seconds=3)
    assert entry(timer="every 10s", anchor=NOW.isoformat()).changes(row, LATER) is None


def test_remaining_is_a_countdown_that_is_not_compared() -> None:
    parsed = entry(remaining=5)
    assert parsed.changes(stored(parsed, remaining=2), LATER) is None
    changes = entry(remaining=5, overlap="allow").changes(stored(parsed, remaining=2), LATER)
    assert changes is not None
    assert changes["remaining"] == 5


def test_disabled_pauses_and_enabled_resumes_from_now() -> None:
    parsed = entry()
    paused = entry(enabled=False).changes(stored(parsed), LATER)
    assert paused is not None
    assert (paused["enabled"], paused["note"]) == (False, None)
    assert "nextrun" not in paused

    broken = stored(parsed, enabled=False, broken=True, note="broken: 3 failures")
    resumed = parsed.changes(broken, NOW + timedelta(days=3))
    assert resumed is not None
    assert (resumed["enabled"], resumed["broken"], resumed["note"]) == (True, False, None)
    assert (resumed["failure_streak"], resumed["held"], resumed["retry_at"]) == (0, None, None)
    assert resumed["nextrun"] == resumed["next_occurrence"] == datetime(2026, 11, 25, 8, tzinfo=UTC)


def test_resuming_a_schedule_with_nothing_to_come_is_refused() -> None:
    one_shot = (NOW + timedelta(minutes=1)).isoformat()
    parsed = entry(timer=f"at {one_shot}")
    finished = stored(parsed, enabled=False, nextrun=None, next_occurrence=None)
    with pytest.raises(ValidationError) as caught:
        parsed.changes(finished, NOW + timedelta(hours=1))
    assert caught.value.field == "timer"
    assert entry(timer=f"at {one_shot}", enabled=False).changes(finished, LATER) is None


# -------------------------------------------------------------------------- exporting


def test_export_leaves_out_defaults_and_state() -> None:
    parsed = entry(timer="*/5 * * * *", timezone="UTC")
    row = stored(parsed, total_run_count=9, last_status="SUCCESS", note="x", nextrun=LATER)
    assert export_fields(row) == {
        "name": "report",
        "task": QUICK,
        "timer": "*/5 * * * *",
        "timezone": "UTC",
    }


def test_export_writes_each_field_as_a_line_does() -> None:
    parsed = entry(
        timer="every 10s",
        kwargs={"é": "ü"},
        options={"queue": "q"},
        enabled=False,
        catchup_window="1d1h",
        start="2026-12-01T00:00:00+01:00",
        backoff="10s..10m",
    )
    line = export_line(stored(parsed, jitter=0.25, remaining=0))
    assert json.loads(line) == {
        "name": "report",
        "task": QUICK,
        "timer": "every 10s",
        "timezone": "Europe/Paris",
        "anchor": NOW.isoformat(),
        "kwargs": {"é": "ü"},
        "options": {"queue": "q"},
        "enabled": False,
        "catchup_window": "1d1h",
        "jitter": 0.25,
        "start": "2026-11-30T23:00:00+00:00",
        "backoff": "10s..10m",
    }
    assert '"é": "ü"' in line


def test_labels_are_compared_and_exported() -> None:
    parsed = entry(labels="nightly,team:ops")
    assert parsed.changes({**stored(parsed), "labels": ("nightly", "team:ops")}, LATER) is None
    changes = parsed.changes({**stored(parsed), "labels": ("nightly",)}, LATER)
    assert changes is not None and changes["labels"] == ("nightly", "team:ops")
    assert export_fields({**stored(parsed), "labels": ("nightly", "team:ops")})["labels"] == [
        "nightly",
        "team:ops",
    ]


def test_a_row_broken_by_hand_still_exports_and_its_import_says_why() -> None:
    row = stored(entry(), args="[1,", timer="*/5 * * *")
    fields = export_fields(row)
    assert fields["args"] == "[1,"
    assert refusal(json.dumps(fields)).field == "timer"


# -------------------------------------------------------------------------- round trip

CRONS = ["*/5 * * * *", "30 2 * * *", "0 9 * * mon-fri", "@daily", "0 0 29 2 *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
SECONDS = st.integers(min_value=1, max_value=3650 * 86400)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@st.composite
def lines(draw: st.DrawFn) -> dict[str, Any]:
    """A line ``add`` would accept, with any mix of fields and policies."""
    offset = timedelta(seconds=draw(st.integers(min_value=-(10**8), max_value=10**8)))
    timer = draw(
        st.sampled_from(CRONS)
        | SECONDS.map(lambda s: f"every {s}s")
        | SECONDS.map(lambda s: f"every {s}s after completion")
        | st.integers(min_value=1, max_value=10**8).map(
            lambda s: f"at {(NOW + timedelta(seconds=s)).isoformat()}"
        )
    )
    line: dict[str, Any] = {
        "name": draw(st.text(min_size=1, max_size=20).filter(str.strip)),
        "task": QUICK,
        "timer": timer,
    }
    optional: dict[str, st.SearchStrategy[Any]] = {
        "timezone": st.sampled_from(ZONES),
        "anchor": st.just((NOW + offset).isoformat()),
        "args": st.lists(JSON_VALUES, max_size=3),
        "kwargs": st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3),
        "options": st.fixed_dictionaries({"priority": st.integers(0, 255)}),
        "queue": st.sampled_from(["reports", "ä"]),
        "enabled": st.booleans(),
        "overlap": st.sampled_from(["skip", "allow", "buffer_one", "replace"]),
        "catchup": st.sampled_from(["latest", "all", "none"]),
        "catchup_window": SECONDS | st.sampled_from(["1h", "none"]),
        "jitter": st.integers(0, 3650 * 86400) | st.floats(0, 100),
        "start": st.just((NOW - offset).isoformat()),
        "remaining": st.integers(1, 10**6),
        "max_failures": st.integers(1, 100) | st.just("none"),
        "max_attempts": st.integers(1, 100),
        "backoff": st.sampled_from(["30s,2m,10m", "10s..10m", "none"]),
        "expires": st.sampled_from(["next", "never", "90s", "1d"]),
    }
    for key in draw(st.sets(st.sampled_from(sorted(optional)))):
        line[key] = draw(optional[key])
    return line


@settings(max_examples=300, deadline=None)
@given(lines())
def test_an_exported_line_reads_back_into_the_same_row(line: dict[str, Any]) -> None:
    """export → import → export gives the same text, and the row counts as unchanged."""
    try:
        parsed = parse_line(json.dumps(line), 1, RULES)
    except ValidationError:
        # Bounds or a timer that leave nothing to come: add refuses those too.
        return
    row = stored(parsed)
    exported = export_line(row)
    again = parse_line(exported, 1, RULES)
    assert again.definition == parsed.definition
    assert again.enabled == parsed.enabled
    assert again.changes(row, LATER) is None
    assert export_line(stored(again)) == exported
