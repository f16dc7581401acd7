"""The scheduling policies, end to end, with real beat and worker processes.

Each test shares one beat and one worker between schedules whose policies do
not interfere, and checks what a user would check: the run history
(``bridge history --json``), the schedule (``bridge show --json``, ``bridge
ls``) and, where it is clearer, the two tables. Beat downtime is real: the
beat process is stopped, time passes, and a new one is started.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from bridge import Bridge
from tests.support import CeleryProcess, Env, rows, wait_for

pytestmark = pytest.mark.e2e

SEC = timedelta(seconds=1)
#: Timestamps come from different processes on one clock; a lower bound gets this much slack.
CLOCK = timedelta(seconds=0.2)

Run = dict[str, Any]


# -- what a user reads -----------------------------------------------------------------


def history(env: Env, name: str) -> list[Run]:
    """``bridge history NAME --json``, ordered by plan time and attempt."""
    result = env.cli("history", name, "--limit", "1000", "--json")
    runs: list[Run] = json.loads(result.stdout)
    for run in runs:
        for key in ("plan_time", "queued_at", "started_at", "finished_at"):
            run[key] = ts(run[key])
    return sorted(runs, key=lambda r: (r["plan_time"], r["attempt"], r["queued_at"]))


def show(env: Env, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(env.cli("show", name, "--json").stdout)
    return result


def ts(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def now() -> datetime:
    return datetime.now(UTC)


def add(env: Env, name: str, task: str, timer: str, *options: str, **kwargs: Any) -> None:
    args = ["--kwargs", json.dumps(kwargs)] if kwargs else []
    env.cli("add", name, "--task", f"workers.app.{task}", "--timer", timer, *args, *options)


# -- polling the tables (fast: no CLI start-up per probe) ------------------------------


def db_runs(env: Env, name: str) -> list[Any]:
    return rows(
        env.database_url,
        "SELECT t.id, t.status, t.trigger, t.plan_time, t.attempt, t.queued_at, t.started_at,"
        " t.finished_at, t.error FROM task_execution t"
        " JOIN periodic_task p ON p.id = t.periodic_task_id"
        " WHERE p.name = :name ORDER BY t.plan_time, t.attempt",
        name=name,
    )


def db_schedule(env: Env, name: str) -> Any:
    return rows(env.database_url, "SELECT * FROM periodic_task WHERE name = :name", name=name)[0]


def count(env: Env, name: str, *statuses: str, trigger: str | None = None) -> int:
    """How many runs of ``name`` have one of ``statuses`` (any, if none) and ``trigger``."""
    return sum(
        1
        for r in db_runs(env, name)
        if (not statuses or r.status in statuses) and trigger in (None, r.trigger)
    )


FINAL = ("SUCCESS", "FAILURE", "REVOKED", "LOST")


def all_final(env: Env, *names: str) -> bool:
    return all(r.status in FINAL for name in names for r in db_runs(env, name))


def on_grid(moment: datetime, anchor: datetime, step: timedelta) -> bool:
    return (moment - anchor) % step == timedelta(0)


def steps_between(earlier: datetime, later: datetime, step: timedelta) -> int:
    """How many grid steps separate two occurrences (an exact whole number)."""
    assert (later - earlier) % step == timedelta(0), (earlier, later, step)
    return (later - earlier) // step


def cold_stop(process: CeleryProcess) -> None:
    """Stop a worker without waiting for its long tasks (cold shutdown)."""
    process.signal(signal.SIGQUIT)
    process.stop()


def start_worker(env: Env, concurrency: int = 8) -> CeleryProcess:
    worker = env.start("worker", "-c", str(concurrency))
    worker.wait_log("ready", timeout=90)
    return worker


def start_beat(env: Env, **environ: str) -> CeleryProcess:
    beat = env.start("beat", **environ)
    beat.wait_log("beat: Starting", timeout=60)
    return beat


def spans_disjoint(runs: Sequence[Run]) -> bool:
    """No two runs were executing at the same time (an open run lasts forever)."""
    forever = datetime.max.replace(tzinfo=UTC)
    spans = sorted((r["started_at"], r["finished_at"] or forever) for r in runs if r["started_at"])
    return all(end <= start for (_, end), (start, _) in pairwise(spans))


def replacements_started(runs: Sequence[Run]) -> bool:
    """Each run replaced so far was followed by a run that started."""
    ordered = sorted(runs, key=lambda r: r["plan_time"])
    return (
        all(
            later["started_at"] is not None
            for run, later in pairwise(ordered)
            if run["status"] == "REVOKED"
        )
        and bool(ordered)
        and ordered[-1]["status"] != "REVOKED"
    )


# -- overlap ---------------------------------------------------------------------------


def test_overlap_skip_allow_buffer_one_and_replace(pg_env: Env) -> None:
    env = pg_env
    add(env, "ov-skip", "slow", "every 1s", seconds=3)
    add(env, "ov-allow", "slow", "every 1s", "--overlap", "allow", seconds=3)
    add(env, "ov-buffer", "slow", "every 1s", "--overlap", "buffer_one", seconds=2)
    add(env, "ov-replace", "slow", "every 3s", seconds=20)
    env.cli("edit", "ov-replace", "--overlap", "replace")  # a policy changed with edit
    worker = start_worker(env, 10)
    beat = env.start("beat")

    wait_for(lambda: count(env, "ov-skip", "SUCCESS") >= 2, 60, what="two finished ov-skip runs")
    wait_for(lambda: count(env, "ov-allow", "SUCCESS") >= 3, 30, what="three ov-allow runs")
    wait_for(lambda: count(env, "ov-buffer", "SUCCESS") >= 3, 30, what="three ov-buffer runs")
    wait_for(lambda: count(env, "ov-replace", "REVOKED") >= 2, 30, what="two replaced runs")
    beat.stop()
    wait_for(
        lambda: replacements_started(history(env, "ov-replace")),
        30,
        what="the run after each replaced one to start",
    )

    # skip: occurrences that find a run open are counted, and runs never overlap.
    skip_runs = history(env, "ov-skip")
    assert show(env, "ov-skip")["skipped_count"] >= 2
    assert spans_disjoint(skip_runs), [(r["started_at"], r["finished_at"]) for r in skip_runs]

    # allow: 3 s runs every second execute side by side.
    allow_runs = [r for r in history(env, "ov-allow") if r["started_at"] and r["finished_at"]]
    assert not spans_disjoint(allow_runs)
    assert show(env, "ov-allow")["skipped_count"] == 0

    # buffer_one: never concurrent; the held occurrence starts as soon as the running one
    # finishes; the occurrences beyond the one held are skipped and counted.
    buffer_runs = [r for r in history(env, "ov-buffer") if r["started_at"]]
    assert spans_disjoint(buffer_runs)
    finished = [r for r in buffer_runs if r["finished_at"]]
    spans = sorted((r["started_at"], r["finished_at"]) for r in buffer_runs)
    gaps = [start - end for (_, end), (start, _) in pairwise(spans) if end is not None]
    assert len(finished) >= 3 and len(gaps) >= 2
    assert all(gap <= 3 * SEC for gap in gaps), gaps
    assert show(env, "ov-buffer")["skipped_count"] >= 1

    # replace: the running run is terminated and recorded, the new one starts.
    replace_runs = history(env, "ov-replace")
    replaced = [r for r in replace_runs if r["status"] == "REVOKED"]
    assert len(replaced) >= 2
    for run in replaced:
        assert str(run["error"]).startswith("replaced by"), run
        assert run["finished_at"] is not None, run
        began = run["started_at"] or run["queued_at"]
        assert run["finished_at"] - began < 10 * SEC, run  # not its natural 20 s
        if run["started_at"]:
            assert f"Terminating {run['id']}" in worker.log
    assert replacements_started(replace_runs), replace_runs
    assert all(r["status"] != "SUCCESS" for r in replace_runs)
    cold_stop(worker)


def test_replace_with_revoke_lets_a_started_run_finish_beside_the_new_one(pg_env: Env) -> None:
    """``replace_with revoke``: 4 s runs every 2 s are not terminated; each started run
    finishes, the next starting beside it. Only a run no worker had started is revoked."""
    env = pg_env
    # Added once beat runs: a schedule added first would be late by the start of both, and
    # its caught-up occurrence be replaced a moment later by the next one, which revokes
    # it in the instant between a worker starting it and its STARTED record landing.
    worker = start_worker(env, 4)
    beat = start_beat(env)
    add(env, "rv", "slow", "every 2s", "--overlap", "replace", "--replace-with", "revoke",
        seconds=4)  # fmt: skip
    assert show(env, "rv")["replace_with"] == "revoke"
    wait_for(lambda: count(env, "rv", "SUCCESS") >= 3, 60, what="three finished rv runs")
    beat.stop()
    runs = [r for r in history(env, "rv") if r["started_at"] and r["finished_at"]]
    assert all(r["finished_at"] - r["started_at"] >= 3 * SEC for r in runs), runs
    assert not spans_disjoint(runs)  # the new run started while the old one ran
    assert all(r["started_at"] is None for r in history(env, "rv") if r["status"] == "REVOKED")
    assert "Terminating" not in worker.log
    cold_stop(worker)


# -- timing: fixed delay, jitter, start/end, remaining, one-shot ---------------------------


def test_fixed_delay_jitter_bounds_remaining_and_one_shot(pg_env: Env) -> None:
    env = pg_env
    start_worker(env)
    beat = start_beat(env)

    t = now()
    add(env, "oneshot", "quick", f"at {iso(t.replace(microsecond=0) + 5 * SEC)}")
    t = now()
    start, end = t + 3 * SEC, t + 8 * SEC
    add(env, "bounded", "quick", "every 1s", "--start", iso(start), "--end", iso(end))
    add(env, "remaining", "quick", "every 1s", "--remaining", "3")
    add(env, "jitter", "quick", "every 2s", "--jitter", "1s")
    add(env, "delay", "slow", "every 2s after completion", seconds=1)

    wait_for(lambda: count(env, "delay", "SUCCESS") >= 3, 60, what="three fixed-delay runs")
    wait_for(lambda: count(env, "jitter", "SUCCESS") >= 5, 30, what="five jittered runs")

    # fixed delay: each run starts about 2 s after the previous one finished.
    delay = [r for r in history(env, "delay") if r["started_at"]]
    assert len(delay) >= 3
    for previous, current in pairwise(delay):
        assert previous["finished_at"] is not None
        pause = current["started_at"] - previous["finished_at"]
        assert 2 * SEC - CLOCK <= pause <= 5 * SEC, (previous, current)

    # jitter: plan times stay on the grid; each run is sent within the jitter after its
    # occurrence; the offsets differ from one occurrence to the next.
    jitter = history(env, "jitter")
    anchor = ts(show(env, "jitter")["anchor"])
    assert anchor is not None
    offsets = []
    for run in jitter:
        assert on_grid(run["plan_time"], anchor, 2 * SEC), run
        offset = run["queued_at"] - run["plan_time"]
        assert -CLOCK <= offset <= 1.5 * SEC, run
        if run["started_at"]:
            assert run["started_at"] - run["plan_time"] <= 3 * SEC, run
        offsets.append(offset)
    assert max(offsets) - min(offsets) >= timedelta(seconds=0.05), offsets

    def finished(name: str) -> dict[str, Any]:
        """The schedule once it has disabled itself, and a little longer."""
        wait_for(lambda: not db_schedule(env, name).enabled, 30, what=f"{name} to finish")
        time.sleep(1.5)  # a run fired after the schedule finished would show up now
        info = show(env, name)
        assert info["enabled"] is False, info
        assert str(info["note"]).startswith("finished"), info["note"]
        return info

    # one-shot: one run, then disabled.
    finished("oneshot")
    assert [r["status"] for r in history(env, "oneshot")] == ["SUCCESS"]

    # start/end: no plan time outside the bounds; after end the schedule is finished.
    finished("bounded")
    bounded = history(env, "bounded")
    assert len(bounded) >= 2
    assert all(start <= r["plan_time"] <= end for r in bounded), [r["plan_time"] for r in bounded]

    # remaining 3: exactly three scheduled runs, then finished.
    finished("remaining")
    assert [r["trigger"] for r in history(env, "remaining")] == ["scheduled"] * 3
    beat.stop()


# -- catch-up after beat downtime, and resume --from -----------------------------------


def test_catchup_latest_all_none_and_window_after_beat_downtime(pg_env: Env) -> None:
    env = pg_env
    step = 2 * SEC
    add(env, "cu-latest", "quick", "every 2s")
    add(env, "cu-all", "quick", "every 2s", "--catchup", "all", "--catchup-window", "60s")
    add(env, "cu-none", "quick", "every 2s", "--catchup", "none")
    # Overlap allow: under skip, its catch-up runs go one after another, and the chain can
    # still be open when the next occurrence falls due a second later, which is then skipped.
    add(
        env,
        "cu-window",
        "quick",
        "every 1s",
        "--catchup",
        "all",
        "--catchup-window",
        "3s",
        "--overlap",
        "allow",
    )
    names = ("cu-latest", "cu-all", "cu-none", "cu-window")
    start_worker(env)
    beat = env.start("beat")
    for name in names:
        wait_for(lambda n=name: count(env, n, "SUCCESS") >= 2, 60, what=f"two runs of {name}")
    beat.stop()
    stopped = now()
    wait_for(lambda: all_final(env, *names), 20, what="the runs sent before the stop to end")
    before = {name: max(r.plan_time for r in db_runs(env, name)) for name in names}
    # The first start may already have caught up (the schedules were added before beat
    # ran): only what the downtime adds to missed_count is checked below.
    missed_before = {name: db_schedule(env, name).missed_count for name in names}
    time.sleep(7)  # beat is down: about three occurrences of each 2 s timer pass
    restarted = now()
    beat = env.start("beat")
    for name in names:
        wait_for(
            lambda n=name: any(
                r.trigger == "scheduled" and r.plan_time > restarted for r in db_runs(env, n)
            ),
            60,
            what=f"an on-time run of {name} after the restart",
        )
    beat.stop()

    def after_gap(name: str) -> list[Run]:
        runs = history(env, name)
        # Fixed rate: every plan time of the schedule is on its grid, across the restart.
        anchor = ts(show(env, name)["anchor"])
        assert anchor is not None
        grid = SEC if name == "cu-window" else step
        assert all(on_grid(r["plan_time"], anchor, grid) for r in runs), runs
        assert len({r["plan_time"] for r in runs}) == len(runs), "one record per occurrence"
        return [r for r in runs if r["plan_time"] > before[name]]

    # latest: the most recent missed occurrence runs once; the older ones are counted.
    latest = after_gap("cu-latest")
    first = latest[0]
    assert first["trigger"] == "catchup", latest
    assert first["plan_time"] >= stopped, first  # not the first missed one: the latest
    assert first["queued_at"] - first["plan_time"] < step + CLOCK, first
    assert [r["trigger"] for r in latest[1:]] == ["scheduled"] * (len(latest) - 1), latest
    # The next occurrence may fall due while the catch-up run is still open
    # (beat restarted just before it): overlap skip then skips it, and only it.
    gaps = [b["plan_time"] - a["plan_time"] for a, b in pairwise(latest)]
    assert gaps[0] in (step, 2 * step) and all(gap == step for gap in gaps[1:]), latest
    missed = steps_between(before["cu-latest"], first["plan_time"], step) - 1
    assert missed >= 2
    assert show(env, "cu-latest")["missed_count"] - missed_before["cu-latest"] == missed

    # all: every missed occurrence runs, oldest first, each marked catchup.
    every = after_gap("cu-all")
    plan_times = [before["cu-all"], *(r["plan_time"] for r in every)]
    # What each run was, should an occurrence be missing: its plan time, trigger, status
    # and when it was sent, and the schedule's counts of skips and misses.
    told = [
        f"{r['plan_time']:%H:%M:%S.%f} {r['trigger']} {r['status']} sent {r['queued_at']}"
        for r in every
    ]
    counts = {key: show(env, "cu-all")[key] for key in ("skipped_count", "missed_count")}
    # As for latest: the first occurrence due after the backlog is sent may fall due while
    # the last catch-up run is still open, and overlap skip skips it, and only it.
    kinds = [None, *(r["trigger"] for r in every)]
    gaps = [
        (b - a, kinds[index], kinds[index + 1]) for index, (a, b) in enumerate(pairwise(plan_times))
    ]
    skipped = [gap for gap in gaps if gap[0] != step]
    assert skipped in ([], [(2 * step, "catchup", "scheduled")]), (before["cu-all"], told, counts)
    # An occurrence skipped after the last run read is counted too, and in no gap.
    assert counts["skipped_count"] >= len(skipped) and counts["missed_count"] == 0, counts
    caught = [r for r in every if r["plan_time"] < restarted]
    assert len(caught) >= 3
    sent_order = sorted(caught, key=lambda r: r["queued_at"])
    assert [r["plan_time"] for r in sent_order] == [r["plan_time"] for r in caught]
    assert show(env, "cu-all")["missed_count"] == missed_before["cu-all"]
    all_caught = caught  # their triggers are checked last, after the other policies

    # none: no missed occurrence runs; they are counted; the next runs are on time.
    none = after_gap("cu-none")
    assert all(r["trigger"] == "scheduled" for r in none), none
    assert none[0]["plan_time"] >= restarted, none[0]
    assert all(r["queued_at"] - r["plan_time"] < SEC for r in none), none
    missed = steps_between(before["cu-none"], none[0]["plan_time"], step) - 1
    assert missed >= 3
    assert show(env, "cu-none")["missed_count"] - missed_before["cu-none"] == missed

    # window 3s: occurrences older than the window when beat came back are missed, not run;
    # the ones inside it run as catch-up.
    window = after_gap("cu-window")
    caught = [r for r in window if r["trigger"] == "catchup"]
    assert caught, window
    for run in caught:
        assert run["queued_at"] - run["plan_time"] <= 3 * SEC + SEC, run
    missed = steps_between(before["cu-window"], window[0]["plan_time"], SEC) - 1
    assert missed >= 2
    assert show(env, "cu-window")["missed_count"] - missed_before["cu-window"] == missed
    assert all(b["plan_time"] - a["plan_time"] == SEC for a, b in pairwise(window)), window

    # Every occurrence that passed while beat was down is a catch-up run, the most recent
    # one included (as with catch-up latest).
    triggers = [(iso(r["plan_time"]), r["trigger"]) for r in all_caught]
    assert [t for _, t in triggers] == ["catchup"] * len(triggers), (iso(restarted), triggers)


def test_resume_from_catchup_and_from_now(pg_env: Env) -> None:
    env = pg_env
    add(env, "pr-catchup", "quick", "every 1s", "--catchup", "all")
    add(env, "pr-now", "quick", "every 1s", "--catchup", "all")
    start_worker(env)
    beat = env.start("beat")
    for name in ("pr-catchup", "pr-now"):
        wait_for(lambda n=name: count(env, n, "SUCCESS") >= 2, 60, what=f"two runs of {name}")
    env.cli("pause", "pr-catchup", "--note", "deploying")
    env.cli("pause", "pr-now")
    paused = now()
    listing = env.cli("ls").stdout
    assert "deploying" in listing and "paused" in listing
    info = show(env, "pr-catchup")
    assert info["note"] == "deploying" and info["enabled"] is False
    for key in ("skipped_count", "missed_count", "failure_streak"):
        assert isinstance(info[key], int), (key, info)
    time.sleep(4)
    resuming = now()
    env.cli("resume", "pr-catchup", "--from", "catchup")
    env.cli("resume", "pr-now", "--from", "now")
    resumed = now()
    for name in ("pr-catchup", "pr-now"):
        wait_for(
            lambda n=name: sum(r.plan_time > resumed for r in db_runs(env, n)) >= 2,
            30,
            what=f"runs of {name} after the resume",
        )
    beat.stop()

    # --from catchup: the catch-up policy (all) runs every occurrence missed while paused.
    runs = history(env, "pr-catchup")
    plan_times = [r["plan_time"] for r in runs]
    # The occurrence that falls due while the last catch-up run is still open
    # may be skipped (overlap skip); no other gap.
    gaps = [b - a for a, b in pairwise(plan_times)]
    assert all(gap in (SEC, 2 * SEC) for gap in gaps), plan_times
    assert sum(gap != SEC for gap in gaps) <= 1, plan_times
    during = [r for r in runs if paused + SEC < r["plan_time"] < resuming]
    assert len(during) >= 2
    assert all(r["trigger"] == "catchup" for r in during), during

    # --from now: none of them runs.
    runs = history(env, "pr-now")
    during = [r for r in runs if paused + 1.5 * SEC < r["plan_time"] < resuming]
    assert during == [], during
    assert any(r["plan_time"] > resumed for r in runs)


# -- breaker, retries ----------------------------------------------------------------------


def test_breaker_and_retries(pg_env: Env) -> None:
    env = pg_env
    worker = start_worker(env)
    # A run with no status change for 4 s is presumed LOST (a LOST run is a failed one).
    beat = start_beat(env, BRIDGE_STALE_RUN_SECONDS="4")
    add(env, "brk", "fail", "every 1s", "--max-failures", "3", message="boom brk")
    add(env, "brk-lost", "slow", "every 1s", "--max-failures", "1", seconds=15)
    add(env, "brk-manual", "fail", "0 0 1 1 *", "--max-failures", "1", message="manual boom")
    # The retried schedules start 3 s from now (an anchor, through the API) and repeat
    # every 20 s: their first occurrence is retried to the end before the second one.
    api = Bridge(database_url=env.database_url)
    anchor = now() + 3 * SEC
    api.add(
        "retry-list",
        task="workers.app.fail",
        timer="every 20s",
        kwargs={"message": "boom list"},
        anchor=anchor,
        max_attempts=3,
        backoff="1s,2s",
        max_failures=5,
    )
    api.add(
        "retry-exp",
        task="workers.app.fail",
        timer="every 20s",
        kwargs={"message": "boom exp"},
        anchor=anchor,
        max_attempts=4,
        backoff="1s..2s",
        max_failures=5,
    )

    # Manual runs never trip the breaker, even with max-failures 1.
    env.cli("run", "brk-manual")
    env.cli("run", "brk-manual")
    wait_for(lambda: count(env, "brk-manual", "FAILURE") == 2, 30, what="two manual failures")

    wait_for(lambda: db_schedule(env, "brk").broken, 60, what="brk to break")
    wait_for(lambda: count(env, "retry-list", "FAILURE") == 3, 60, what="3 attempts of retry-list")
    wait_for(lambda: count(env, "retry-exp", "FAILURE") == 4, 60, what="4 attempts of retry-exp")

    manual = show(env, "brk-manual")
    assert manual["broken"] is False and manual["enabled"] is True, manual
    assert manual["failure_streak"] == 0, manual
    assert [r["trigger"] for r in history(env, "brk-manual")] == ["manual", "manual"]

    # The breaker: three consecutive failed occurrences disable the schedule.
    info = show(env, "brk")
    assert info["broken"] is True and info["enabled"] is False, info
    assert str(info["note"]).startswith("broken"), info["note"]
    assert "boom brk" in str(info["note"]), info["note"]
    listing = [line for line in env.cli("ls").stdout.splitlines() if line.startswith("brk ")]
    assert len(listing) == 1 and "BROKEN" in listing[0], listing
    broken_runs = history(env, "brk")
    assert [(r["status"], r["trigger"]) for r in broken_runs] == [("FAILURE", "scheduled")] * 3

    # Retries: one occurrence, attempts 1..N, each after its backoff; counted once.
    # (On a slow machine the next occurrence, 20 s on, may have begun: it is left out.)
    for name, attempts, delays in (("retry-list", 3, [1, 2]), ("retry-exp", 4, [1, 2, 2])):
        runs = [r for r in history(env, name) if r["plan_time"] == anchor]
        assert [r["attempt"] for r in runs] == list(range(1, attempts + 1)), runs
        assert [r["trigger"] for r in runs] == ["scheduled"] + ["retry"] * (attempts - 1)
        assert all(r["status"] == "FAILURE" for r in runs)
        for (previous, current), wait in zip(pairwise(runs), delays, strict=True):
            assert current["started_at"] - previous["finished_at"] >= wait * SEC - CLOCK, (
                name,
                previous,
                current,
            )
        info = show(env, name)
        assert info["failure_streak"] in (1, 2), (name, info)
        assert info["enabled"] is True and info["broken"] is False, (name, info)

    # resume clears the breaker.
    beat.stop()
    env.cli("resume", "brk")
    info = show(env, "brk")
    assert info["broken"] is False and info["enabled"] is True, info
    assert info["failure_streak"] == 0, info

    # A LOST run is a failed occurrence too: with max-failures 1 it breaks the schedule,
    # and nothing more is sent.
    wait_for(lambda: db_schedule(env, "brk-lost").broken, 30, what="brk-lost to break")
    lost_runs = history(env, "brk-lost")
    info = show(env, "brk-lost")
    assert info["enabled"] is False, info
    assert str(info["note"]).startswith("broken"), info
    assert str(lost_runs[0]["error"]) in info["note"], (lost_runs[0], info)
    runs = [(iso(r["plan_time"]), r["status"], r["trigger"]) for r in lost_runs]
    assert [status for _, status, _ in runs] == ["LOST"], runs
    cold_stop(worker)  # brk-lost's run is still sleeping


# -- expiry ------------------------------------------------------------------------------


def test_expired_runs_are_discarded_not_run_late(pg_env: Env) -> None:
    env = pg_env
    at = now().replace(microsecond=0) + 7 * SEC
    add(env, "exp-2s", "quick", f"at {iso(at)}", "--expires", "2s")
    add(env, "exp-next", "quick", "every 2s", "--overlap", "allow")
    add(env, "exp-never", "quick", "every 2s", "--overlap", "allow", "--expires", "never")
    beat = env.start("beat")  # no worker yet: the runs wait in the broker
    wait_for(lambda: count(env, "exp-2s") == 1, 60, what="exp-2s to be sent")
    wait_for(lambda: count(env, "exp-next") >= 3, 30, what="three exp-next runs sent")
    wait_for(lambda: count(env, "exp-never") >= 3, 30, what="three exp-never runs sent")
    sent = db_runs(env, "exp-2s")[0].queued_at
    wait_for(lambda: now() > sent + 3 * SEC, 10, what="exp-2s to expire")
    beat.stop()
    worker = start_worker(env)
    ready = now()
    names = ("exp-2s", "exp-next", "exp-never")
    wait_for(lambda: all_final(env, *names), 30, what="every run to end")
    worker.stop()

    # An explicit expiry: not started by then, discarded and recorded.
    [run] = history(env, "exp-2s")
    assert (run["status"], run["error"], run["started_at"]) == ("REVOKED", "expired", None)
    assert f"Discarding revoked task: workers.app.quick[{run['id']}]" in worker.log

    # expires next: a run still waiting at the following occurrence does not run late.
    runs = history(env, "exp-next")
    stale = [r for r in runs if r["plan_time"] + 2 * SEC < ready - SEC]
    assert len(stale) >= 2
    for run in stale:
        assert (run["status"], run["error"], run["started_at"]) == ("REVOKED", "expired", None)
    for run in runs:
        if run["started_at"]:
            assert run["started_at"] <= run["plan_time"] + 3 * SEC, run

    # expires never: the same backlog runs, late.
    runs = history(env, "exp-never")
    assert len(runs) >= 3 and all(r["status"] == "SUCCESS" for r in runs), runs
    assert all(r["started_at"] > r["plan_time"] + 2 * SEC for r in runs[:-1]), runs


# -- backfill and manual runs --------------------------------------------------------------


def test_backfill_and_manual_run_overlap(pg_env: Env) -> None:
    env = pg_env
    add(env, "bf", "quick", "* * * * *")
    # 120 backfilled runs: more than retention keeps by default (100).
    add(env, "bf-big", "quick", "* * * * *", "--keep-runs", "0")
    add(env, "man", "slow", "0 0 1 1 *", seconds=30)
    worker = start_worker(env, 4)
    env.start("beat")

    # A manual run while another is open: skip refuses, replace revokes and resends.
    env.cli("run", "man")
    wait_for(lambda: count(env, "man", "STARTED") == 1, 30, what="the manual run to start")
    refused = env.cli("run", "man", "--overlap", "skip", check=False)
    assert refused.returncode != 0, refused.stdout
    assert count(env, "man") == 1
    [first] = db_runs(env, "man")
    env.cli("run", "man", "--overlap", "replace")
    wait_for(
        lambda: [r.status for r in db_runs(env, "man") if r.id != first.id] == ["STARTED"],
        30,
        what="the replacement to start",
    )

    # Backfill: one run per occurrence in [from, to], trigger backfill.
    base = now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    window = ["--from", iso(base), "--to", iso(base + timedelta(minutes=4))]
    env.cli("backfill", "bf", *window, "--overlap", "allow")
    # 120 occurrences, more than the default limit (100): refused, nothing written.
    big = ["--from", iso(base - timedelta(minutes=120)), "--to", iso(base - timedelta(minutes=1))]
    refused = env.cli("backfill", "bf-big", *big, "--overlap", "allow", check=False)
    assert refused.returncode == 1, refused.stdout
    message = refused.stderr.strip().splitlines()
    assert len(message) == 1 and re.search(r"\bto\b", message[0]), refused.stderr
    assert count(env, "bf-big", trigger="backfill") == 0
    # Raising the limit allows it.
    env.cli("backfill", "bf-big", *big, "--overlap", "allow", "--limit", "120")
    wait_for(
        lambda: (
            count(env, "bf", "SUCCESS", trigger="backfill") == 5
            and count(env, "bf-big", "SUCCESS", trigger="backfill") == 120
        ),
        90,
        what="the backfilled runs to execute",
    )

    backfilled = [r for r in history(env, "bf") if r["trigger"] == "backfill"]
    assert [r["plan_time"] for r in backfilled] == [base + timedelta(minutes=k) for k in range(5)]
    assert all(r["status"] == "SUCCESS" and r["worker"] for r in backfilled), backfilled
    big_runs = [r for r in history(env, "bf-big") if r["trigger"] == "backfill"]
    assert [r["plan_time"] for r in big_runs] == [
        base - timedelta(minutes=120 - k) for k in range(120)
    ]

    man = {r["id"]: r for r in history(env, "man")}
    replaced = man[first.id]
    assert replaced["status"] == "REVOKED", replaced
    assert replaced["finished_at"] is not None, replaced
    assert replaced["finished_at"] - replaced["started_at"] < 10 * SEC, replaced
    assert f"Terminating {first.id}" in worker.log
    assert [r["trigger"] for r in man.values()] == ["manual", "manual"]
    cold_stop(worker)


def test_calendars_skip_their_occurrences_and_next_leaves_them_out(pg_env: Env) -> None:
    """A schedule firing every second skips a window of its calendar: no run is recorded in
    it, each occurrence in it is counted excluded, and the runs on either side are sent.
    ``next`` of a business-day schedule leaves out its holidays, across daylight saving."""
    start_worker(pg_env, concurrency=4)
    start_beat(pg_env)
    cli = pg_env.cli
    opens = now().replace(microsecond=0) + 6 * SEC
    window = f"{opens:%Y-%m-%dT%H:%M:%S}/{opens + 4 * SEC:%Y-%m-%dT%H:%M:%S}"
    cli("calendar", "add", "window", "--range", window, "--timezone", "UTC")
    add(pg_env, "cal-every", "quick", "every 1s", "--overlap", "allow",
        "--skip-calendar", "window")  # fmt: skip
    wait_for(
        lambda: any(r.plan_time >= opens + 6 * SEC for r in db_runs(pg_env, "cal-every")),
        60,
        what="runs after the calendar's window",
    )
    plans = [r.plan_time for r in db_runs(pg_env, "cal-every")]
    inside = [plan for plan in plans if opens <= plan < opens + 4 * SEC]
    assert not inside, inside
    assert any(plan < opens for plan in plans) and any(plan >= opens + 4 * SEC for plan in plans)
    assert show(pg_env, "cal-every")["excluded_count"] == 4
    assert show(pg_env, "cal-every")["skip_calendars"] == ["window"]
    refused = cli("calendar", "rm", "window", check=False)
    assert refused.returncode == 1
    assert "skipped by cal-every" in refused.stderr

    # Good Friday and Easter Monday 2027 either side of the change to summer time.
    cli("calendar", "add", "easter", "--dates", "2027-03-26,2027-03-29",
        "--timezone", "Europe/Berlin")  # fmt: skip
    add(pg_env, "cal-payroll", "quick", "0 9 * * mon-fri", "--timezone", "Europe/Berlin",
        "--start", "2027-03-24T00:00:00+01:00", "--skip-calendar", "easter")  # fmt: skip
    forecast = json.loads(cli("next", "cal-payroll", "--count", "4", "--json").stdout)
    assert [run["occurrence"] for run in forecast["runs"]] == [
        "2027-03-24T08:00:00+00:00",
        "2027-03-25T08:00:00+00:00",
        "2027-03-30T07:00:00+00:00",
        "2027-03-31T07:00:00+00:00",
    ]


def test_buffer_all_runs_each_queued_occurrence_in_turn_up_to_its_limit(pg_env: Env) -> None:
    """Runs of 2.5 s every second under ``buffer_all`` with a queue of at most 3: one run
    at a time, oldest occurrence first, each occurrence sent or, dropped by the full queue,
    counted as skipped."""
    start_worker(pg_env, concurrency=4)
    start_beat(pg_env, BRIDGE_BUFFER_LIMIT="3")
    # Sent late by design: expiring at the next occurrence (a second on) they might not
    # reach a worker in time on a loaded machine.
    add(pg_env, "buffered", "slow", "every 1s", "--overlap", "buffer_all", "--expires", "1m",
        seconds=2.5)  # fmt: skip
    wait_for(lambda: count(pg_env, "buffered", "SUCCESS") >= 5, 60, what="five runs done")
    pg_env.cli("pause", "buffered")
    runs = history(pg_env, "buffered")
    assert {(run["trigger"], run["status"]) for run in runs} <= {
        ("scheduled", status) for status in ("SENT", "RECEIVED", "STARTED", "SUCCESS")
    }, runs
    started = [run for run in runs if run["started_at"] is not None]
    assert spans_disjoint(started)
    by_start = [run["plan_time"] for run in sorted(started, key=lambda run: run["started_at"])]
    assert by_start == sorted(by_start)  # oldest occurrence first
    plans = [run["plan_time"] for run in runs]
    assert steps_between(plans[0], plans[1], SEC) == 1  # the first queued, sent next
    # Every occurrence from the first run to the last is sent, or dropped and counted.
    passed = steps_between(plans[0], plans[-1], SEC) + 1
    assert 1 <= passed - len(plans) <= show(pg_env, "buffered")["skipped_count"]
