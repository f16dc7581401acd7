"""The alert URLs' setting, how a URL is named in messages, and the alerts' backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.notify import Notifier, alert_urls, shown
from bridge.rules.alerts import RETRY_AT_MOST, retry_after, title
from bridge.service.alerting import delivered, delivered_text


def test_urls_are_separated_by_commas_or_new_lines() -> None:
    text = " json://a/hook,\nmailto://b?to=c@d , \n\nslack://T/B/X "
    assert alert_urls(text) == ("json://a/hook", "mailto://b?to=c@d", "slack://T/B/X")
    assert alert_urls("") == alert_urls(" , \n") == ()


def test_a_url_is_named_by_its_position_and_service_only() -> None:
    assert shown(1, "mailtos://user:secret@example.com?to=x@y") == "URL 2 (mailtos)"
    assert shown(0, "no scheme at all") == "URL 1 (?)"
    assert shown(0, "sp ace://x") == "URL 1 (?)"


def test_a_url_apprise_cannot_read_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValidationError) as refused:
        Notifier(["json://127.0.0.1/hook", "slak://T000/B000/secret-token"])
    assert refused.value.field == "bridge_alert_urls"
    assert "URL 2 (slak)" in str(refused.value) and "secret-token" not in str(refused.value)


def test_the_urls_are_a_secret_of_the_settings() -> None:
    settings = Settings.from_app(environ={"BRIDGE_ALERT_URLS": "mailtos://u:hunter2@example.com"})
    assert "hunter2" not in repr(settings) and settings.alerting
    assert not Settings().alerting


def test_the_targets_that_have_an_alert_are_kept_for_that_alert_only() -> None:
    kept = delivered_text("opened#1", {"2", "task", "0"})
    assert kept == "opened#1:0,2,task"
    assert delivered(kept, "opened#1") == {"0", "2", "task"}
    # Another alert of the incident (its recovery, the next repeat) goes to every target.
    assert delivered(kept, "recovered#1") == delivered(kept, "repeat#2") == set()
    assert delivered(None, "opened#1") == delivered("garbage", "opened#1") == set()


def test_an_alert_title_names_the_kind_the_event_and_the_schedule() -> None:
    payload = {"kind": "late", "event": "opened", "schedule": "report"}
    assert title(payload) == "bridge: late opened: report"
    assert title({**payload, "kind": "no_beat", "schedule": None}) == (
        "bridge: no_beat opened: the scheduler"
    )


@given(st.integers(-5, 10_000))
def test_a_refused_alert_waits_longer_each_time_up_to_five_minutes(attempts: int) -> None:
    wait = retry_after(attempts)
    assert timedelta(seconds=5) <= wait <= RETRY_AT_MOST
    assert retry_after(attempts + 1) >= wait
