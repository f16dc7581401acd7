"""A schedule's policies as the dashboard's and the Django admin's forms show and send them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bridge.manage.forms import policy_fields, policy_values
from bridge.rules.policy import POLICY_NAMES, Policies


def row(policies: Policies, **columns: Any) -> SimpleNamespace:
    """A schedule's row as the views give it: its policy columns as attributes."""
    return SimpleNamespace(**{**policies.columns(), **columns})


TUNED = {
    "overlap": "allow",
    "catchup": "all",
    "catchup_window": "2h",
    "jitter": "30s",
    "max_attempts": "3",
    "backoff": "30s,2m",
    "expires": "10m",
    "grace": "5m",
    "on_overrun": "revoke",
    "keep_runs": "50",
}


def test_a_form_prefilled_and_sent_back_unchanged_asks_for_the_same_policies() -> None:
    policies = Policies.build(TUNED)
    shown = policy_values(row(policies))
    assert set(shown) == set(POLICY_NAMES)
    assert shown["backoff"] == "30s,2m" and shown["start"] == ""
    assert Policies.build(policy_fields(shown, editing=True), base=policies) == policies


def test_a_field_left_empty_is_left_out_when_creating() -> None:
    form = {**dict.fromkeys(POLICY_NAMES, ""), "overlap": " allow ", "jitter": ""}
    assert policy_fields(form, editing=False) == {"overlap": "allow"}


def test_a_field_emptied_on_an_edit_goes_back_to_its_default() -> None:
    policies = Policies.build(TUNED)
    emptied = {**policy_values(row(policies)), "catchup": "", "backoff": " ", "overlap": ""}
    sent = policy_fields(emptied, editing=True)
    # catch-up goes back to `latest`, not to `none`, which is one of its values
    assert (sent["catchup"], sent["backoff"], sent["overlap"]) == ("latest", "none", "skip")
    rebuilt = Policies.build(sent, base=policies)
    assert (rebuilt.catchup, rebuilt.backoff, rebuilt.overlap) == (
        Policies().catchup,
        None,
        Policies().overlap,
    )


def test_a_field_the_form_does_not_have_is_left_alone() -> None:
    assert policy_fields({"overlap": ""}, editing=True) == {"overlap": "skip"}


def test_policies_a_row_cannot_give_leave_the_form_empty() -> None:
    assert policy_values(row(Policies(), overlap="sometimes")) == {}
