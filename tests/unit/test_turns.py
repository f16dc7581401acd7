"""Background work takes its turns in beat's quiet, and goes ahead anyway when starved."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.turns import Turns, pause_after, put_off

MARGIN, STARVED_AFTER, BUDGET = 0.25, 60.0, 1.0


def turns() -> Turns:
    return Turns(MARGIN, STARVED_AFTER, BUDGET, quiet_seen=0.0)


#: Asks at increasing times, each with the quiet then left before beat's next tick.
ASKS = st.lists(
    st.tuples(st.floats(0.001, 5.0), st.floats(0.0, 2.0)), min_size=1, max_size=400
).map(
    lambda steps: [
        (sum(step for step, _ in steps[: i + 1]), quiet) for i, (_, quiet) in enumerate(steps)
    ]
)


@given(ASKS)
def test_quiet_enough_is_always_a_turn(asks: list[tuple[float, float]]) -> None:
    gate = turns()
    for at, quiet in asks:
        assert gate.may_start(at, quiet) or quiet < MARGIN


@given(ASKS)
def test_without_quiet_turns_come_one_budget_a_starved_while(
    asks: list[tuple[float, float]],
) -> None:
    """Turns taken without quiet fall in budgets that start a starved while after quiet."""
    gate = turns()
    last_quiet, budget_from = 0.0, None
    for at, quiet in asks:
        taken = gate.may_start(at, quiet)
        if quiet >= MARGIN:
            last_quiet = at
            continue
        if budget_from is not None and at < budget_from + BUDGET:
            assert taken
        elif at - last_quiet >= STARVED_AFTER:
            assert taken
            budget_from = last_quiet = at
        else:
            assert not taken


def test_a_beat_that_never_sleeps_still_gets_a_turn_each_starved_while() -> None:
    gate = turns()
    asks = [tenth / 10 for tenth in range(3000)]  # five minutes, asked every 0.1 s
    taken = [at for at in asks if gate.may_start(at, 0.0)]
    starts = [at for at in taken if round(at - 0.1, 1) not in taken]
    assert starts == [60.0, 120.0, 180.0, 240.0]
    assert all(any(s <= at < s + BUDGET for s in starts) for at in taken)


@given(
    st.floats(0.1, 600.0),
    st.floats(0.0, 3600.0),
    st.floats(0.001, 1.0, exclude_max=True),
    st.floats(1.0, 3600.0),
    st.floats(0.0, 1.0),
)
def test_a_pass_and_the_wait_after_it_keep_to_the_share_up_to_the_longest_pause(
    interval: float, took: float, share: float, at_most: float, allowance: float
) -> None:
    """What a pass takes beyond its allowance is at most the share of the pass and the
    pause after it, unless that would need a pause longer than the longest."""
    pause = pause_after(interval, took, share, at_most, allowance)
    counted = max(0.0, took - allowance)
    assert pause >= interval
    assert pause <= max(interval, at_most)
    if counted * (1 - share) <= share * at_most:  # a pause within the longest keeps the share
        assert counted <= share * (took + pause) * (1 + 1e-9)
    if counted * (1 - share) < 0.999 * share * interval:  # a cheap pass waits the interval
        assert pause == interval


@given(st.integers(0, 10**9), st.integers(0, 10**4), st.integers(1, 10**4))
def test_sweeps_wait_for_a_burst_at_most_their_limit(
    since: int, elapsed: int, at_most: int
) -> None:
    """Put off while the claims have been full for less than the limit, never after it,
    and never when the last claim was not full (whole seconds: exact sums)."""
    at = float(since + elapsed)
    assert put_off(float(since), at, float(at_most)) == (elapsed < at_most)
    assert not put_off(None, at, float(at_most))
