"""Tests of the rule every surface applies to text and JSON before it writes: no NUL, no lone
UTF-16 surrogate, finite numbers, bounded nesting; and of the tolerant reading of values
that older releases stored before the rule.

The rule is stated once, here, against an oracle that asks the standard
library whether the value can be written as strict JSON in UTF-8: whatever
the value, :func:`json_input` takes it exactly when it can, and stores it
as :func:`dumps` always did.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules import paging
from bridge.rules.definition import check_note, check_task, check_timer, with_queue
from bridge.rules.policy import Policies
from bridge.rules.values import (
    JSON_DEPTH,
    answerable,
    dumps,
    json_input,
    json_problem,
    lookup_text,
    text_problem,
    whole_number,
)

#: Every code point, lone surrogates and NUL included.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
hostile_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included
    | any_text
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=10,
)


def strict_json(value: Any) -> bool:
    """The oracle: the value is strict JSON in UTF-8 and holds no NUL (JSON escapes a NUL as
    \\u0000, which PostgreSQL's text cannot hold once decoded)."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:
        return False
    return "\\u0000" not in json.dumps(value)


@given(any_text)
def test_text_is_clean_exactly_when_utf_8_holds_it_without_a_nul(text: str) -> None:
    try:
        text.encode("utf-8")
        encodes = True
    except UnicodeEncodeError:
        encodes = False
    assert (text_problem(text) is None) == (encodes and "\x00" not in text)


@given(any_text)
def test_a_lookup_takes_clean_text_and_refuses_the_rest_naming_the_field(text: str) -> None:
    if text_problem(text) is None:
        assert lookup_text("name", text) == text
    else:
        with pytest.raises(ValidationError) as caught:
            lookup_text("name", text)
        assert (caught.value.field, caught.value.value) == ("name", text)


@given(st.dictionaries(any_text, hostile_values, max_size=4))
def test_a_json_value_is_written_exactly_when_it_is_strict_json(value: dict[str, Any]) -> None:
    if strict_json(value):
        assert json_input("kwargs", value, dict, "a JSON object") == value
        # Taken as text too, and stored as dumps always stored it.
        assert dumps(json_input("kwargs", dumps(value), dict, "a JSON object")) == dumps(value)
    else:
        with pytest.raises(ValidationError) as caught:
            json_input("kwargs", value, dict, "a JSON object")
        assert (caught.value.field, caught.value.value) == ("kwargs", value)
        assert caught.value.expected.startswith("a JSON object of ")
        with pytest.raises(ValidationError) as refused_text:
            json_input("kwargs", dumps(value), dict, "a JSON object")
        assert (refused_text.value.field, refused_text.value.value) == ("kwargs", dumps(value))


@pytest.mark.parametrize(
    ("given_", "problem"),
    [
        ('{"a": NaN}', "finite numbers"),
        ('{"a": [Infinity]}', "finite numbers"),
        ('{"a": -Infinity}', "finite numbers"),
        ('{"a": "\\udfff"}', "lone UTF-16 surrogate"),
        ('{"\\ud800": 1}', "keys without a lone UTF-16 surrogate"),
        ('{"a": "x\\u0000"}', "NUL"),
        ({"a": float("nan")}, "finite numbers"),
        ({"a": {"b": "\udfff"}}, "lone UTF-16 surrogate"),
        ({1: "a"}, "text keys"),
        ({"a": 10**5000}, "4000 digits"),
        ({"a": object()}, "JSON-serialisable values"),
    ],
)
def test_each_problem_is_named_in_the_refusal(given_: Any, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem) as caught:
        json_input("kwargs", given_, dict, "a JSON object")
    assert caught.value.field == "kwargs"
    str(caught.value)  # the message itself can be written


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_is_bounded_and_a_deep_value_is_judged_without_running_out_of_stack() -> None:
    assert json_input("args", nested(JSON_DEPTH), list, "a JSON list") == nested(JSON_DEPTH)
    for depth in (JSON_DEPTH + 1, 100_000):
        with pytest.raises(ValidationError, match=f"nested at most {JSON_DEPTH} deep") as caught:
            json_input("args", nested(depth), list, "a JSON list")
        assert caught.value.value == f"<a value nested more than {JSON_DEPTH} deep>"
    deep_text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValidationError, match="nested at most"):
        json_input("args", deep_text, list, "a JSON list")


@given(hostile_values)
def test_any_stored_value_can_be_answered_as_strict_json(value: Any) -> None:
    """What older releases stored (NaN, lone surrogates) is read back: numbers that are not
    finite as null, and a surrogate as the escape JSON has for it."""
    answered = answerable(value)
    text = json.dumps(answered, ensure_ascii=True, allow_nan=False)  # never raises
    text.encode("ascii")
    if json_problem(value) is None:
        assert answered == value


@pytest.mark.parametrize("value", ["9" * 5000, "0" * 30 + "5", "1" * 20])
def test_a_whole_number_of_many_digits_is_refused_not_a_crash(value: str) -> None:
    if value.lstrip("0") == "5":
        assert whole_number("limit", value) == 5
        return
    with pytest.raises(ValidationError) as caught:
        whole_number("limit", value)
    assert caught.value.field == "limit"


def test_a_refusal_of_a_number_python_cannot_write_still_says_what_it_got() -> None:
    error = ValidationError("jitter", 10**5000, "a duration")
    assert str(error) == "jitter: got <a int too long to show>, expected a duration"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("jitter", float("nan")),
        ("jitter", float("inf")),
        ("jitter", "9" * 5000 + "s"),
        ("catchup_window", "\x00"),
        ("start", "\udfff"),
        ("max_failures", "9" * 5000),
    ],
)
def test_a_policy_refuses_what_is_not_a_finite_clean_value(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        Policies.build({field: value}, None)  # type: ignore[misc]
    assert caught.value.field == field


@pytest.mark.parametrize("text", ["a\x00b", "\udfff", "x\ud800y"])
def test_the_text_fields_refuse_a_nul_or_a_lone_surrogate(text: str) -> None:
    from datetime import UTC, datetime

    checks = [
        ("note", lambda: check_note(text)),
        ("task", lambda: check_task(text, None)),
        ("timer", lambda: check_timer(text, "UTC", datetime(2026, 1, 1, tzinfo=UTC))),
        ("queue", lambda: with_queue(None, text)),
    ]
    for field, check in checks:
        with pytest.raises(ValidationError) as caught:
            check()
        assert (caught.value.field, caught.value.value) == (field, text)


@pytest.mark.parametrize("key", [["a\x00"], ["\udfff"], [2**70]])
def test_a_cursor_that_no_row_can_match_is_refused(key: list[Any]) -> None:
    text = json.dumps(key)
    import base64

    cursor = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    kinds = (int,) if isinstance(key[0], int) else (str,)
    with pytest.raises(ValidationError) as caught:
        paging.decode(cursor, kinds)
    assert caught.value.field == "cursor"


def test_an_answered_number_that_is_not_finite_is_null() -> None:
    assert answerable({"a": [math.nan, math.inf, 1.5], "b": "x"}) == {
        "a": [None, None, 1.5],
        "b": "x",
    }
