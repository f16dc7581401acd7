"""Tests of bridge.rules.calendars, and of the decisions that skip a schedule's calendars.

Every instant is fixed: a calendar is read on the wall clock of its zone, so the
tests pin instants on both sides of midnight and of a daylight-saving change.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.calendars import (
    SKIPPED_MAX,
    Calendar,
    CalendarKind,
    calendars_named,
    check_skipped,
    names_of,
    names_text,
    require_known,
)
from bridge.rules.decisions import NOTE_EXCLUDED, State, decide, forecast
from bridge.rules.policy import Overlap, Policies
from bridge.rules.timers import parse_timer

BERLIN = ZoneInfo("Europe/Berlin")
Z = ZoneInfo("UTC")


def at(text: str) -> datetime:
    """An instant written with its offset."""
    return datetime.fromisoformat(text)


def test_dates_are_whole_days_on_the_calendars_own_clock() -> None:
    holidays = Calendar.build("holidays", "dates", "2026-12-24, 2026-12-25", BERLIN)
    assert holidays.entries == ("2026-12-24", "2026-12-25")
    # 23:30 UTC on the 23rd is already the 24th in Berlin; 23:30 UTC on the 25th the 26th.
    assert holidays.excludes(at("2026-12-23T23:30:00+00:00"))
    assert holidays.excludes(at("2026-12-25T22:59:59+00:00"))
    assert not holidays.excludes(at("2026-12-25T23:00:00+00:00"))
    assert not holidays.excludes(at("2026-12-23T22:59:59+00:00"))


def test_ranges_of_days_include_both_ends_and_ranges_of_times_stop_before_the_end() -> None:
    days = Calendar.build("freeze", "ranges", ["2026-12-20/2026-12-22", "2027-01-06"], Z)
    assert days.excludes(at("2026-12-20T00:00:00+00:00"))
    assert days.excludes(at("2026-12-22T23:59:59+00:00"))
    assert not days.excludes(at("2026-12-23T00:00:00+00:00"))
    assert days.excludes(at("2027-01-06T12:00:00+00:00"))  # a lone date: that day
    window = Calendar.build("maintenance", "ranges", ["2026-12-01T02:00/2026-12-01T04:00"], BERLIN)
    assert not window.excludes(at("2026-12-01T00:59:59+00:00"))
    assert window.excludes(at("2026-12-01T01:00:00+00:00"))  # 02:00 in Berlin
    assert not window.excludes(at("2026-12-01T03:00:00+00:00"))  # 04:00: the end is out


def test_overlapping_ranges_are_read_as_one() -> None:
    spans = ["2026-12-01T00:00/2026-12-01T10:00", "2026-12-01T02:00/2026-12-01T03:00"]
    calendar = Calendar.build(
        "overlap", "ranges", [*spans, "2026-12-01T09:00/2026-12-01T12:00"], UTC
    )
    assert calendar.excludes(at("2026-12-01T11:00:00+00:00"))
    assert calendar.excludes(at("2026-12-01T05:00:00+00:00"))
    assert not calendar.excludes(at("2026-12-01T12:00:00+00:00"))


def test_a_cron_calendar_holds_the_minutes_its_expression_matches() -> None:
    christmas = Calendar.build("xmas", "cron", "* * 25 12 *", BERLIN)
    assert christmas.entries == ("* * 25 12 *",)
    assert christmas.excludes(at("2026-12-24T23:00:00+00:00"))  # midnight in Berlin
    assert not christmas.excludes(at("2026-12-24T22:59:00+00:00"))
    nights = Calendar.build("sunday-nights", "cron", "* 2-3 * * sun", Z)
    assert nights.excludes(at("2026-12-06T02:00:00+00:00"))
    assert nights.excludes(at("2026-12-06T03:59:59+00:00"))
    assert not nights.excludes(at("2026-12-06T04:00:00+00:00"))
    assert not nights.excludes(at("2026-12-07T02:30:00+00:00"))  # a Monday


@pytest.mark.parametrize(
    ("kind", "entries", "field"),
    [
        ("dates", "2026-13-01", "dates"),
        ("dates", "", "dates"),
        ("dates", ["2026-12-01", 5], "dates"),
        ("dates", "26-12-01", "dates"),
        ("ranges", "2026-12-02/2026-12-01", "ranges"),
        ("ranges", "2026-12-01T04:00/2026-12-01T04:00", "ranges"),
        ("ranges", "2026-12-01T02:00+01:00/2026-12-01T04:00+01:00", "ranges"),
        ("ranges", "2026-12-01/2026-12-02/2026-12-03", "ranges"),
        # The end of the last day there is would be after it.
        ("ranges", "9999-12-31/9999-12-31", "ranges"),
        ("ranges", ["2026-12-01"] * 2001, "ranges"),
        ("cron", "every 1h", "cron"),
        ("cron", "@daily", "cron"),
        ("cron", "* * * * * *", "cron"),
        ("cron", "celery * * * * *", "cron"),
        ("cron", 5, "cron"),
        ("weekly", "mon", "kind"),
    ],
)
def test_a_bad_calendar_is_refused_naming_its_field(kind: str, entries: object, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Calendar.build("bad", kind, entries, Z)
    assert refused.value.field == field


@pytest.mark.parametrize(
    "name", ["", "a,b", "-lead", "has space", "x" * 101, 7, "caf\u00e9", "none", "None"]
)
def test_a_bad_calendar_name_is_refused(name: object) -> None:
    with pytest.raises(ValidationError) as refused:
        Calendar.build(name, "dates", "2026-12-01", Z)
    assert refused.value.field == "name"


def test_the_calendars_a_schedule_skips_are_names_in_the_order_given() -> None:
    assert check_skipped("holidays, maintenance,holidays") == ("holidays", "maintenance")
    assert check_skipped(["b", "a"]) == ("b", "a")
    assert check_skipped("none") == check_skipped("") == check_skipped([]) == ()
    assert names_of(names_text(("b", "a"))) == ("b", "a")
    assert names_text(()) is None and names_of(None) == ()
    for bad in ("a b", ["ok", None], 3, [f"c{i}" for i in range(SKIPPED_MAX + 1)]):
        with pytest.raises(ValidationError) as refused:
            check_skipped(bad)
        assert refused.value.field == "skip_calendars"
    with pytest.raises(ValidationError, match="skip_calendars: got 'gone'"):
        require_known(["here", "gone"], {"here"})


def test_skip_calendars_is_a_policy_stored_as_names_separated_by_commas() -> None:
    policies = Policies.build({"skip_calendars": ["holidays", "maintenance"]})
    assert policies.columns()["skip_calendars"] == "holidays,maintenance"
    assert policies.to_json()["skip_calendars"] == ["holidays", "maintenance"]
    assert Policies.build({"skip_calendars": "none"}, policies).skip_calendars == ()
    assert Policies().columns()["skip_calendars"] is None


# -- the decisions ----------------------------------------------------------------------

TUESDAY = at("2026-12-22T08:00:00+00:00")  # 09:00 in Berlin
BUSINESS_DAYS = parse_timer("0 9 * * mon-fri", BERLIN)
HOLIDAYS = Calendar.build("holidays", "dates", ["2026-12-24", "2026-12-25"], BERLIN)


def state(
    timer: object = BUSINESS_DAYS, occurrence: datetime = TUESDAY, **policies: object
) -> State:
    return State(
        schedule_id=1,
        timer=timer,  # type: ignore[arg-type]
        policies=Policies.build(policies),
        next_occurrence=occurrence,
        nextrun=occurrence,
        calendars=(HOLIDAYS,),
    )


def test_an_occurrence_on_a_calendar_is_not_sent_and_is_counted_excluded() -> None:
    christmas_eve = at("2026-12-24T08:00:00+00:00")
    plan = decide(state(occurrence=christmas_eve), christmas_eve, [])
    assert plan.sends == [] and plan.excluded == 1 and plan.skipped == 0
    assert plan.next_occurrence == at("2026-12-25T08:00:00+00:00")
    # The day before is sent as always.
    plan = decide(state(), TUESDAY, [])
    assert [send.plan_time for send in plan.sends] == [TUESDAY] and plan.excluded == 0


def test_next_leaves_out_the_holidays_of_a_business_day_schedule_across_daylight_saving() -> None:
    # Good Friday and Easter Monday 2027 around the change to summer time (28 March).
    easter = Calendar.build("easter", "dates", ["2027-03-26", "2027-03-29"], BERLIN)
    wednesday = at("2027-03-24T08:00:00+00:00")
    schedule = replace(state(occurrence=wednesday), calendars=(HOLIDAYS, easter))
    runs = forecast(schedule, wednesday, wednesday - timedelta(minutes=1), 4).runs
    assert [run.occurrence for run in runs] == [
        at("2027-03-24T09:00:00+01:00"),
        at("2027-03-25T09:00:00+01:00"),
        at("2027-03-30T09:00:00+02:00"),
        at("2027-03-31T09:00:00+02:00"),
    ]


def test_a_forecast_whose_every_occurrence_is_excluded_says_so() -> None:
    always = Calendar.build("always", "cron", "* * * * *", Z)
    minutely = parse_timer("* * * * *", Z)
    start = at("2026-12-01T00:00:00+00:00")
    schedule = replace(state(minutely, start), calendars=(always,))
    outlook = forecast(schedule, start, start, 3)
    assert outlook.runs == [] and outlook.end == NOTE_EXCLUDED


@pytest.mark.parametrize("overlap", [Overlap.ALLOW, Overlap.SKIP])
def test_a_catch_up_counts_each_excluded_occurrence_once(overlap: Overlap) -> None:
    start = at("2026-12-01T00:00:00+00:00")
    every_10s = parse_timer("every 10s", Z, start)
    window = Calendar.build("window", "ranges", ["2026-12-01T00:00:15/2026-12-01T00:00:35"], Z)
    current = replace(state(every_10s, start, catchup="all", overlap=overlap), calendars=(window,))
    now = start + timedelta(seconds=55)  # 0, 10, 20, 30, 40, 50 are due; 20 and 30 excluded
    sent: list[datetime] = []
    excluded = 0
    for _ in range(10):
        plan = decide(current, now, [])
        sent += [send.plan_time for send in plan.sends]
        excluded += plan.excluded
        current = replace(current, next_occurrence=plan.next_occurrence, nextrun=now)
        if plan.next_occurrence is not None and plan.next_occurrence > now:
            break
    seconds = [int((plan_time - start).total_seconds()) for plan_time in sent]
    assert seconds == [0, 10, 40, 50] and excluded == 2


def test_catch_up_latest_sends_the_latest_occurrence_off_the_calendars() -> None:
    # Beat down from before Wednesday's run to Saturday: Wednesday is owed, Thursday and
    # Friday are holidays. The latest occurrence is Christmas Day, on the calendar: the
    # catch-up sends Wednesday's, and counts the holidays excluded, not missed.
    wednesday = at("2026-12-23T08:00:00+00:00")
    saturday = at("2026-12-26T10:00:00+00:00")
    plan = decide(state(occurrence=wednesday), saturday, [])
    assert [send.plan_time for send in plan.sends] == [wednesday]
    assert (plan.missed, plan.excluded) == (0, 2)
    assert plan.next_occurrence == at("2026-12-28T08:00:00+00:00")
    # From Tuesday: Tuesday is passed over (missed), Wednesday sent.
    plan = decide(state(occurrence=TUESDAY), saturday, [])
    assert [send.plan_time for send in plan.sends] == [wednesday]
    assert (plan.missed, plan.excluded) == (1, 2)
    # Only holidays owed: nothing is sent, nothing is missed.
    christmas_eve = at("2026-12-24T08:00:00+00:00")
    plan = decide(state(occurrence=christmas_eve), saturday, [])
    assert plan.sends == [] and (plan.missed, plan.excluded) == (0, 2)


def test_catch_up_none_and_a_window_miss_only_what_would_have_been_sent() -> None:
    saturday = at("2026-12-26T10:00:00+00:00")
    plan = decide(state(occurrence=TUESDAY, catchup="none"), saturday, [])
    assert plan.sends == [] and (plan.missed, plan.excluded) == (2, 2)
    # A window of a day from Saturday 10:00: Tuesday and Wednesday lie outside it, and
    # Thursday and Friday, inside it, are holidays.
    windowed = state(occurrence=TUESDAY, catchup="all", catchup_window="1d")
    plan = decide(windowed, saturday, [])
    assert plan.sends == [] and (plan.missed, plan.excluded) == (2, 2)


instants = st.datetimes(datetime(2026, 3, 1), datetime(2026, 3, 2)).map(
    lambda moment: moment.replace(microsecond=0, tzinfo=UTC)
)


@settings(deadline=None)  # a calendar built per example: the machine's load is no failure
@given(
    st.integers(min_value=1, max_value=600),
    instants,
    st.integers(min_value=0, max_value=7_200),
    st.lists(st.tuples(st.integers(0, 180), st.integers(1, 60)), max_size=4),
    st.sampled_from(["latest", "none"]),
)
def test_a_catch_up_accounts_for_every_occurrence_it_passes_over(
    every: int, start: datetime, down: int, gaps: list[tuple[int, int]], catchup: str
) -> None:
    """Each occurrence owed is sent, missed or excluded, exactly one of them; ``latest``
    sends the latest one off the calendars, ``none`` sends none."""
    timer = parse_timer(f"every {every}s", Z, start)
    ranges = [
        f"{start + timedelta(minutes=at_minute):%Y-%m-%dT%H:%M}/"
        f"{start + timedelta(minutes=at_minute + length):%Y-%m-%dT%H:%M}"
        for at_minute, length in gaps
    ]
    calendars = (Calendar.build("gaps", CalendarKind.RANGES, ranges, Z),) if ranges else ()
    current = replace(state(timer, start, catchup=catchup), calendars=calendars)
    now = start + timedelta(seconds=down)
    owed = [start + timedelta(seconds=every * i) for i in range(down // every + 1)]
    off = [plan for plan in owed if not any(c.excludes(plan) for c in calendars)]
    plan = decide(current, now, [])
    sent = [send.plan_time for send in plan.sends]
    assert len(sent) + plan.missed + plan.excluded == len(owed)
    assert plan.excluded == len(owed) - len(off)
    if len(owed) == 1:
        assert sent == off
    elif catchup == "latest":
        assert sent == off[-1:]
    else:
        assert sent == []
    assert plan.next_occurrence == owed[-1] + timedelta(seconds=every)


def test_a_schedule_naming_a_calendar_that_is_gone_is_refused() -> None:
    with pytest.raises(ValidationError, match="skip_calendars: got 'holidays'"):
        calendars_named(Policies.build({"skip_calendars": "holidays"}).skip_calendars, {})


# -- for all inputs -------------------------------------------------------------------

moments = st.datetimes(datetime(2026, 1, 1), datetime(2026, 1, 3))
minutes = moments.map(lambda moment: moment.replace(second=0, microsecond=0))
spans = st.lists(st.tuples(minutes, minutes).filter(lambda s: s[0] < s[1]), min_size=1, max_size=6)


@settings(deadline=None)  # a calendar built per example: the machine's load is no failure
@given(spans, moments)
def test_a_ranges_calendar_holds_a_time_exactly_when_a_range_does(
    ranges: list[tuple[datetime, datetime]], wall: datetime
) -> None:
    texts = [f"{start:%Y-%m-%dT%H:%M}/{end:%Y-%m-%dT%H:%M}" for start, end in ranges]
    calendar = Calendar.build("c", CalendarKind.RANGES, texts, Z)
    expected = any(start <= wall < end for start, end in ranges)
    assert calendar.excludes(wall.replace(tzinfo=UTC)) is expected
