"""Phases 5 and 6 as the finisher runs them, against a store that records its calls (no I/O):
what is logged, what comes back, and what reaches beat when finishing fails."""

from __future__ import annotations

import logging
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.beat import finishing
from bridge.beat.finishing import Finish, FinishingFailed, Fired, finish
from bridge.service.fire import Advanced
from bridge.storage.beat import Sent

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


class Store:
    """Answers the finisher's calls as a database would have, and keeps them: those of
    the fire sequence's unit of work (the advance) and of its gateway alike."""

    def __init__(self, advanced: Advanced, held: set[int] | None = None) -> None:
        self.advanced = advanced
        self.held = held
        self.calls: list[str] = []
        self.store = self

    def mark_sent(self, sent: list[Sent], now: datetime) -> None:
        self.calls.append("mark_sent")

    def renew(self, instance: str, rows: list[int], now: datetime) -> set[int]:
        self.calls.append("renew")
        return set(rows) if self.held is None else self.held

    def advance(self, advances: Any, instance: str, marked: datetime, now: datetime) -> Advanced:
        self.calls.append("advance")
        return self.advanced


def job(marked: datetime = NOW) -> Finish:
    return Finish(
        instance="beat-1",
        marked=marked,
        rows=[1, 2],
        fired=[Fired(1, "one", NOW, 1, "run-1", "scheduled", None)],
        advances=[],
        names={1: "one", 2: "two"},
        now=NOW,
        lease_seconds=30.0,
    )


def test_marks_sent_logs_each_run_then_advances(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(Advanced(lost=[2], finished={1: "finished: no runs left"}))
    with caplog.at_level(logging.INFO, logger="bridge.scheduler"):
        done = finish(store, job(), clock=lambda: NOW + timedelta(seconds=14))  # type: ignore[arg-type]
    assert store.calls == ["mark_sent", "advance"]  # a mark younger than half a lease
    assert done.taken == [] and done.advanced.lost == [2]
    assert "bridge: fired 'one' plan 2026-11-28T12:00:00+00:00 task id run-1 (scheduled)" in (
        caplog.text
    )
    assert "lost the mark on 'two' before advancing it" in caplog.text
    assert "schedule 'one' finished: no runs left" in caplog.text


def test_renews_an_old_mark_and_names_the_rows_taken_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store(Advanced(), held={1})
    with caplog.at_level(logging.WARNING, logger="bridge.scheduler"):
        done = finish(store, job(), clock=lambda: NOW + timedelta(seconds=20))  # type: ignore[arg-type]
    assert store.calls == ["mark_sent", "renew", "advance"]
    assert done.taken == [2]
    assert "lost the mark on 'two' to another instance" in caplog.text


class Unpicklable(Exception):
    def __init__(self, field: str, value: object) -> None:
        super().__init__(f"{field}: {value!r}")


def test_a_failure_reaches_beat_as_text_that_pickles(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that cannot be unpickled would break the process pool instead."""

    class Failing(Store):
        def advance(self, *args: Any) -> Advanced:
            raise Unpicklable("timer", "every ever")

    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(Unpicklable("timer", "every ever")))
    monkeypatch.setattr(finishing, "_firing", Failing(Advanced()))
    with pytest.raises(FinishingFailed) as raised:
        finishing._finish_here(job())
    again = pickle.loads(pickle.dumps(raised.value))
    assert str(again) == "Unpicklable: timer: 'every ever'"
