"""``bridge import`` and ``bridge export`` through the real CLI, on SQLite and PostgreSQL.

What a user sees: counts, refusals by line number, standard input, dry runs
and all-or-nothing imports, rows identical to those ``add`` writes, exports
that import back unchanged, a hundred thousand lines, and imported schedules
that beat fires.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.bulk_import import write_lines
from tests.support import (
    CELERY,
    Env,
    execute,
    postgres_database,
    rows,
    wait_for,
)

QUICK = "workers.app.quick"
#: What the CLI prints after ``got '<value>', expected`` is the same as add's; these
#: tests check the line number, the field and the value.
Lines = Sequence[dict[str, Any] | str | bytes]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database named ``bridge_bulk_*``, dropped afterwards.

    Overrides the suite's ``pg_url`` (whose databases are ``bridge_test_*``)
    so that these tests keep to their own names; ``pg_env`` builds on it.
    """
    with postgres_database("bridge_bulk_") as url:
        yield url


@pytest.fixture(params=["embedded_env", "pg_env", "mariadb_env"])
def env(request: pytest.FixtureRequest) -> Env:
    """The embedded default (SQLite + filesystem broker), PostgreSQL + Redis and MariaDB +
    Redis."""
    value: Env = request.getfixturevalue(request.param)
    return value


def write_jsonl(env: Env, lines: Lines) -> Path:
    """A file of the lines: objects as JSON, text as UTF-8, bytes as they are."""
    path = env.workdir / f"import-{uuid.uuid4().hex[:6]}.jsonl"
    with path.open("wb") as out:
        for line in lines:
            if isinstance(line, dict):
                line = json.dumps(line)
            out.write((line if isinstance(line, bytes) else line.encode()) + b"\n")
    return path


def import_file(env: Env, lines: Lines, *options: str) -> subprocess.CompletedProcess[str]:
    return env.cli("import", str(write_jsonl(env, lines)), *options, check=False)


def import_stdin(env: Env, lines: Lines, *options: str) -> subprocess.CompletedProcess[str]:
    """``bridge import -`` with the lines on standard input."""
    with write_jsonl(env, lines).open("rb") as stdin:
        return subprocess.run(
            [*CELERY, "bridge", "import", "-", *options],
            stdin=stdin,
            cwd=env.workdir,
            env=env.environ(),
            capture_output=True,
            text=True,
            timeout=120,
        )


def show(env: Env, name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(env.cli("show", name, "--json").stdout)
    return value


def names(env: Env) -> list[str]:
    return [row["name"] for row in json.loads(env.cli("ls", "--json").stdout)]


def refused_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """Each refusal as ``line N: field: got 'value'``, what a user reads first."""
    return [line.split(", expected ")[0] for line in result.stderr.splitlines()]


# ---------------------------------------------------------------------------- import


def test_import_counts_and_refuses_by_line_number(env: Env) -> None:
    result = import_file(
        env,
        [
            {
                "name": "nightly",
                "task": QUICK,
                "timer": "30 2 * * *",
                "timezone": "Europe/Berlin",
                "kwargs": {"x": 1},
                "overlap": "allow",
                "max_attempts": 3,
                "backoff": "30s,2m",
                "end": "2035-01-01T00:00:00+01:00",
            },
            {"name": "heartbeat", "task": QUICK, "timer": "every 10s", "queue": "fast"},
            "",
            {"name": "typo", "task": QUICK, "timer": "*/5 * * *"},
            {"name": "ghost", "task": "workers.app.nope", "timer": "@daily"},
            "not json",
            {"name": "nightly", "task": QUICK, "timer": "@daily"},
            {"name": "paused", "task": QUICK, "timer": "@hourly", "enabled": False},
            {"name": "odd", "task": QUICK, "timer": "@hourly", "colour": "red"},
            {"name": "late", "task": QUICK, "timer": "at 2020-01-01T00:00:00+00:00"},
            '{"name": "café"}'.encode("latin-1"),
        ],
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == "created 3, updated 0, unchanged 0, refused 7\n"
    assert refused_lines(result) == [
        "line 4: timer: got '*/5 * * *'",
        "line 5: task: got 'workers.app.nope'",
        "line 6: json: got 'not json'",
        "line 7: name: got 'nightly'",
        "line 9: field: got 'colour'",
        "line 10: timer: got 'at 2020-01-01T00:00:00+00:00'",
        """line 11: json: got '{"name": "caf\ufffd"}'""",
    ]
    assert names(env) == ["heartbeat", "nightly", "paused"]

    # A line is what add makes of the same fields.
    env.cli(
        "add",
        "nightly-by-add",
        "--task",
        QUICK,
        "--timer",
        "30 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--kwargs",
        '{"x": 1}',
        "--overlap",
        "allow",
        "--max-attempts",
        "3",
        "--backoff",
        "30s,2m",
        "--end",
        "2035-01-01T00:00:00+01:00",
    )
    env.cli("add", "paused-by-add", "--task", QUICK, "--timer", "@hourly", "--disabled")
    per_call = {"id", "name", "anchor", "created_at", "updated_at"}
    for imported, added in (("nightly", "nightly-by-add"), ("paused", "paused-by-add")):
        line_row, add_row = show(env, imported), show(env, added)
        assert {k: v for k, v in line_row.items() if k not in per_call} == {
            k: v for k, v in add_row.items() if k not in per_call
        }
        assert line_row["anchor"] == line_row["created_at"] == line_row["updated_at"]
    heartbeat = show(env, "heartbeat")
    assert heartbeat["options"] == {"queue": "fast"}
    anchor = datetime.fromisoformat(heartbeat["anchor"])
    assert datetime.fromisoformat(heartbeat["nextrun"]) == anchor + timedelta(seconds=10)


def test_a_second_import_updates_as_edit_pause_and_resume_do(env: Env) -> None:
    first: Lines = [
        {"name": "a", "task": QUICK, "timer": "every 10s"},
        {"name": "b", "task": QUICK, "timer": "0 9 * * *", "kwargs": {"x": 1}},
        {"name": "c", "task": QUICK, "timer": "@hourly", "remaining": 5},
        {"name": "d", "task": QUICK, "timer": "@daily"},
    ]
    assert import_file(env, first).stdout == "created 4, updated 0, unchanged 0, refused 0\n"
    before = {name: show(env, name) for name in "abcd"}

    second = import_file(
        env,
        [
            {"name": "a", "task": QUICK, "timer": "every 20s"},
            {"name": "b", "task": QUICK, "timer": "0 9 * * *", "kwargs": {"x": 2}},
            {"name": "c", "task": QUICK, "timer": "@hourly", "remaining": 9},
            {"name": "d", "task": QUICK, "timer": "@daily", "enabled": False},
            {"name": "e", "task": QUICK, "timer": "@weekly"},
        ],
    )
    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout == "created 1, updated 3, unchanged 1, refused 0\n"
    after = {name: show(env, name) for name in "abcd"}
    # A new timer starts a new grid from now and moves the cursor.
    anchor = datetime.fromisoformat(after["a"]["anchor"])
    assert anchor > datetime.fromisoformat(before["a"]["anchor"])
    assert datetime.fromisoformat(after["a"]["nextrun"]) == anchor + timedelta(seconds=20)
    # Any other change keeps the cursor.
    assert after["b"]["kwargs"] == {"x": 2}
    assert (after["b"]["anchor"], after["b"]["nextrun"]) == (
        before["b"]["anchor"],
        before["b"]["nextrun"],
    )
    assert after["b"]["updated_at"] > before["b"]["updated_at"]
    # remaining is a countdown: the same line with another count leaves it alone.
    assert after["c"] == before["c"]
    assert (after["d"]["enabled"], after["d"]["nextrun"]) == (False, before["d"]["nextrun"])

    resumed = import_file(env, [{"name": "d", "task": QUICK, "timer": "@daily"}])
    assert resumed.stdout == "created 0, updated 1, unchanged 0, refused 0\n"
    assert (show(env, "d")["enabled"], show(env, "d")["note"]) == (True, None)


def test_standard_input_dry_run_and_all_or_nothing(env: Env) -> None:
    lines: Lines = [
        {"name": "one", "task": QUICK, "timer": "@daily"},
        {"name": "two", "task": QUICK, "timer": "@daily", "jitter": "soon"},
        {"name": "three", "task": QUICK, "timer": "@daily"},
    ]
    dry = import_stdin(env, lines, "--dry-run")
    assert dry.returncode == 1
    assert dry.stdout == "dry run, nothing written: created 2, updated 0, unchanged 0, refused 1\n"
    assert refused_lines(dry) == ["line 2: jitter: got 'soon'"]
    atomic = import_file(env, lines, "--all-or-nothing")
    assert atomic.returncode == 1
    assert atomic.stdout == (
        "nothing written (--all-or-nothing): created 2, updated 0, unchanged 0, refused 1\n"
    )
    assert names(env) == []

    valid = [lines[0], lines[2]]
    assert import_stdin(env, valid, "--all-or-nothing").returncode == 0
    assert names(env) == ["one", "three"]
    assert import_stdin(env, valid, "--dry-run").stdout == (
        "dry run, nothing written: created 0, updated 0, unchanged 2, refused 0\n"
    )


# ---------------------------------------------------------------------------- export


def test_export_imports_back_exactly(env: Env) -> None:
    env.cli(
        "add",
        "Zulu",
        "--task",
        QUICK,
        "--timer",
        "every 1h30m after completion",
        "--catchup",
        "all",
        "--catchup-window",
        "2h",
        "--start",
        "2031-01-01T09:00:00+01:00",
        "--expires",
        "never",
    )
    env.cli("add", "alpha", "--task", QUICK, "--timer", "*/5 * * * *", "--args", "[1, 2]")
    env.cli("pause", "alpha", "--note", "maintenance")
    lines: Lines = [
        {
            "name": "été",
            "task": QUICK,
            "timer": "0 9 * * mon-fri",
            "timezone": "America/New_York",
            "kwargs": {"text": "ü"},
            "options": {"priority": 3, "queue": "reports"},
            "overlap": "buffer_one",
            "jitter": "30s",
            "end": "2040-01-01T00:00:00+00:00",
            "remaining": 7,
            "max_failures": 4,
            "max_attempts": 2,
            "backoff": "10s..10m",
            "alert_after": 3,
            "recover_after": 2,
        },
        {"name": "Beta", "task": QUICK, "timer": "at 2039-06-01T12:00:00+02:00"},
    ]
    assert import_file(env, lines).returncode == 0

    exported = env.cli("export").stdout
    exported_lines = [json.loads(line) for line in exported.splitlines()]
    assert [line["name"] for line in exported_lines] == ["Beta", "Zulu", "alpha", "été"]
    assert exported_lines[2] == {
        "name": "alpha",
        "task": QUICK,
        "timer": "*/5 * * * *",
        "timezone": "UTC",
        "args": [1, 2],
        "enabled": False,
    }
    assert (exported_lines[3]["alert_after"], exported_lines[3]["recover_after"]) == (3, 2)
    path = env.workdir / "schedules.jsonl"
    assert env.cli("export", str(path)).stdout == ""
    assert path.read_text(encoding="utf-8") == exported

    again = env.cli("import", str(path))
    assert again.stdout == "created 0, updated 0, unchanged 4, refused 0\n"
    execute(env.database_url, "DELETE FROM periodic_task")
    assert env.cli("import", str(path)).stdout == "created 4, updated 0, unchanged 0, refused 0\n"
    assert env.cli("export").stdout == exported


def test_calendars_and_a_canvas_travel_with_their_schedules(env: Env) -> None:
    """export writes each calendar before the schedules, which may skip it, and a canvas
    as its schedule's signature; import into an empty store makes them again, and a second
    import changes nothing. A calendar line that is wrong is refused naming its field."""
    env.cli("calendar", "add", "shut", "--dates", "2026-12-24,2026-12-25",
            "--timezone", "Europe/Berlin")  # fmt: skip
    env.cli("calendar", "add", "night", "--cron", "* 0-5 * * *")
    chain = {"subtask_type": "chain", "kwargs": {"tasks": [{"task": QUICK}, {"task": QUICK}]}}
    lines: Lines = [
        {"name": "payroll", "task": QUICK, "timer": "0 9 * * mon-fri",
         "skip_calendars": ["shut", "night"]},
        {"name": "etl", "timer": "every 1h", "signature": chain},
    ]  # fmt: skip
    assert import_file(env, lines).returncode == 0
    exported = env.cli("export").stdout
    parsed = [json.loads(line) for line in exported.splitlines()]
    assert parsed[:2] == [
        {"calendar": "night", "cron": "* 0-5 * * *", "timezone": "UTC"},
        {"calendar": "shut", "dates": ["2026-12-24", "2026-12-25"], "timezone": "Europe/Berlin"},
    ]
    assert [line["name"] for line in parsed[2:]] == ["etl", "payroll"]
    assert parsed[2]["task"] == QUICK and parsed[2]["signature"]["subtask_type"] == "chain"
    path = env.workdir / "everything.jsonl"
    path.write_text(exported, encoding="utf-8")
    assert env.cli("import", str(path)).stdout == "created 0, updated 0, unchanged 2, refused 0\n"

    execute(env.database_url, "DELETE FROM periodic_task")
    execute(env.database_url, "DELETE FROM calendar")
    assert env.cli("import", str(path)).stdout == (
        "created 2, updated 0, unchanged 0, refused 0, calendars saved 2\n"
    )
    assert env.cli("export").stdout == exported

    bad: Lines = [
        {"calendar": "broken", "dates": ["2026-02-30"]},
        {"calendar": "extra", "cron": "* * * * *", "colour": "red"},
    ]
    result = import_file(env, bad)
    assert result.returncode == 1
    assert refused_lines(result) == [
        "line 1: dates: got '2026-02-30'",
        "line 2: field: got 'colour'",
    ]
    assert "one of calendar, dates, ranges, cron, timezone (a calendar's line)" in result.stderr


# ---------------------------------------------------------------------------- scale


@pytest.mark.timeout(420)
@pytest.mark.parametrize("store", ["pg_env", "mariadb_env", "embedded_env"])
def test_a_large_file_imports(request: pytest.FixtureRequest, store: str) -> None:
    """On every store, 20,000 lines: ten batches of each statement. bench/bulk_import.py
    measures the speed, with 100,000 lines and more (which take about a minute on
    PostgreSQL alone), so that the suite need not."""
    count = 20_000
    env: Env = request.getfixturevalue(store)
    path = env.workdir / "large.jsonl"
    write_lines(path, count, seed=7, changed=False)
    result = env.cli("import", str(path), timeout=360)
    assert result.stdout == f"created {count}, updated 0, unchanged 0, refused 0\n"
    (totals,) = rows(
        env.database_url,
        "SELECT count(*), count(DISTINCT name), sum(CASE WHEN nextrun IS NULL THEN 1 ELSE 0 END)"
        " FROM periodic_task",
    )
    assert tuple(totals) == (count, count, 0)


def test_import_works_under_a_notify_trigger(pg_env: Env) -> None:
    """A trigger on periodic_task (one that notifies listeners of each change) fires per row."""
    execute(
        pg_env.database_url,
        """
        CREATE FUNCTION bulk_test_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('bulk_test', TG_OP);
            RETURN NULL;
        END $$;
        CREATE TRIGGER bulk_test_notify AFTER INSERT OR UPDATE OR DELETE ON periodic_task
            FOR EACH ROW EXECUTE FUNCTION bulk_test_notify();
        """,
    )
    lines = [{"name": f"n{i:05d}", "task": QUICK, "timer": "@daily"} for i in range(5000)]
    assert import_file(pg_env, lines).stdout == (
        "created 5000, updated 0, unchanged 0, refused 0\n"
    )
    changed = [{**line, "timer": "@hourly"} for line in lines]
    assert import_file(pg_env, changed).stdout == (
        "created 0, updated 5000, unchanged 0, refused 0\n"
    )


# ---------------------------------------------------------------------------- beat


@pytest.mark.e2e
def test_beat_fires_imported_schedules(pg_env: Env) -> None:
    env = pg_env
    assert import_file(
        env,
        [
            {"name": "created", "task": QUICK, "timer": "every 2s", "overlap": "allow"},
            {"name": "retimed", "task": QUICK, "timer": "@yearly"},
            {"name": "paused", "task": QUICK, "timer": "every 2s", "enabled": False},
        ],
    ).stdout == ("created 3, updated 0, unchanged 0, refused 0\n")
    assert import_file(
        env, [{"name": "retimed", "task": QUICK, "timer": "every 2s", "overlap": "allow"}]
    ).stdout == ("created 0, updated 1, unchanged 0, refused 0\n")
    worker = env.start("worker")
    worker.wait_log("ready", timeout=60)
    env.start("beat")

    def succeeded(name: str) -> int:
        runs = json.loads(env.cli("history", name, "--json").stdout)
        return sum(run["status"] == "SUCCESS" for run in runs)

    wait_for(lambda: succeeded("created") >= 2 and succeeded("retimed") >= 2, 90, what="runs")
    env.stop_all()
    assert json.loads(env.cli("history", "paused", "--json").stdout) == []
