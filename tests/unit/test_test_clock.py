"""The moved clock the unit tests run under a second and a third time (conftest.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.clock import next_offset_change
from tests.unit.conftest import moved_clock

WINTER = datetime(2027, 1, 10, 15, 30, tzinfo=UTC)


def test_the_next_change_of_offset_is_found_to_the_second() -> None:
    assert next_offset_change(ZoneInfo("Europe/Berlin"), WINTER) == datetime(
        2027, 3, 28, 1, 0, tzinfo=UTC
    )
    # Southern summer ends in April.
    assert next_offset_change(ZoneInfo("Australia/Sydney"), WINTER) == datetime(
        2027, 4, 3, 16, 0, tzinfo=UTC
    )


def test_a_zone_without_changes_is_refused() -> None:
    with pytest.raises(ValueError, match="UTC does not change"):
        next_offset_change(ZoneInfo("UTC"), WINTER)


def test_each_form_of_the_setting_names_an_instant() -> None:
    assert moved_clock("+366", WINTER) == WINTER + timedelta(days=366)
    assert moved_clock("dst:Europe/Berlin", WINTER) == datetime(2027, 3, 28, 0, 59, 58, tzinfo=UTC)
    assert moved_clock("2030-06-01T00:00:00+02:00", WINTER) == datetime(2030, 5, 31, 22, tzinfo=UTC)
    with pytest.raises(ValueError, match="no UTC offset"):
        moved_clock("2030-06-01T00:00:00", WINTER)
