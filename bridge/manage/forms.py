"""A schedule's policies as a form shows and sends them: text as one would type it.

The dashboard's schedule form and the Django admin's both prefill their
policy fields from here and read them back through :func:`policy_fields`, so
that a field means the same in both: left empty when a schedule is created,
the policy takes its default; emptied when it is edited, the policy goes back
to its default (``catchup`` to ``latest``, not to ``none``, which is one of its
values).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.rules.policy import POLICY_NAMES, Policies


def _typed(value: Any, empty: str) -> str:
    """A policy's JSON value as one would type it (a list separated by commas); ``empty``
    for none."""
    if value is None or value == []:
        return empty
    return ",".join(value) if isinstance(value, list) else str(value)


#: Each policy's default as a form shows and sends it: an optional one as ``none``.
POLICY_DEFAULTS = {key: _typed(value, "none") for key, value in Policies().to_json().items()}


def policy_values(row: Any) -> dict[str, str]:
    """A schedule's policies as its form is prefilled with them ('' for one not set); none
    for a row whose policies cannot be read (changed by hand), whose form starts empty."""
    try:
        found = Policies.from_columns(row).to_json()
    except ValueError:
        return {}
    return {key: _typed(value, "") for key, value in found.items()}


def policy_fields(form: Mapping[str, str], editing: bool) -> dict[str, str]:
    """What a submitted form asks of the policies, as the API takes them: a field filled in
    is given as typed; one left empty is left out, or on an edit (when the form has it)
    set back to its default."""
    fields: dict[str, str] = {}
    for key in POLICY_NAMES:
        value = (form.get(key) or "").strip()
        if value:
            fields[key] = value
        elif editing and key in form:
            fields[key] = POLICY_DEFAULTS[key]
    return fields
