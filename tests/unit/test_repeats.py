"""The log's rule for a trouble that repeats: the first told, then one a window with a count."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.repeats import Repeats


def test_the_first_is_told_then_one_a_window_with_the_untold_counted() -> None:
    repeats = Repeats(window=60.0)
    assert repeats.tell("refused", 0.0) == 0
    assert [repeats.tell("refused", t) for t in (1.0, 30.0, 59.9)] == [None, None, None]
    assert repeats.tell("other", 10.0) == 0  # another kind is its own
    assert repeats.tell("refused", 60.0) == 3
    assert repeats.tell("refused", 61.0) is None
    assert repeats.tell("refused", 500.0) == 1


def test_the_kind_told_longest_ago_is_forgotten_first() -> None:
    repeats = Repeats(window=60.0, kinds=2)
    repeats.tell("a", 0.0)
    repeats.tell("b", 1.0)
    repeats.tell("c", 2.0)
    assert repeats.tell("a", 3.0) == 0  # forgotten: told again at once
    assert repeats.tell("c", 4.0) is None


@given(st.lists(st.floats(0, 10_000, allow_nan=False), min_size=1, max_size=200))
def test_every_repeat_is_told_or_counted_once(offsets: list[float]) -> None:
    repeats = Repeats(window=60.0)
    times = sorted(offsets)
    told = [repeats.tell("refused", t) for t in times]
    answers = [count for count in told if count is not None]
    last_untold = repeats.tell("refused", times[-1] + 61.0)
    assert last_untold is not None
    # Each repeat is either told or counted in the next line told: none lost, none twice.
    assert len(answers) + sum(answers) + last_untold == len(times)
    spoken = [t for t, count in zip(times, told, strict=True) if count is not None]
    assert all(b - a >= 60.0 for a, b in pairwise(spoken))
