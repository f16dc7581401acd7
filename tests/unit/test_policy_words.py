"""The sentences a schedule's page says of its policies."""

from __future__ import annotations

import pytest

from bridge.rules.policy import Catchup, OnOverrun, Overlap, Policies, ReplaceWith
from bridge.rules.words import policy_words


@pytest.mark.parametrize("overlap", list(Overlap))
@pytest.mark.parametrize("catchup", list(Catchup))
@pytest.mark.parametrize("replace_with", list(ReplaceWith))
@pytest.mark.parametrize("on_overrun", list(OnOverrun))
def test_every_policy_value_has_its_sentence(
    overlap: Overlap, catchup: Catchup, replace_with: ReplaceWith, on_overrun: OnOverrun
) -> None:
    """Each value of each policy is said, so no schedule's page fails for lack of words."""
    policies = Policies.build(
        {
            "overlap": overlap.value,
            "catchup": catchup.value,
            "replace_with": replace_with.value,
            "on_overrun": on_overrun.value,
            "max_runtime": "1m",
        },
        None,
    )
    sentences = policy_words(policies)
    assert len(sentences) >= 3 and all(sentence.endswith(".") for sentence in sentences)


def test_the_calendars_a_schedule_skips_are_named() -> None:
    policies = Policies.build({"skip_calendars": ["holidays", "freeze"]}, None)
    assert "No occurrence on the calendar(s) holidays, freeze (each counted as excluded)." in (
        policy_words(policies)
    )
