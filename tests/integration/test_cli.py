"""Tests of ``celery -A workers.app bridge ...`` through the real CLI subprocess.

Each call spawns a Python process (about a second), so the calls are few: one
round trip and one batch of refusals per backend, the refusals run side by side
in threads (each is a failure that writes nothing).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tests.support import Env, execute, rows

QUICK = "workers.app.quick"
OFFSET = re.compile(r"[+-]\d{2}:\d{2}$")

#: (arguments, field named in the message, value repeated in the message)
Refusal = tuple[Sequence[str], str, str]


def run_all(
    env: Env, calls: Sequence[Sequence[str]], **extra: str
) -> list[subprocess.CompletedProcess[str]]:
    """Run independent CLI calls; results in the order given."""
    return [env.cli(*args, check=False, **extra) for args in calls]


def ls_json(env: Env) -> list[dict[str, Any]]:
    result = env.cli("ls", "--json")
    value: list[dict[str, Any]] = json.loads(result.stdout)
    return value


def assert_one_line_error(result: subprocess.CompletedProcess[str], field: str, value: str) -> None:
    """Non-zero exit, nothing on stdout, one 'Error:' line naming the field and the value."""
    where = f"{result.args[6:]}: {result.stderr!r}"
    assert result.returncode != 0, where
    lines = result.stderr.splitlines()
    assert len(lines) == 1, where
    assert lines[0].startswith("Error:"), where
    assert field in lines[0], where
    assert value in lines[0], where
    assert result.stdout == "", where


def assert_utc_iso(value: str) -> datetime:
    """An ISO-8601 text in UTC, as --json promises."""
    assert value.endswith("+00:00"), value
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0)
    return parsed


# ------------------------------------------------------------------------ round trips


def test_cli_round_trip_on_sqlite(embedded_env: Env) -> None:
    """add, ls, show, next, history, pause, resume and rm as a user types them."""
    env = embedded_env
    added = env.cli("add", "ten", "--task", QUICK, "--timer", "every 10s", "--kwargs", '{"x": 2}')
    assert added.stdout.startswith("added ten: next run ")

    table, listed = run_all(env, [["ls"], ["ls", "--json"]])
    header, line = table.stdout.splitlines()
    assert header.split()[:4] == ["NAME", "TASK", "TIMER", "ENABLED"]
    assert line.split()[:5] == ["ten", QUICK, "every", "10s", "yes"]
    (row,) = json.loads(listed.stdout)
    assert (row["name"], row["task"], row["timer"], row["timezone"]) == (
        "ten",
        QUICK,
        "every 10s",
        "UTC",
    )
    assert (row["args"], row["kwargs"], row["enabled"], row["note"]) == ([], {"x": 2}, True, None)
    anchor = assert_utc_iso(row["anchor"])
    assert assert_utc_iso(row["nextrun"]) == anchor + timedelta(seconds=10)
    assert assert_utc_iso(row["created_at"]) == assert_utc_iso(row["updated_at"]) == anchor

    shown, upcoming, history = run_all(
        env,
        [
            ["show", "ten", "--json"],
            ["next", "ten", "--count", "3"],
            ["history", "ten", "--json"],
        ],
        TZ="Asia/Kolkata",
    )
    assert json.loads(shown.stdout) == row
    lines = upcoming.stdout.splitlines()
    assert len(lines) == 3, lines
    assert all(OFFSET.search(line) for line in lines), lines
    times = [datetime.fromisoformat(line) for line in lines]
    assert {value.utcoffset() for value in times} == {timedelta(hours=5, minutes=30)}
    # 10 s apart; the first is "now" instead when the schedule is already overdue (a slow
    # machine can take longer than 10 s from `add` to `next`), at most 10 s before the second.
    assert times[2] - times[1] == timedelta(seconds=10)
    assert anchor < times[0] < times[1] <= times[0] + timedelta(seconds=10)
    assert json.loads(history.stdout) == []

    env.cli("pause", "ten", "--note", "db maintenance")
    paused = env.cli("ls").stdout.splitlines()[1].split()
    assert paused[:5] == ["ten", QUICK, "every", "10s", "paused"]
    assert paused[-2:] == ["db", "maintenance"]
    assert env.cli("resume", "ten").stdout.startswith("resumed ten: next run ")
    active = json.loads(env.cli("show", "ten", "--json").stdout)
    assert (active["enabled"], active["note"]) == (True, None)
    assert assert_utc_iso(active["nextrun"]) > assert_utc_iso(active["updated_at"])

    assert env.cli("rm", "ten").stdout.strip() == "removed ten"
    assert ls_json(env) == []


# --------------------------------------------------------------------------- refusals

ADD = ["add", "new", "--task", QUICK]

REFUSALS: list[Refusal] = [
    ([*ADD, "--timer", "every 5x"], "timer", "'every 5x'"),
    ([*ADD, "--timer", "61 * * * *"], "timer", "'61 * * * *'"),
    ([*ADD, "--timer", "@daily", "--timezone", "Mars/Olympus"], "timezone", "'Mars/Olympus'"),
    (["add", "new", "--task", "no.such.task", "--timer", "@daily"], "task", "'no.such.task'"),
    ([*ADD, "--timer", "@daily", "--args", '{"a":1}'], "args", """'{"a":1}'"""),
    ([*ADD, "--timer", "@daily", "--args", "not json"], "args", "'not json'"),
    ([*ADD, "--timer", "@daily", "--kwargs", "[1]"], "kwargs", "[1]"),
    (["add", "existing", "--task", QUICK, "--timer", "@daily"], "name", "'existing'"),
    (["history", "existing", "--limit", "0"], "limit", "0"),
    *(
        ([command, "missing"], "name", "'missing'")
        for command in ("show", "rm", "run", "history", "pause", "resume", "next")
    ),
    (["edit", "missing", "--timer", "@daily"], "name", "'missing'"),
]

#: A usage error caught by click itself prints a usage block, not one line.
MISSING_TASK = ["add", "new", "--timer", "@daily"]


def test_cli_refusals_on_sqlite(embedded_env: Env) -> None:
    """Each bad input exits non-zero with one line naming field and value, and writes nothing."""
    env = embedded_env
    # Not due while the refusals run: a due row turns late after its grace (a minute),
    # which ls shows, and a slow machine can take that long over them.
    env.cli("add", "existing", "--task", QUICK, "--timer", "every 1d")
    before = ls_json(env)
    results = run_all(env, [list(args) for args, _, _ in REFUSALS] + [MISSING_TASK])
    for (_args, field, value), result in zip(REFUSALS, results[:-1], strict=True):
        assert_one_line_error(result, field, value)
    usage = results[-1]
    assert usage.returncode != 0
    assert "Error" in usage.stderr
    assert ls_json(env) == before

    env.cli(
        "add", "ext", "--task", "other.project.task", "--timer", "@daily", "--allow-unknown-task"
    )
    assert [(r["name"], r["task"]) for r in ls_json(env)] == [
        ("existing", QUICK),
        ("ext", "other.project.task"),
    ]


def test_cli_round_trip_and_refusals_on_a_server(server_env: Env) -> None:
    """The same commands and a sample of the refusals against PostgreSQL and MariaDB."""
    env = server_env
    env.cli(
        "add",
        "pg",
        "--task",
        QUICK,
        "--timer",
        "*/5 * * * *",
        "--queue",
        "reports",
        "--end",
        "2035-01-01T01:00:00+01:00",
        "--jitter",
        "10s",
    )
    before = ls_json(env)
    (row,) = before
    assert (row["name"], row["timer"], row["options"]) == (
        "pg",
        "*/5 * * * *",
        {"queue": "reports"},
    )
    assert (row["end_at"], row["jitter"]) == ("2035-01-01T00:00:00+00:00", 10.0)
    nextrun = assert_utc_iso(row["nextrun"])
    assert (nextrun.minute % 5, nextrun.second, nextrun.microsecond) == (0, 0, 0)
    refusals: list[Refusal] = [
        REFUSALS[0],
        REFUSALS[2],
        (["add", "pg", "--task", QUICK, "--timer", "@daily"], "name", "'pg'"),
        (["show", "missing"], "name", "'missing'"),
        (["history", "pg", "--limit", "0"], "limit", "0"),
        (["edit", "pg", "--end", "2026-12-01T09:00:00"], "end", "'2026-12-01T09:00:00'"),
        (["edit", "pg", "--max-failures", "0"], "max_failures", "'0'"),
    ]
    results = run_all(env, [list(args) for args, _, _ in refusals])
    for (_args, field, value), result in zip(refusals, results, strict=True):
        assert_one_line_error(result, field, value)
    assert ls_json(env) == before
    env.cli("rm", "pg")
    assert ls_json(env) == []


# ------------------------------------------------------------------------------ policies

#: Every policy option with a valid value; what show --json then holds.
POLICY_ARGS = [
    "--overlap",
    "buffer_one",
    "--catchup",
    "all",
    "--catchup-window",
    "2h",
    "--jitter",
    "30s",
    "--start",
    "2031-01-01T09:00:00+01:00",
    "--end",
    "2032-01-01T00:00:00+00:00",
    "--remaining",
    "10",
    "--max-failures",
    "3",
    "--max-attempts",
    "4",
    "--backoff",
    "30s,2m,10m",
    "--expires",
    "10m",
]
POLICY_JSON = {
    "overlap": "buffer_one",
    "catchup": "all",
    "catchup_window": 7200.0,
    "jitter": 30.0,
    "start_at": "2031-01-01T08:00:00+00:00",
    "end_at": "2032-01-01T00:00:00+00:00",
    "remaining": 10,
    "max_failures": 3,
    "max_attempts": 4,
    "backoff": "30s,2m,10m",
    "expires": "10m",
}


def show_json(env: Env, name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(env.cli("show", name, "--json").stdout)
    return value


def test_cli_policies_add_show_edit_on_sqlite(embedded_env: Env) -> None:
    """Every policy option is stored, shown in JSON and in text, and edited one by one."""
    env = embedded_env
    env.cli("add", "pol", "--task", QUICK, "--timer", "@hourly", *POLICY_ARGS)
    shown, text = run_all(env, [["show", "pol", "--json"], ["show", "pol"]], TZ="UTC")
    row = json.loads(shown.stdout)
    assert {key: row[key] for key in POLICY_JSON} == POLICY_JSON
    assert row["nextrun"] == row["next_occurrence"] == "2031-01-01T08:00:00+00:00"
    assert (row["failure_streak"], row["held"], row["retry_at"]) == (0, None, None)
    lines = dict(line.split(maxsplit=1) for line in text.stdout.splitlines())
    assert lines["nextrun"] == "2031-01-01 08:00:00+00:00"
    assert (lines["catchup_window"], lines["jitter"], lines["backoff"]) == (
        "2h",
        "30s",
        "30s,2m,10m",
    )
    assert (lines["start_at"], lines["end_at"]) == (
        "2031-01-01 08:00:00+00:00",
        "2032-01-01 00:00:00+00:00",
    )
    assert (lines["skipped_count"], lines["missed_count"], lines["failure_streak"]) == ("0",) * 3
    assert (lines["note"], lines["held"], lines["remaining"]) == ("-", "-", "10")

    env.cli("edit", "pol", "--overlap", "allow", "--jitter", "1m", "--remaining", "none")
    edited = show_json(env, "pol")
    assert (edited["overlap"], edited["jitter"], edited["remaining"]) == ("allow", 60.0, None)
    assert edited["nextrun"] == row["nextrun"]
    assert edited["catchup_window"] == 7200.0  # not given: kept
    env.cli("edit", "pol", "--start", "none", "--end", "none", "--catchup", "none")
    unbounded = show_json(env, "pol")
    assert (unbounded["start_at"], unbounded["end_at"], unbounded["catchup"]) == (
        None,
        None,
        "none",
    )
    assert assert_utc_iso(unbounded["nextrun"]) < assert_utc_iso(row["nextrun"])

    # A fixed-delay schedule waiting for its run has no next run: show and ls say why.
    env.cli("add", "delay", "--task", QUICK, "--timer", "every 1h after completion")
    execute(env.database_url, "UPDATE periodic_task SET nextrun = NULL WHERE name = 'delay'")
    text, table = run_all(env, [["show", "delay"], ["ls"]])
    assert "nextrun          after the running run completes" in text.stdout.splitlines()
    assert "after the running run completes" in table.stdout


POLICY_REFUSALS: list[tuple[str, str, str]] = [
    ("--overlap", "sometimes", "overlap"),
    ("--catchup", "most", "catchup"),
    ("--catchup-window", "soon", "catchup_window"),
    ("--jitter", "-5s", "jitter"),
    ("--start", "2026-12-01T09:00:00", "start"),
    ("--end", "2026-13-01T00:00:00+00:00", "end"),
    ("--remaining", "0", "remaining"),
    ("--max-failures", "three", "max_failures"),
    ("--max-attempts", "none", "max_attempts"),
    ("--backoff", "10m..10s", "backoff"),
    ("--expires", "later", "expires"),
]


def test_cli_policy_and_run_refusals_on_sqlite(embedded_env: Env) -> None:
    """Each policy option, resume, run and backfill refuse a bad value in one line, exit 1."""
    env = embedded_env
    # Due only in the first two hours of a year, not while the refusals run (a due row turns
    # late after its minute of grace, which ls shows); seven occurrences in the backfill's hour.
    env.cli("add", "existing", "--task", QUICK, "--timer", "*/10 0,1 1 1 *")
    env.cli("add", "delay", "--task", QUICK, "--timer", "every 1h after completion")
    before = ls_json(env)
    refusals: list[Refusal] = [
        *(([*ADD, "--timer", "@daily", o, v], f, repr(v)) for o, v, f in POLICY_REFUSALS),
        *((["edit", "existing", o, v], f, repr(v)) for o, v, f in POLICY_REFUSALS),
        (["resume", "existing", "--from", "later"], "from", "'later'"),
        (["run", "existing", "--overlap", "buffer_one"], "overlap", "'buffer_one'"),
        (
            ["backfill", "existing", "--from", "yesterday", "--to", "2026-01-01T00:00:00+00:00"],
            "from",
            "'yesterday'",
        ),
        (
            [
                "backfill",
                "existing",
                "--from",
                "2026-01-02T00:00:00+00:00",
                "--to",
                "2026-01-01T00:00:00+00:00",
            ],
            "to",
            "'2026-01-01T00:00:00+00:00'",
        ),
        (
            [
                "backfill",
                "existing",
                "--from",
                "2026-01-01T00:00:00+00:00",
                "--to",
                "2026-01-01T01:00:00+00:00",
                "--limit",
                "6",
            ],
            "to",
            "at most 6 occurrences",
        ),
        (
            [
                "backfill",
                "delay",
                "--from",
                "2026-01-01T00:00:00+00:00",
                "--to",
                "2026-01-01T01:00:00+00:00",
            ],
            "timer",
            "'every 1h after completion'",
        ),
    ]
    results = run_all(env, [list(args) for args, _, _ in refusals])
    for (_args, field, value), result in zip(refusals, results, strict=True):
        assert_one_line_error(result, field, value)
        assert result.returncode == 1, result.args
    assert ls_json(env) == before
    assert rows(env.database_url, "SELECT id FROM task_execution") == []


def test_cli_resume_run_and_backfill_on_sqlite(embedded_env: Env) -> None:
    """resume --from catchup|now, run --overlap skip while a run is open, backfill."""
    env = embedded_env
    env.cli("add", "job", "--task", QUICK, "--timer", "*/10 * * * *")
    env.cli("pause", "job", "--note", "deploying")
    missed = "2026-01-01 00:00:00.000000"  # SQLite's stored form of a UTC time
    execute(
        env.database_url,
        "UPDATE periodic_task SET next_occurrence = :t, nextrun = :t, failure_streak = 2 "
        "WHERE name = 'job'",
        t=missed,
    )
    resumed = env.cli("resume", "job", "--from", "catchup", TZ="UTC")
    assert resumed.stdout.strip() == "resumed job: next run 2026-01-01 00:00:00+00:00"
    row = show_json(env, "job")
    assert row["nextrun"] == row["next_occurrence"] == "2026-01-01T00:00:00+00:00"
    assert (row["enabled"], row["note"], row["failure_streak"]) == (True, None, 0)
    env.cli("pause", "job")
    env.cli("resume", "job")
    row = show_json(env, "job")
    assert assert_utc_iso(row["nextrun"]) > assert_utc_iso(row["updated_at"])

    # A manual run, marked as running by a worker: a skip-run is refused and writes nothing.
    run_id = env.cli("run", "job").stdout.split()[-1]
    execute(env.database_url, "UPDATE task_execution SET status = 'STARTED'")
    refused = env.cli("run", "job", "--overlap", "skip", check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"Error: run 'job': skipped: run {run_id} is still STARTED (overlap skip)"
    )
    assert len(rows(env.database_url, "SELECT id FROM task_execution")) == 1

    first = env.cli(
        "backfill", "job", "--from", "2026-01-01T00:00:00+00:00", "--to", "2026-01-01T00:40:00Z"
    )
    assert first.stdout.strip() == "backfilled job: 5 runs sent, 0 already recorded"
    again = env.cli(
        "backfill", "job", "--from", "2026-01-01T01:20:00+01:00", "--to", "2026-01-01T00:50:00Z"
    )
    assert again.stdout.strip() == "backfilled job: 1 run sent, 3 already recorded"
    runs = json.loads(env.cli("history", "job", "--json").stdout)
    backfilled = sorted(r["plan_time"] for r in runs if r["trigger"] == "backfill")
    assert backfilled == [f"2026-01-01T00:{m}0:00+00:00" for m in range(6)]
    assert {r["status"] for r in runs if r["trigger"] == "backfill"} == {"SENT"}
