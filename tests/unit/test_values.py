"""Tests of bridge.rules.values, the checks every surface shares.

Whole numbers and seconds: every value a column or Celery could not take is
refused. Instants: one moment in UTC however it was written, never a naive
time. JSON: the text a user gave or its decoded value alike, stored in one
stable form.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.values import (
    INSTANT_EXPECTED,
    INT_MAX,
    LONGEST,
    aware,
    dumps,
    flag,
    instant,
    json_or_text,
    json_value,
    required_instant,
    seconds,
    whole_number,
)


@given(st.integers())
def test_a_whole_number_is_taken_exactly_when_an_integer_column_holds_it(value: int) -> None:
    if 1 <= value <= INT_MAX:
        assert whole_number("n", value) == value
        assert whole_number("n", str(value)) == value
    else:
        with pytest.raises(ValidationError) as caught:
            whole_number("n", value)
        assert (caught.value.field, caught.value.value) == ("n", value)
        assert caught.value.expected == "a whole number from 1 to 2147483647"


@given(st.integers(min_value=-5, max_value=5), st.integers(min_value=0, max_value=10))
def test_a_whole_number_respects_its_own_range(value: int, high: int) -> None:
    if 0 <= value <= high:
        assert whole_number("count", value, 0, high) == value
    else:
        with pytest.raises(ValidationError, match=f"from 0 to {high}"):
            whole_number("count", value, 0, high)


@pytest.mark.parametrize("value", [True, 1.0, "1.5", "", " ", "٣", "1e3", None, [1]])
def test_anything_but_an_integer_or_its_digits_is_refused(value: Any) -> None:
    with pytest.raises(ValidationError):
        whole_number("n", value)


@pytest.mark.parametrize("value", ["yes", "no", "true", "false", 1, 0, None, "on", [], {}])
def test_a_flag_is_true_or_false_and_nothing_python_finds_true(value: Any) -> None:
    """One rule for every yes-or-no field: ``"no"`` is refused, never read as yes."""
    with pytest.raises(ValidationError) as caught:
        flag("enabled", value)
    assert (caught.value.field, caught.value.value) == ("enabled", value)
    assert flag("enabled", True) is True and flag("enabled", False) is False


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers())
def test_seconds_are_finite_and_within_the_longest_duration(value: float) -> None:
    if math.isfinite(value) and 0 <= value <= LONGEST.total_seconds():
        assert seconds("expires", value) == value
    else:
        with pytest.raises(ValidationError) as caught:
            seconds("expires", value)
        assert caught.value.field == "expires"


# ------------------------------------------------------------------------ instants

aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
)


@given(aware_datetimes)
def test_an_instant_is_the_same_moment_in_utc_given_as_a_datetime_or_as_its_text(
    moment: datetime,
) -> None:
    in_utc = moment.astimezone(UTC)
    for given_as in (moment, moment.isoformat(), f"  {moment.isoformat()} "):
        taken = instant("start", given_as)
        assert taken == in_utc
        assert taken is not None and taken.tzinfo is UTC
    assert aware("start", moment) == in_utc
    assert aware("start", moment).tzinfo is UTC


@given(st.datetimes())
def test_a_time_without_an_offset_is_refused_since_its_zone_cannot_be_known(
    naive: datetime,
) -> None:
    for given_as in (naive, naive.isoformat()):
        with pytest.raises(ValidationError) as caught:
            instant("start", given_as)
        assert caught.value.field == "start"
        assert caught.value.value == naive.isoformat()
        assert caught.value.expected == INSTANT_EXPECTED
    with pytest.raises(ValidationError, match="a time with a UTC offset"):
        aware("start", naive)


@pytest.mark.parametrize("word", ["none", "None", " null ", ""])
def test_an_optional_instant_is_cleared_by_a_word_a_required_one_is_not(word: str) -> None:
    assert instant("end", word, optional=True) is None
    with pytest.raises(ValidationError) as caught:
        instant("end", word)
    assert caught.value.expected == INSTANT_EXPECTED
    with pytest.raises(ValidationError) as caught:
        required_instant("end", word)
    assert caught.value.field == "end"


@pytest.mark.parametrize("value", ["tomorrow", "2026-13-01T00:00:00+00:00", 1700000000, None])
def test_what_is_not_a_time_is_refused_repeating_the_value(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        instant("start", value, optional=True)
    assert caught.value.value == value
    assert caught.value.expected == INSTANT_EXPECTED + ", or 'none'"


@pytest.mark.parametrize("value", ["2026-12-01T09:00:00+01:00", 1700000000, None])
def test_the_python_api_takes_a_datetime_object_only(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        aware("start", value)
    assert (caught.value.field, caught.value.value) == ("start", value)
    assert caught.value.expected == "a datetime with a UTC offset"


# ---------------------------------------------------------------------------- JSON

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
json_lists = st.lists(json_values, max_size=5)


@given(json_objects)
def test_equal_values_are_stored_as_the_same_text(value: dict[str, Any]) -> None:
    """Whatever order the keys came in, so a text comparison finds no change."""
    shuffled = dict(reversed(list(value.items())))
    assert dumps(shuffled) == dumps(value)
    assert json.loads(dumps(value)) == value
    assert dumps(json.loads(dumps(value))) == dumps(value)


def test_the_stored_form_is_compact_with_sorted_keys() -> None:
    assert dumps({"b": [1, 2], "a": {"d": None, "c": "é"}}) == (
        '{"a":{"c":"\\u00e9","d":null},"b":[1,2]}'
    )


@given(json_objects, json_lists)
def test_json_text_or_its_decoded_value_is_taken_alike(
    obj: dict[str, Any], items: list[Any]
) -> None:
    assert json_value("kwargs", dumps(obj), dict, "a JSON object") == obj
    assert json_value("kwargs", obj, dict, "a JSON object") == obj
    assert json_value("args", dumps(items), list, "a JSON list") == items
    assert json_value("args", tuple(items), list, "a JSON list") == items


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("{not json", dict, "a JSON object"),
        ("[1, 2]", dict, "a JSON object"),
        ('{"x": 1}', list, "a JSON list"),
        ("", list, "a JSON list"),
        (3, list, "a JSON list"),
        ((1, 2), dict, "a JSON object"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_as_the_user_gave_it(
    value: Any, kind: type, expected: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        json_value("field", value, kind, expected)
    assert (caught.value.field, caught.value.value, caught.value.expected) == (
        "field",
        value,
        expected,
    )


def test_a_value_json_cannot_hold_is_refused() -> None:
    for value in ({"when": datetime(2026, 1, 1)}, {"id": {1, 2}}, [object()]):
        kind = list if isinstance(value, list) else dict
        with pytest.raises(ValidationError, match="JSON-serialisable") as caught:
            json_value("kwargs", value, kind, "a JSON value")
        assert caught.value.value is value


@given(json_values)
def test_a_stored_column_is_shown_decoded(value: Any) -> None:
    assert json_or_text(dumps(value)) == value


@pytest.mark.parametrize("text", ["{not json", "", "[1,", "undefined"])
def test_a_malformed_stored_column_is_shown_as_its_text(text: str) -> None:
    """A row written straight into the table can still be listed and shown."""
    assert json_or_text(text) == text
