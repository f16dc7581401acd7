"""Tests of the checks every schedule definition goes through, and of their refusals.

Covers bridge.rules.definition (definitions and their first occurrence), bridge.config
(settings lookup), bridge.celery.beat_schedule.timer_text (``beat_schedule`` values into
timer texts) and bridge.rules.runs (run ids, payloads and message options).
Each refusal must name the field and repeat the value, so a user can find and fix it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar
from hypothesis import given
from hypothesis import strategies as st

from bridge.celery.beat_schedule import timer_text
from bridge.config import DEFAULT_DATABASE_URL, Settings
from bridge.errors import ValidationError
from bridge.rules.definition import (
    NAME_MAX,
    Definition,
    build_definition,
    check_name,
    check_timezone,
    next_in_bounds,
    require_occurrence,
    stored_timezone,
)
from bridge.rules.options import check_options
from bridge.rules.policy import Overlap, Policies
from bridge.rules.runs import Payload, expires_at, ids_of_occurrence, run_id_for
from bridge.rules.timers import Timer, parse_timer

ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
KNOWN = frozenset({"workers.app.quick", "workers.app.slow"})


def assert_refusal(err: ValidationError, field: str, value: Any) -> None:
    """The error names the field, keeps the value and repeats both in its message."""
    assert err.field == field
    assert err.value == value
    assert field in str(err)
    assert repr(value) in str(err)


def build(**overrides: Any) -> Definition:
    """A valid definition with some fields overridden."""
    fields: dict[str, Any] = {
        "task": "workers.app.quick",
        "timer": "every 30s",
        "timezone": "UTC",
        "anchor": ANCHOR,
        "known_tasks": KNOWN,
    }
    fields.update(overrides)
    definition, _timer = build_definition(**fields)
    return definition


# ------------------------------------------------------------------ build_definition


def test_build_definition_defaults_are_empty_call_and_default_policies() -> None:
    """Without args, kwargs, options or policies the stored call is empty, policies default."""
    definition = build()
    assert definition == Definition(
        task="workers.app.quick",
        timer="every 30s",
        timezone="UTC",
        args="[]",
        kwargs="{}",
        options="{}",
        policies=Policies(),
    )
    assert definition.policies.overlap is Overlap.SKIP


def test_build_definition_normalises_what_it_stores() -> None:
    """Timer, JSON and zone are stored in one canonical spelling."""
    definition, timer = build_definition(
        task="workers.app.slow",
        timer="every 90s",
        timezone="Europe/Paris",
        anchor=ANCHOR,
        args=(1, "two"),
        kwargs='{"b": 2, "a": 1}',
        options={"queue": "reports", "priority": 3},
        policies={"overlap": "allow", "jitter": "1m", "end": "2027-01-01T01:00:00+01:00"},
        known_tasks=KNOWN,
    )
    assert definition.columns() == {
        "task": "workers.app.slow",
        "timer": "every 1m30s",
        "timezone": "Europe/Paris",
        "args": '[1,"two"]',
        "kwargs": '{"a":1,"b":2}',
        "options": '{"priority":3,"queue":"reports"}',
        "signature": None,
        "overlap": "allow",
        "replace_with": "terminate",
        "catchup": "latest",
        "catchup_window": None,
        "jitter": 60.0,
        "start_at": None,
        "end_at": datetime(2027, 1, 1, tzinfo=UTC),
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
    assert timer.text == "every 1m30s"
    assert timer.next_after(ANCHOR) == ANCHOR + timedelta(seconds=90)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("  */5   *  * * *  ", "*/5 * * * *"),
        ("@midnight", "@daily"),
        ("0 9 * * MON-FRI", "0 9 * * mon-fri"),
        ("every 3600s", "every 1h"),
        ("at 2026-12-01T09:00:00+01:00", "at 2026-12-01T08:00:00+00:00"),
    ],
)
def test_build_definition_stores_the_canonical_timer(given: str, stored: str) -> None:
    """Equal timers are stored as equal texts, so an unchanged definition compares equal."""
    assert build(timer=given).timer == stored


def test_build_definition_accepts_any_task_without_a_known_list() -> None:
    """known_tasks=None (allow_unknown_task) accepts a task only the workers import."""
    assert build(task="elsewhere.task", known_tasks=None).task == "elsewhere.task"


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"timezone": "../../etc/passwd"}, "timezone", "../../etc/passwd"),
        *(
            ({"timezone": zone}, "timezone", zone)
            for zone in (
                "",
                "localtime",
                "Factory",
                "posixrules",
                "posix/Europe/Paris",
                "right/UTC",
                "RIGHT/UTC",
            )
        ),
        ({"timer": "every 5x"}, "timer", "every 5x"),
        ({"timer": "61 * * * *"}, "timer", "61 * * * *"),
        ({"timer": "* * * *"}, "timer", "* * * *"),
        ({"timer": 30}, "timer", 30),
        ({"task": "no.such.task"}, "task", "no.such.task"),
        ({"task": "  "}, "task", "  "),
        ({"task": None}, "task", None),
        ({"task": "t" * 201}, "task", "t" * 201),
        ({"timer": "every 1h" + " " * 200}, "timer", "every 1h" + " " * 200),
        ({"args": "not json"}, "args", "not json"),
        ({"args": {"a": 1}}, "args", {"a": 1}),
        ({"kwargs": [1]}, "kwargs", [1]),
        ({"kwargs": "{bad"}, "kwargs", "{bad"),
        ({"options": {"bogus": 1}}, "options", "bogus"),
        ({"options": {"headers": [1]}}, "options.headers", [1]),
        ({"policies": {"overlap": "sometimes"}}, "overlap", "sometimes"),
        ({"policies": {"max_attempts": 0}}, "max_attempts", 0),
        ({"policies": {"colour": "red"}}, "policy", "colour"),
    ],
)
def test_build_definition_refusals_name_field_and_value(
    overrides: dict[str, Any], field: str, value: Any
) -> None:
    """Each bad field is refused with its name and the value given."""
    with pytest.raises(ValidationError) as caught:
        build(**overrides)
    assert_refusal(caught.value, field, value)


def test_a_stored_zone_an_older_release_took_still_reads() -> None:
    """Only a new definition is held to the IANA zones: a row written before still fires."""
    assert stored_timezone("posix/Europe/Paris") == "posix/Europe/Paris"
    assert check_timezone("Europe/Paris") == "Europe/Paris"
    with pytest.raises(ValidationError) as caught:
        check_timezone("posix/Europe/Paris")
    assert "not localtime, Factory, or a posix/ or right/ copy" in str(caught.value)


def test_build_definition_refuses_values_json_cannot_hold() -> None:
    """A value that cannot be stored as JSON is refused, not written as garbage."""
    bad = [datetime(2026, 1, 1)]
    with pytest.raises(ValidationError) as caught:
        build(args=bad)
    assert_refusal(caught.value, "args", bad)
    assert "JSON-serialisable" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "text"), [("args", '{"a":1}'), ("kwargs", "[1]"), ("options", "[]")]
)
def test_build_definition_refusal_repeats_json_text_as_given(field: str, text: str) -> None:
    """A JSON text of the wrong kind is repeated as typed, not as a Python repr."""
    with pytest.raises(ValidationError) as caught:
        build(**{field: text})
    assert_refusal(caught.value, field, text)


def test_build_definition_applies_policies_on_top_of_a_base() -> None:
    """Keywords given replace the base's values; None and absent keywords keep them."""
    base = Policies.build({"overlap": "allow", "remaining": 5})
    definition = build(policies={"catchup": "all", "overlap": None}, base=base)
    assert definition.policies == Policies.build(
        {"overlap": "allow", "remaining": 5, "catchup": "all"}
    )


def test_new_row_starts_both_cursors_at_the_first_occurrence() -> None:
    """nextrun and next_occurrence begin equal, the breaker at zero."""
    first = ANCHOR + timedelta(seconds=30)
    row = build().new_row("n", anchor=ANCHOR, first=first, enabled=True, source="api", now=ANCHOR)
    assert (row["next_occurrence"], row["nextrun"], row["failure_streak"]) == (first, first, 0)
    assert row["overlap"] == "skip"


# ------------------------------------------------------------------ first occurrences

HOURLY = parse_timer("@hourly", "UTC")
NOW = datetime(2026, 6, 1, 10, 20, tzinfo=UTC)


def bounds(start: datetime | None = None, end: datetime | None = None) -> Policies:
    return Policies.build({"start": start or "none", "end": end or "none"})


@pytest.mark.parametrize(
    ("start", "end", "first"),
    [
        (None, None, datetime(2026, 6, 1, 11, tzinfo=UTC)),
        # A start in the past changes nothing.
        (datetime(2026, 1, 1, tzinfo=UTC), None, datetime(2026, 6, 1, 11, tzinfo=UTC)),
        # A start exactly on an occurrence includes it.
        (datetime(2026, 6, 2, 9, tzinfo=UTC), None, datetime(2026, 6, 2, 9, tzinfo=UTC)),
        # A start between occurrences moves to the next one.
        (datetime(2026, 6, 2, 9, 1, tzinfo=UTC), None, datetime(2026, 6, 2, 10, tzinfo=UTC)),
        # An end exactly on the first occurrence includes it.
        (None, datetime(2026, 6, 1, 11, tzinfo=UTC), datetime(2026, 6, 1, 11, tzinfo=UTC)),
        (None, datetime(2026, 6, 1, 10, 59, tzinfo=UTC), None),
        (datetime(2026, 6, 2, 9, 1, tzinfo=UTC), datetime(2026, 6, 2, 9, 59, tzinfo=UTC), None),
    ],
)
def test_next_in_bounds(
    start: datetime | None, end: datetime | None, first: datetime | None
) -> None:
    """The first occurrence after now that is at or after start and at or before end."""
    assert next_in_bounds(HOURLY, bounds(start, end), NOW) == first


@pytest.mark.parametrize(
    ("timer", "policies", "field", "value"),
    [
        (
            parse_timer("at 2026-01-01T00:00:00+00:00"),
            bounds(),
            "timer",
            "at 2026-01-01T00:00:00+00:00",
        ),
        (
            parse_timer("at 2026-07-01T00:00:00+00:00"),
            bounds(start=datetime(2026, 8, 1, tzinfo=UTC)),
            "start",
            "2026-08-01T00:00:00+00:00",
        ),
        (
            HOURLY,
            bounds(end=datetime(2026, 6, 1, 10, 30, tzinfo=UTC)),
            "end",
            "2026-06-01T10:30:00+00:00",
        ),
    ],
)
def test_require_occurrence_names_what_leaves_none(
    timer: Timer, policies: Policies, field: str, value: str
) -> None:
    """The timer, the start or the end is blamed, whichever removes the last occurrence."""
    with pytest.raises(ValidationError) as caught:
        require_occurrence(timer, policies, NOW, timer.text)
    assert_refusal(caught.value, field, value)
    if field == "end":  # what would be accepted: the first occurrence
        assert "2026-06-01T11:00:00+00:00" in caught.value.expected


@pytest.mark.parametrize(
    "name",
    [
        "",
        "   ",
        None,
        "x" * (NAME_MAX + 1),
        "two\nlines",
        "tab\there",
        "bell\x07",
        " padded",
        "padded ",
        "zero\u200bwidth",
        "line\u2028separator",
    ],
)
def test_check_name_refusals(name: Any) -> None:
    """Names are text of bounded length that a table row and a shell show as they are."""
    with pytest.raises(ValidationError) as caught:
        check_name(name)
    assert_refusal(caught.value, "name", name)


@given(st.text(min_size=1, max_size=NAME_MAX))
def test_a_name_is_taken_as_it_is_or_refused(name: str) -> None:
    """Whatever is accepted prints on one line, with nothing to trim, and is stored unchanged."""
    try:
        accepted = check_name(name)
    except ValidationError as exc:
        refused = exc
    else:
        refused = None
    if refused is not None:
        assert refused.field == "name"
        return
    assert accepted == name == name.strip()
    assert name.splitlines() == [name]
    assert all(char.isprintable() or char.isspace() for char in name)


def test_check_name_accepts_the_longest_name() -> None:
    """A name of exactly NAME_MAX characters fits the column."""
    assert check_name("x" * NAME_MAX) == "x" * NAME_MAX


# --------------------------------------------------------------------------- Settings


def make_app(**conf: Any) -> Celery:
    app = Celery("settings-test", set_as_current=False)
    app.conf.update(conf)
    return app


def test_settings_defaults_without_app_or_environment() -> None:
    """Nothing configured: the embedded SQLite quick-start defaults."""
    assert Settings.from_app(None, environ={}) == Settings()
    assert Settings().database_url == DEFAULT_DATABASE_URL == "sqlite:///bridge.db"


def test_settings_app_conf_beats_environment_beats_default() -> None:
    """bridge_* in app.conf wins over BRIDGE_* in the environment, which wins over defaults."""
    app = make_app(bridge_lease_seconds=12.5, bridge_database_url="sqlite:///conf.db")
    environ = {
        "BRIDGE_LEASE_SECONDS": "40",
        "BRIDGE_DATABASE_URL": "sqlite:///env.db",
        "BRIDGE_BATCH_SIZE": "7",
        "BRIDGE_RECORD_ALL_TASKS": "yes",
    }
    settings = Settings.from_app(app, environ=environ)
    assert settings.lease_seconds == 12.5
    assert settings.database_url == "sqlite:///conf.db"
    assert settings.batch_size == 7
    assert settings.record_all_tasks is True
    assert settings.poll_interval == Settings().poll_interval


def test_settings_parses_text_values_from_app_conf() -> None:
    """Text in app.conf is parsed like the environment's."""
    app = make_app(bridge_batch_size="25", bridge_sync_beat_schedule="off")
    settings = Settings.from_app(app, environ={})
    assert settings.batch_size == 25
    assert settings.sync_beat_schedule is False


@pytest.mark.parametrize(
    ("conf", "environ", "field", "value", "expected"),
    [
        ({}, {"BRIDGE_BATCH_SIZE": "many"}, "bridge_batch_size", "many", "a whole number"),
        ({}, {"BRIDGE_LEASE_SECONDS": "soon"}, "bridge_lease_seconds", "soon", "a number"),
        (
            {},
            {"BRIDGE_RECORD_ALL_TASKS": "maybe"},
            "bridge_record_all_tasks",
            "maybe",
            "true or false",
        ),
        ({"bridge_stale_run_seconds": "1h"}, {}, "bridge_stale_run_seconds", "1h", "a number"),
        (
            {"bridge_recorder_retries": "2.5"},
            {},
            "bridge_recorder_retries",
            "2.5",
            "a whole number",
        ),
    ],
)
def test_settings_refuse_a_bad_value_naming_the_setting(
    conf: dict[str, Any], environ: dict[str, str], field: str, value: str, expected: str
) -> None:
    """A malformed setting stops startup with the setting's bridge_* name, the value and
    what it should have been, in words."""
    with pytest.raises(ValidationError) as caught:
        Settings.from_app(make_app(**conf), environ=environ)
    assert_refusal(caught.value, field, value)
    assert caught.value.expected == expected
    assert str(caught.value) == f"{field}: got {value!r}, expected {expected}"


# ------------------------------------------------------------------------- timer_text


def a_solar() -> solar:
    """A celery solar schedule, built without the optional ``ephem`` package."""
    value = solar.__new__(solar)
    value.event, value.lat, value.lon = "sunrise", 48.85, 2.35
    return value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (30, "every 30s"),
        (90.0, "every 1m30s"),
        (timedelta(hours=1, minutes=30), "every 1h30m"),
        (timedelta(days=1), "every 1d"),
        (schedule(timedelta(minutes=5)), "every 5m"),
        (schedule(45), "every 45s"),
        (crontab(minute="*/5", hour="9-17", day_of_week="mon-fri"), "*/5 9-17 * * mon-fri"),
        (crontab(minute=0, hour=7), "0 7 * * *"),
        (crontab(), "* * * * *"),
        ("0 9 * * mon", "0 9 * * mon"),
        ("every 2h", "every 2h"),
        ("@daily", "@daily"),
    ],
)
def test_timer_text_of_beat_schedule_values(value: Any, text: str) -> None:
    """Each kind of beat_schedule ``schedule`` becomes the matching timer text."""
    assert timer_text(value) == text


@pytest.mark.parametrize("value", [2.5, 0, 0.0, -5, timedelta(milliseconds=1500)])
def test_timer_text_refuses_durations_that_are_not_whole_positive_seconds(value: Any) -> None:
    """Sub-second or non-positive intervals cannot be stored as an 'every' timer."""
    with pytest.raises(ValidationError) as caught:
        timer_text(value)
    assert caught.value.field == "schedule"
    assert "schedule" in str(caught.value)
    assert "whole number of seconds" in str(caught.value)


@pytest.mark.parametrize("value", [2.5, -5])
def test_timer_text_refusal_repeats_the_number_given(value: float) -> None:
    """The refusal repeats the number the user wrote in beat_schedule."""
    with pytest.raises(ValidationError) as caught:
        timer_text(value)
    assert_refusal(caught.value, "schedule", value)


@pytest.mark.parametrize("value", [True, None, [30]])
def test_timer_text_refuses_what_has_no_timer_text(value: Any) -> None:
    """Values that are no schedule are refused rather than guessed."""
    with pytest.raises(ValidationError) as caught:
        timer_text(value)
    assert_refusal(caught.value, "schedule", value)
    assert "crontab" in str(caught.value)


def test_timer_text_of_a_crontab_with_a_list_field() -> None:
    """crontab(hour=[9, 17]) is valid Celery and reads as cron '0 9,17 * * *'."""
    assert timer_text(crontab(minute=0, hour=[9, 17])) == "0 9,17 * * *"


def test_timer_text_of_a_crontab_restricting_both_day_fields_is_a_celery_cron() -> None:
    """Celery fires it on days matching both fields: the ``celery`` cron timer keeps that."""
    value = crontab(minute=0, hour=8, day_of_month="1-7", day_of_week="mon")
    assert timer_text(value) == "celery 0 8 1-7 * mon"


def test_timer_text_of_a_solar_schedule() -> None:
    assert timer_text(a_solar()) == "solar sunrise 48.85 2.35"


# ---------------------------------------------------------------------------- run ids

PLAN = datetime(2026, 5, 4, 9, 30, tzinfo=UTC)


def test_run_id_is_the_same_whoever_computes_it() -> None:
    """Redoing a fire after a crash computes the same id, so it finds the same record."""
    first = run_id_for(42, PLAN, 1)
    assert first == run_id_for(42, datetime(2026, 5, 4, 9, 30, tzinfo=UTC), 1)
    assert first == run_id_for(42, PLAN)  # attempt defaults to 1
    assert len(first) == 36


def test_run_id_scheme_is_pinned_and_the_earlier_one_still_recognised() -> None:
    """The id of an occurrence is pinned (a change would strand records on upgrade); the
    UUIDv5 of earlier releases is still known as the same occurrence's, so a fire cut
    short just before an upgrade is resumed under the id it was recorded with."""
    assert run_id_for(42, PLAN, 1) == "019df252-b5c0-8f6e-8e4f-20c915f8bcb3"
    assert ids_of_occurrence(42, PLAN, 1) == {
        "019df252-b5c0-8f6e-8e4f-20c915f8bcb3",
        "af6e4e4f-20c9-55f8-bcb3-373ea26c26fc",
    }


@given(
    first=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1)),
    later_ms=st.integers(min_value=1, max_value=10**10),
    schedules=st.tuples(st.integers(1, 10**9), st.integers(1, 10**9)),
    attempts=st.tuples(st.integers(1, 50), st.integers(1, 50)),
)
def test_run_ids_sort_by_plan_time(
    first: datetime, later_ms: int, schedules: tuple[int, int], attempts: tuple[int, int]
) -> None:
    """Whatever the schedules and attempts, a later plan time (by a millisecond or more)
    sorts after, as text: new records go to the end of the id index."""
    early = first.replace(tzinfo=UTC)
    late = early + timedelta(milliseconds=later_ms)
    assert run_id_for(schedules[0], early, attempts[0]) < run_id_for(
        schedules[1], late, attempts[1]
    )
    assert uuid.UUID(run_id_for(schedules[0], early, attempts[0])).version == 8


@pytest.mark.parametrize(
    ("schedule_id", "plan_time", "attempt"),
    [
        (43, PLAN, 1),
        (42, PLAN + timedelta(microseconds=1), 1),
        (42, PLAN + timedelta(minutes=1), 1),
        (42, PLAN, 2),
    ],
)
def test_run_id_differs_per_occurrence(schedule_id: int, plan_time: datetime, attempt: int) -> None:
    """Another schedule, plan time or attempt is another occurrence with another id."""
    assert run_id_for(schedule_id, plan_time, attempt) != run_id_for(42, PLAN, 1)


def test_run_id_of_one_instant_does_not_depend_on_its_zone() -> None:
    """The same instant written in another zone is the same occurrence."""
    paris = PLAN.astimezone(ZoneInfo("Europe/Paris"))
    assert paris == PLAN
    assert run_id_for(42, paris, 1) == run_id_for(42, PLAN, 1)


# ---------------------------------------------------------------------------- payloads


def test_payload_decode_of_good_columns() -> None:
    """A row's JSON columns decode into the call beat sends."""
    payload = Payload.decode(
        "workers.app.quick", "[1, 2]", '{"y": 3}', '{"queue": "q", "headers": {"h": 1}}'
    )
    assert payload == Payload(
        task="workers.app.quick",
        args=[1, 2],
        kwargs={"y": 3},
        options={"queue": "q", "headers": {"h": 1}},
    )


@pytest.mark.parametrize(
    ("columns", "field", "value"),
    [
        (("not json", "{}", "{}"), "args", "not json"),
        (('{"a": 1}', "{}", "{}"), "args", '{"a": 1}'),
        (("[]", "[1]", "{}"), "kwargs", "[1]"),
        (("[]", "{oops", "{}"), "kwargs", "{oops"),
        (("[]", "{}", "[]"), "options", "[]"),
        (("[]", "{}", '{"queue": "q", "colour": "red"}'), "options", "colour"),
        (("[]", "{}", '{"headers": "h"}'), "options.headers", "h"),
    ],
)
def test_payload_decode_refusals(columns: tuple[str, str, str], field: str, value: str) -> None:
    """A row holding bad JSON is refused with the column and the value found."""
    with pytest.raises(ValidationError) as caught:
        Payload.decode("workers.app.quick", *columns)
    assert_refusal(caught.value, field, value)


def test_payload_refusal_message_is_one_line() -> None:
    """The message goes into one log line: no newline even for multi-line JSON."""
    with pytest.raises(ValidationError) as caught:
        Payload.decode("t", json.dumps({"a": 1}, indent=2), "{}", "{}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "field", "value"),
    [
        ({"priority": "high"}, "options.priority", "high"),
        ({"priority": 300}, "options.priority", 300),
        ({"queue": 5}, "options.queue", 5),
        ({"expires": "tomorrow"}, "options.expires", "tomorrow"),
        ({"ignore_result": "yes"}, "options.ignore_result", "yes"),
    ],
)
def test_option_values_of_the_wrong_kind_are_refused(
    options: dict[str, object], field: str, value: object
) -> None:
    """A value Celery could not send with is refused when the schedule is written."""
    with pytest.raises(ValidationError) as caught:
        check_options(options)
    assert (caught.value.field, caught.value.value) == (field, value)


@pytest.mark.parametrize(
    "queue", ["", " ", "a\nb", "a\r\nb", "\x1b[31mred\x07", "q" * 256, "\udfff"]
)
def test_a_schedule_is_given_no_queue_a_listing_or_a_broker_cannot_take(queue: str) -> None:
    """On write, in ``options`` and as ``--queue``; beat still reads a row written before
    the rule, so that it keeps firing."""
    from bridge.rules.definition import with_queue
    from bridge.rules.options import check_written_options

    with pytest.raises(ValidationError) as caught:
        check_written_options({"queue": queue})
    assert (caught.value.field, caught.value.value) == ("options.queue", queue)
    with pytest.raises(ValidationError) as given:
        with_queue({}, queue)
    assert (given.value.field, given.value.value) == ("queue", queue)
    if queue.strip():
        assert check_options({"queue": queue}) == {"queue": queue}


def test_a_queue_name_of_any_printable_text_up_to_255_characters_stands() -> None:
    from bridge.rules.options import check_written_options

    for queue in ("celery", "reports.high-priority", "files/ingest", "q" * 255, "очередь"):
        assert check_written_options({"queue": queue}) == {"queue": queue}


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_settings_refuse_non_finite_numbers(raw: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.from_app(None, {"BRIDGE_POLL_INTERVAL": raw})
    assert caught.value.field == "bridge_poll_interval"


def test_a_message_expires_by_its_options_else_by_the_policy_else_never() -> None:
    """The instant a run's message expires, as the record keeps it: options win over policy."""
    call = Payload("t", [], {}, {})
    own = Payload("t", [], {}, {"expires": 90})
    assert expires_at(call, PLAN, None) is None
    assert expires_at(call, PLAN, 30.0) == PLAN + timedelta(seconds=30)
    assert expires_at(own, PLAN, 30.0) == PLAN + timedelta(seconds=90)
    assert expires_at(own, PLAN, None) == PLAN + timedelta(seconds=90)
