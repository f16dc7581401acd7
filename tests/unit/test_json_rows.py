"""The JSON text a batch goes to MySQL and MariaDB as (``bridge.storage.sql.json_values``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.rules.kinds import RunStatus
from bridge.storage.sql import json_values

#: Text as a row may hold it: any character but a lone surrogate, which no store keeps.
texts = st.text(st.characters(blacklist_categories=("Cs",)))


@given(st.lists(st.tuples(st.integers(), texts, st.none() | st.booleans())))
def test_every_value_reads_back_as_it_was(rows: list[tuple[int, str, bool | None]]) -> None:
    assert json.loads(json_values("batch", rows)["batch"]) == [list(row) for row in rows]


def test_text_is_sent_as_it_is_not_escaped_to_ascii() -> None:
    # MariaDB's JSON_TABLE reads a character outside the BMP, escaped as two halves of a
    # surrogate pair, as nothing at all.
    sent = json_values("batch", [[1, "d\u00e9j\u00e0 \U0001f600"]])["batch"]
    assert "\U0001f600" in sent and "\\u" not in sent


def test_times_are_naive_utc_and_statuses_their_values() -> None:
    paris = timezone(timedelta(hours=1))
    at = datetime(2026, 3, 29, 2, 30, 0, 123456, tzinfo=paris)
    sent = json.loads(json_values("batch", [[at, RunStatus.SENT, None]])["batch"])
    assert sent == [["2026-03-29 01:30:00.123456", "SENT", None]]
    assert datetime.fromisoformat(sent[0][0]).replace(tzinfo=UTC) == at


def test_a_value_of_no_json_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no JSON form"):
        json_values("batch", [[object()]])
