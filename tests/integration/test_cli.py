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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from tests.support import Env

QUICK = "workers.app.quick"
OFFSET = re.compile(r"[+-]\d{2}:\d{2}$")

#: (arguments, field named in the message, value repeated in the message)
Refusal = tuple[Sequence[str], str, str]


def run_all(
    env: Env, calls: Sequence[Sequence[str]], **extra: str
) -> list[subprocess.CompletedProcess[str]]:
    """Run independent CLI calls in parallel; results in the order given."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: env.cli(*args, check=False, **extra), calls))


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
    assert [b - a for a, b in pairwise(times)] == [timedelta(seconds=10)] * 2
    assert times[0] > anchor
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
    env.cli("add", "existing", "--task", QUICK, "--timer", "every 10s")
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


def test_cli_round_trip_and_refusals_on_postgres(pg_env: Env) -> None:
    """The same commands and a sample of the refusals against PostgreSQL."""
    env = pg_env
    env.cli("add", "pg", "--task", QUICK, "--timer", "*/5 * * * *", "--queue", "reports")
    before = ls_json(env)
    (row,) = before
    assert (row["name"], row["timer"], row["options"]) == (
        "pg",
        "*/5 * * * *",
        {"queue": "reports"},
    )
    nextrun = assert_utc_iso(row["nextrun"])
    assert (nextrun.minute % 5, nextrun.second, nextrun.microsecond) == (0, 0, 0)
    refusals: list[Refusal] = [
        REFUSALS[0],
        REFUSALS[2],
        (["add", "pg", "--task", QUICK, "--timer", "@daily"], "name", "'pg'"),
        (["show", "missing"], "name", "'missing'"),
        (["history", "pg", "--limit", "0"], "limit", "0"),
    ]
    results = run_all(env, [list(args) for args, _, _ in refusals])
    for (_args, field, value), result in zip(refusals, results, strict=True):
        assert_one_line_error(result, field, value)
    assert ls_json(env) == before
    env.cli("rm", "pg")
    assert ls_json(env) == []
