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
COLUMNS = ("id", "note", "flag")


@given(st.lists(st.tuples(st.integers(), texts, st.none() | st.booleans())))
def test_every_value_reads_back_under_its_column(rows: list[tuple[int, str, bool | None]]) -> None:
    sent = json.loads(json_values("batch", COLUMNS, rows)["batch"])
    assert [[row.get(column) for column in COLUMNS] for row in sent] == [list(r) for r in rows]


def test_a_null_is_left_out_not_written_as_json_null() -> None:
    # MySQL before 8.0.21 stores a JSON null as the text 'null' in a text column.
    sent = json_values("batch", COLUMNS, [[1, None, None]])["batch"]
    assert json.loads(sent) == [{"id": 1}] and "null" not in sent


def test_text_is_sent_as_it_is_not_escaped_to_ascii() -> None:
    # MariaDB's JSON_TABLE reads a character outside the BMP, escaped as two halves of a
    # surrogate pair, as nothing at all.
    sent = json_values("batch", COLUMNS, [[1, "d\u00e9j\u00e0 \U0001f600", True]])["batch"]
    assert "\U0001f600" in sent and "\\u" not in sent


def test_times_are_naive_utc_and_statuses_their_values() -> None:
    paris = timezone(timedelta(hours=1))
    at = datetime(2026, 3, 29, 2, 30, 0, 123456, tzinfo=paris)
    sent = json.loads(json_values("batch", ("at", "status"), [[at, RunStatus.SENT]])["batch"])
    assert sent == [{"at": "2026-03-29 01:30:00.123456", "status": "SENT"}]
    assert datetime.fromisoformat(sent[0]["at"]).replace(tzinfo=UTC) == at


def test_a_naive_time_or_a_value_of_no_json_form_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        json_values("batch", ("at",), [[datetime(2026, 1, 1)]])
    with pytest.raises(TypeError, match="no JSON form"):
        json_values("batch", ("x",), [[object()]])
