"""Tests of bridge.policy: the Policies value, its checks, and the maths of backoff and jitter.

Every keyword is written in each of the forms the API, the CLI and ``beat_schedule``
give it (text, numbers, datetimes, timedeltas); every refusal names the field, keeps
the value and says what is expected.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.policy import (
    POLICY_NAMES,
    Backoff,
    Catchup,
    Overlap,
    Policies,
    PolicyFields,
    jitter_offset,
)

START = datetime(2026, 12, 1, 8, tzinfo=UTC)
END = datetime(2027, 1, 1, tzinfo=UTC)

#: Every policy set to something other than its default.
FULL = Policies(
    overlap=Overlap.REPLACE,
    catchup=Catchup.ALL,
    catchup_window=timedelta(hours=1),
    jitter=timedelta(seconds=30),
    start=START,
    end=END,
    remaining=5,
    max_failures=3,
    max_attempts=4,
    backoff=Backoff((timedelta(seconds=10), timedelta(minutes=10)), exponential=True),
    expires="10m",
)


def assert_refusal(err: ValidationError, field: str, value: Any, expected: str) -> None:
    """The error names the field, keeps the value, and says what was expected."""
    assert (err.field, err.value) == (field, value)
    assert expected in err.expected
    assert str(err) == f"{field}: got {value!r}, expected {err.expected}"


# ----------------------------------------------------------------------- the value


def test_the_keywords_are_the_fields_of_policies() -> None:
    """PolicyFields, POLICY_NAMES and the Policies value name the same keywords."""
    assert tuple(PolicyFields.__annotations__) == POLICY_NAMES
    assert tuple(Policies().to_json()) == POLICY_NAMES


def test_defaults_of_a_new_schedule() -> None:
    """Nothing given: skip, latest, no bounds, no limits, one attempt, expiry at the next."""
    assert Policies.build({}) == Policies()
    assert Policies().columns() == {
        "overlap": "skip",
        "replace_with": "terminate",
        "catchup": "latest",
        "catchup_window": None,
        "jitter": 0.0,
        "start_at": None,
        "end_at": None,
        "remaining": None,
        "max_failures": None,
        "max_attempts": 1,
        "backoff": None,
        "expires": "next",
        "grace": None,
        "max_runtime": None,
        "on_overrun": "none",
        "alert_after": None,
        "recover_after": None,
        "keep_runs": None,
        "keep_days": None,
        "skip_calendars": None,
    }


def test_build_reads_the_user_forms() -> None:
    """Text as the CLI gives it becomes the normalised value."""
    given_text: dict[str, Any] = {
        "overlap": "replace",
        "replace_with": "terminate",
        "catchup": "all",
        "catchup_window": "1h",
        "jitter": "30s",
        "start": "2026-12-01T09:00:00+01:00",
        "end": "2027-01-01T00:00:00Z",
        "remaining": "5",
        "max_failures": " 3 ",
        "max_attempts": "4",
        "backoff": "10s .. 10m",
        "expires": "600s",
    }
    assert Policies.build(given_text) == FULL


def test_build_reads_the_python_forms() -> None:
    """Numbers of seconds, timedeltas, aware datetimes in any zone and lists work too."""
    policies = Policies.build(
        {
            "catchup_window": 3600,
            "jitter": timedelta(seconds=30),
            "start": START.astimezone(ZoneInfo("Asia/Tokyo")),
            "end": END,
            "remaining": 5,
            "backoff": ["30s", "2m", "10m"],
            "expires": timedelta(minutes=10),
        }
    )
    assert policies.catchup_window == timedelta(hours=1)
    assert policies.jitter == timedelta(seconds=30)
    assert policies.start == START
    assert policies.start.tzinfo == UTC
    assert policies.backoff == Backoff(
        (timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10))
    )
    assert policies.backoff.text == "30s,2m,10m"
    assert policies.expires == "10m"


def test_columns_and_from_columns_round_trip() -> None:
    """What is written to periodic_task reads back as the same value."""
    for policies in (Policies(), FULL):
        row = SimpleNamespace(**policies.columns())
        assert Policies.from_columns(row) == policies


def test_the_watchdog_and_retention_limits() -> None:
    """grace and max_runtime are positive durations; retention counts take 0 for no limit."""
    policies = Policies.build(
        {
            "grace": "5m",
            "max_runtime": 90,
            "on_overrun": "terminate",
            "keep_runs": "0",
            "keep_days": 7,
        }
    )
    assert (policies.grace, policies.max_runtime) == (timedelta(minutes=5), timedelta(seconds=90))
    assert (policies.on_overrun, policies.keep_runs, policies.keep_days) == ("terminate", 0, 7)
    assert Policies.from_columns(SimpleNamespace(**policies.columns())) == policies
    for field, value in (
        ("grace", "0s"),
        ("grace", -5),
        ("max_runtime", "soon"),
        ("on_overrun", "kill"),
        ("keep_runs", -1),
        ("keep_days", 3651),
        ("keep_days", "many"),
    ):
        with pytest.raises(ValidationError) as caught:
            Policies.build({field: value})
        assert (caught.value.field, caught.value.value) == (field, value)


def test_a_spent_countdown_reads_back() -> None:
    """Beat stores remaining 0 once the runs are spent; reading the row must not refuse it."""
    row = SimpleNamespace(**{**FULL.columns(), "remaining": 0})
    assert Policies.from_columns(row).remaining == 0
    with pytest.raises(ValidationError):
        Policies.build({"remaining": 0})


def test_to_json_is_the_user_form_and_builds_the_same_value() -> None:
    """to_json writes durations as text and times as ISO-8601 UTC; build reads it back."""
    assert FULL.to_json() == {
        "overlap": "replace",
        "replace_with": "terminate",
        "catchup": "all",
        "catchup_window": "1h",
        "jitter": "30s",
        "start": "2026-12-01T08:00:00+00:00",
        "end": "2027-01-01T00:00:00+00:00",
        "remaining": 5,
        "max_failures": 3,
        "max_attempts": 4,
        "backoff": "10s..10m",
        "expires": "10m",
        "grace": None,
        "max_runtime": None,
        "on_overrun": "none",
        "alert_after": None,
        "recover_after": None,
        "keep_runs": None,
        "keep_days": None,
        "skip_calendars": [],
    }
    assert Policies.build(FULL.to_json()) == FULL
    assert Policies.build(Policies().to_json()) == Policies()


def test_none_keeps_the_base_and_none_text_clears_it() -> None:
    """None leaves a value as it is (edit); 'none' clears an optional one."""
    kept = Policies.build({"end": None, "backoff": None, "overlap": None}, FULL)
    assert kept == FULL
    cleared = Policies.build(
        {
            "catchup_window": "none",
            "jitter": "none",
            "start": "None",
            "end": "",
            "remaining": "null",
            "max_failures": "none",
            "backoff": "none",
        },
        FULL,
    )
    assert cleared == Policies(
        overlap=FULL.overlap,
        catchup=FULL.catchup,
        max_attempts=FULL.max_attempts,
        expires=FULL.expires,
    )


# ------------------------------------------------------------------------ refusals

DURATION = "a duration such as '30s', '5m' or '1h30m'"
TIME = "an ISO-8601 time with a UTC offset"
COUNT = "a whole number from 1 to 2147483647"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("overlap", "sometimes", "one of skip|allow|buffer_one|buffer_all|replace"),
        ("overlap", "SKIP", "one of skip|allow|buffer_one|buffer_all|replace"),
        ("catchup", "most", "one of latest|all|none"),
        ("catchup_window", "soon", DURATION + " of at most 3650d or 'none'"),
        ("catchup_window", "3651d", DURATION + " of at most 3650d"),
        ("jitter", 1e18, DURATION + " of at most 3650d"),
        ("backoff", ",".join(["1s"] * 80), "at most 200 characters"),
        ("remaining", "\u00b2", COUNT),
        ("remaining", 99999999999999999999999, COUNT),
        ("remaining", "99999999999999999999999", COUNT),
        ("max_attempts", 2**31, COUNT),
        ("max_failures", "2147483648", COUNT),
        ("catchup_window", 0, DURATION),
        ("catchup_window", -5, DURATION),
        ("catchup_window", "0s", DURATION),
        ("catchup_window", float("nan"), DURATION),
        ("catchup_window", True, DURATION),
        ("jitter", "lots", DURATION),
        ("jitter", -1, DURATION),
        ("jitter", "-1s", DURATION),
        ("start", "tomorrow", TIME),
        ("start", "2026-12-01T09:00:00", TIME),
        ("start", 1767225600, TIME),
        ("end", "2026-13-01T00:00:00+00:00", TIME),
        ("remaining", 0, COUNT),
        ("remaining", "-1", COUNT),
        ("remaining", "many", COUNT),
        ("remaining", 1.5, COUNT),
        ("remaining", True, COUNT),
        ("max_failures", 0, COUNT),
        ("max_failures", "three", COUNT),
        ("max_attempts", "none", COUNT),
        ("max_attempts", 0, COUNT),
        ("backoff", "fast", "delays such as '30s,2m,10m', or '10s..10m'"),
        ("backoff", "1s..2s..3s", "delays such as '30s,2m,10m', or '10s..10m'"),
        ("backoff", "30s,,2m", "delays such as '30s,2m,10m', or '10s..10m'"),
        ("backoff", "10m..10s", "a first delay no longer than the cap"),
        ("backoff", 30, "delays such as '30s,2m,10m', or '10s..10m'"),
        ("expires", "later", "'next', 'never' or " + DURATION),
        ("expires", "none", "'next', 'never' or " + DURATION),
        ("expires", 0.5, "'next', 'never' or " + DURATION),
        ("expires", 0, "'next', 'never' or " + DURATION),
    ],
)
def test_each_bad_value_is_refused_naming_field_value_and_expectation(
    field: str, value: Any, expected: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Policies.build({field: value})
    assert caught.value.field == field
    if value == value:  # NaN never equals itself
        assert_refusal(caught.value, field, value, expected)
    assert expected in caught.value.expected


def test_a_naive_datetime_is_refused_and_shown_as_text() -> None:
    """Which instant a naive datetime means would be a guess."""
    with pytest.raises(ValidationError) as caught:
        Policies.build({"start": datetime(2026, 12, 1, 9)})
    assert_refusal(caught.value, "start", "2026-12-01T09:00:00", TIME)


@pytest.mark.parametrize(
    "given_bounds",
    [{"start": END, "end": START}, {"start": START, "end": START}],
)
def test_an_end_not_after_start_is_refused(given_bounds: dict[str, datetime]) -> None:
    with pytest.raises(ValidationError) as caught:
        Policies.build(given_bounds)
    assert_refusal(
        caught.value,
        "end",
        given_bounds["end"].isoformat(),
        f"a time after start ({given_bounds['start'].isoformat()})",
    )


def test_an_end_before_the_base_start_is_refused() -> None:
    """The bounds are checked together, whichever of them the change touches."""
    with pytest.raises(ValidationError) as caught:
        Policies.build({"end": "2026-11-01T00:00:00+00:00"}, FULL)
    assert caught.value.field == "end"


def test_an_unknown_keyword_is_refused_with_the_list() -> None:
    with pytest.raises(ValidationError) as caught:
        Policies.build({"overlap": "allow", "colour": "red"})
    assert_refusal(
        caught.value, "policy", "colour", "one of overlap, replace_with, catchup, catchup_window"
    )


@pytest.mark.parametrize(
    "column",
    ["overlap", "catchup", "jitter", "max_attempts", "backoff", "expires"],
)
def test_a_bad_stored_value_is_refused_when_read(column: str) -> None:
    """A value written straight into the table is refused, naming its policy."""
    row = SimpleNamespace(**{**Policies().columns(), column: "garbage"})
    with pytest.raises(ValidationError) as caught:
        Policies.from_columns(row)
    assert caught.value.field == column
    assert caught.value.value == "garbage"


# ------------------------------------------------------------------------- backoff


def delays(backoff: Backoff, count: int) -> list[timedelta]:
    return [backoff.delay(retry) for retry in range(1, count + 1)]


def test_a_list_backoff_repeats_its_last_delay() -> None:
    backoff = Backoff.parse("30s,2m,10m")
    assert delays(backoff, 5) == [timedelta(seconds=s) for s in (30, 120, 600, 600, 600)]


def test_an_exponential_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff.parse("10s..1m")
    assert delays(backoff, 5) == [timedelta(seconds=s) for s in (10, 20, 40, 60, 60)]
    assert backoff.delay(10_000) == timedelta(minutes=1)


def test_without_a_backoff_a_retry_is_at_once() -> None:
    assert Policies().retry_delay(3) == timedelta(0)
    assert FULL.retry_delay(2) == timedelta(seconds=20)


@given(
    first=st.integers(min_value=1, max_value=86_400),
    extra=st.integers(min_value=0, max_value=30 * 86_400),
    retries=st.lists(st.integers(min_value=1, max_value=5_000), min_size=2, max_size=10),
)
def test_exponential_delays_never_decrease_and_never_pass_the_cap(
    first: int, extra: int, retries: list[int]
) -> None:
    cap = timedelta(seconds=first + extra)
    backoff = Backoff((timedelta(seconds=first), cap), exponential=True)
    assert backoff.delay(1) == timedelta(seconds=first)
    ordered = [backoff.delay(retry) for retry in sorted(retries)]
    assert all(delay <= cap for delay in ordered)
    assert ordered == sorted(ordered)


@given(st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=6))
def test_a_backoff_list_survives_its_text(seconds: list[int]) -> None:
    """The stored text reads back as the same backoff."""
    backoff = Backoff(tuple(timedelta(seconds=s) for s in seconds))
    assert Backoff.parse(backoff.text) == backoff


# -------------------------------------------------------------------------- jitter

moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(
    schedule_id=st.integers(min_value=1, max_value=2**31),
    occurrence=moments,
    jitter=st.integers(min_value=1, max_value=86_400_000_000).map(
        lambda us: timedelta(microseconds=us)
    ),
    gap=st.one_of(
        st.none(),
        st.integers(min_value=1, max_value=7 * 86_400).map(lambda s: timedelta(seconds=s)),
    ),
)
def test_jitter_stays_below_its_bound_and_half_the_gap(
    schedule_id: int, occurrence: datetime, jitter: timedelta, gap: timedelta | None
) -> None:
    following = None if gap is None else occurrence + gap
    offset = jitter_offset(schedule_id, occurrence, jitter, following)
    assert timedelta(0) <= offset < jitter
    if gap is not None:
        assert offset < gap / 2
    # Every beat instance computes the same offset, whatever zone it writes the time in.
    paris = occurrence.astimezone(ZoneInfo("Europe/Paris"))
    assert jitter_offset(schedule_id, paris, jitter, following) == offset


def test_jitter_differs_between_occurrences_and_is_zero_without_jitter() -> None:
    """The offsets spread the occurrences; no jitter means no offset."""
    hour = timedelta(hours=1)
    offsets = {jitter_offset(7, START + k * hour, timedelta(minutes=5), None) for k in range(20)}
    assert len(offsets) > 10
    assert jitter_offset(7, START, timedelta(0), START + hour) == timedelta(0)


# ------------------------------------------------------------------------- expiry


@pytest.mark.parametrize(
    ("expires", "following", "seconds"),
    [
        ("next", START + timedelta(minutes=5), 300.0),
        ("next", START + timedelta(milliseconds=10), 1.0),
        ("next", None, None),
        ("never", START + timedelta(minutes=5), None),
        ("10m", START + timedelta(minutes=5), 600.0),
    ],
)
def test_expiry(expires: str, following: datetime | None, seconds: float | None) -> None:
    """next expires a run at the following occurrence (at least 1 s), never never does."""
    assert Policies(expires=expires).expiry(START, following) == seconds
