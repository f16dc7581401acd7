"""Whole numbers and seconds: every value a column or Celery could not take is refused."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.values import INT_MAX, LONGEST, seconds, whole_number


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


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers())
def test_seconds_are_finite_and_within_the_longest_duration(value: float) -> None:
    if math.isfinite(value) and 0 <= value <= LONGEST.total_seconds():
        assert seconds("expires", value) == value
    else:
        with pytest.raises(ValidationError) as caught:
            seconds("expires", value)
        assert caught.value.field == "expires"
