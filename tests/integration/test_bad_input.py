"""Bad input a new user types, each refused in one line naming the field, exit status 1,
nothing written; bad settings and missing extras stop beat and a worker the same way.

Every call is the real CLI (or beat, or worker) in a subprocess. A library
that is "not installed" is hidden by a module of the same name first on the
``PYTHONPATH`` that raises ``ModuleNotFoundError`` when imported, which is
exactly what the import of a missing package raises.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge import Bridge, ValidationError
from tests.integration.test_cli import QUICK, assert_one_line_error, run_all
from tests.support import REPO, Env, rows

HUGE = "99999999999999999999999"


@pytest.fixture(params=["embedded_env", "pg_env", "mariadb_env"])
def env(request: pytest.FixtureRequest) -> Env:
    """The CLI on SQLite, PostgreSQL and MariaDB: huge numbers failed differently on each."""
    found: Env = request.getfixturevalue(request.param)
    return found


def schedules(env: Env) -> list[tuple[object, ...]]:
    """Every column of every schedule: what must not change when a call is refused."""
    return [tuple(row) for row in rows(env.database_url, "SELECT * FROM periodic_task ORDER BY id")]


def test_refused_in_one_line_naming_the_field_and_nothing_written(env: Env) -> None:
    env.cli("add", "job", "--task", QUICK, "--timer", "every 1h")
    env.cli("add", "held", "--task", QUICK, "--timer", "every 1h")
    env.cli("pause", "held", "--note", "holiday")
    before = schedules(env)
    add = ["add", "new", "--task", QUICK, "--timer", "@daily"]
    refusals: list[tuple[list[str], str, str]] = [
        # Numbers no column holds.
        ([*add, "--remaining", HUGE], "remaining", HUGE),
        ([*add, "--max-attempts", HUGE], "max_attempts", HUGE),
        ([*add, "--max-failures", HUGE], "max_failures", HUGE),
        (["edit", "job", "--remaining", HUGE], "remaining", HUGE),
        ([*add, "--options", '{"expires": 1e300}'], "options.expires", "1e+300"),
        (["history", "job", "--limit", HUGE], "limit", HUGE),
        (["next", "job", "--count", "100000000"], "count", "100000000"),
        (["next", "job", "--count", "lots"], "count", "lots"),
        # Names the zone database answers that are no zone to keep, and no zone at all.
        *(
            ([*add, "--timezone", zone], "timezone", repr(zone))
            for zone in ("", "localtime", "Factory", "posix/Europe/Paris", "right/UTC")
        ),
        (["edit", "job", "--timezone", "localtime"], "timezone", "'localtime'"),
        # Names a table, a log line or a shell would not show as they are.
        (["add", "two\nlines", "--task", QUICK, "--timer", "@daily"], "name", "two\\nlines"),
        (["add", " padded", "--task", QUICK, "--timer", "@daily"], "name", "' padded'"),
        (["add", "bell\x07", "--task", QUICK, "--timer", "@daily"], "name", "bell\\x07"),
        # Usage errors: one line and status 1 like the rest, not click's three and 2.
        (["ls", "--bogus"], "--bogus", "--bogus"),
        (["nosuch"], "nosuch", "nosuch"),
        (["show"], "NAME", "Missing argument"),
        # A required option left out: what it takes, not "got None".
        (["add", "new", "--timer", "@daily"], "task", "got nothing, expected --task with a"),
        (["add", "new", "--task", QUICK], "timer", "got nothing, expected --timer with a 5-field"),
        # Changes that change nothing.
        (["edit", "job"], "nothing to change", "--timer"),
        (["pause", "held"], "name", "'held'"),
        (["resume", "job"], "name", "'job'"),
    ]
    results = run_all(env, [args for args, _, _ in refusals])
    for (_args, field, value), result in zip(refusals, results, strict=True):
        assert_one_line_error(result, field, value)
        assert result.returncode == 1, result.args
    assert schedules(env) == before


def test_an_edit_to_the_same_values_writes_nothing(env: Env) -> None:
    env.cli("add", "job", "--task", QUICK, "--timer", "every 1h", "--jitter", "10s")
    before = schedules(env)
    same = env.cli("edit", "job", "--timer", "every 1h", "--jitter", "10s")
    assert same.stdout.startswith("unchanged job: next run ")
    assert schedules(env) == before
    changed = env.cli("edit", "job", "--jitter", "20s")
    assert changed.stdout.startswith("changed job: next run ")
    env.cli("pause", "job")
    renoted = env.cli("pause", "job", "--note", "a new reason")  # a new note is a change
    assert renoted.stdout.strip() == "paused job"


def test_the_api_refuses_numbers_no_column_holds(api: Bridge) -> None:
    for field in ("remaining", "max_attempts", "max_failures", "alert_after", "recover_after"):
        with pytest.raises(ValidationError) as caught:
            api.add("huge", task=QUICK, timer="@daily", **{field: int(HUGE)})  # type: ignore[arg-type]
        assert (caught.value.field, caught.value.value) == (field, int(HUGE))
    api.add("job", task=QUICK, timer="@daily")
    with pytest.raises(ValidationError) as caught:
        api.history("job", limit=2**63)
    assert caught.value.field == "limit"
    with pytest.raises(ValidationError) as caught:
        api.forecast("job", count=1001)
    assert caught.value.field == "count"
    assert [s.name for s in api.list()] == ["job"]


def test_a_bad_setting_or_database_url_is_one_line(embedded_env: Env) -> None:
    """At the CLI, at beat start and at worker start; a password is never repeated."""
    env = embedded_env
    cases = [
        ({"BRIDGE_LEASE_SECONDS": "soon"}, "bridge_lease_seconds", "'soon', expected a number"),
        ({"BRIDGE_WORKER_TIMEOUT": "-5"}, "bridge_worker_timeout", "'-5'"),
        ({"BRIDGE_DATABASE_URL": "oracle://root:secret@db/app"}, "bridge_database_url", "oracle"),
        ({"BRIDGE_DATABASE_URL": "not a url"}, "bridge_database_url", "'not a url'"),
    ]
    for environ, field, value in cases:
        assert_one_line_error(env.cli("ls", check=False, **environ), field, value)
        for kind in ("beat", "worker"):
            process = env.start(kind, **environ)
            assert process.popen.wait(60) == 1, process.log
            lines = [line for line in process.log.splitlines() if "Error:" in line]
            assert len(lines) == 1 and field in lines[0] and value in lines[0], process.log
            assert "Traceback" not in process.log, process.log
            assert "secret" not in process.log, process.log
    assert "secret" not in env.cli("ls", check=False, BRIDGE_DATABASE_URL=cases[2][0][
        "BRIDGE_DATABASE_URL"]).stderr  # fmt: skip


def hiding(tmp_path: Path, *modules: str) -> str:
    """A PYTHONPATH on which importing ``modules`` fails as when they are not installed."""
    shim = tmp_path / "not-installed"
    shim.mkdir(parents=True, exist_ok=True)
    for module in modules:
        (shim / f"{module}.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
        )
    return f"{shim}:{REPO}"


def test_a_missing_extra_is_named_at_migrate_beat_start_and_first_send(
    pg_env: Env, tmp_path: Path
) -> None:
    env = pg_env
    env.cli("add", "job", "--task", QUICK, "--timer", "@daily")
    no_psycopg = {"PYTHONPATH": hiding(tmp_path / "pg", "psycopg")}
    no_redis = {"PYTHONPATH": hiding(tmp_path / "redis", "redis")}
    no_packaging = {"PYTHONPATH": hiding(tmp_path / "packaging", "packaging")}
    postgres = "pip install 'celery-periodic-bridge[postgres]'"
    redis = "pip install 'celery-periodic-bridge[redis]'"

    # A library hidden from a process of its own: this process has it loaded.
    result = env.cli("migrate", check=False, process=True, **no_psycopg)
    assert_one_line_error(result, "bridge_database_url", postgres)
    for hidden in (no_redis, no_packaging):
        result = env.cli("run", "job", check=False, process=True, **hidden)
        assert_one_line_error(result, "broker_url", redis)
    assert rows(env.database_url, "SELECT id FROM task_execution") == []

    for hidden, remedy in ((no_psycopg, postgres), (no_redis, redis), (no_packaging, redis)):
        beat = env.start("beat", **hidden)
        assert beat.popen.wait(60) == 1, beat.log
        assert remedy in beat.log and "Traceback" not in beat.log, beat.log


def test_text_and_json_no_store_can_keep_are_refused_at_the_cli_and_import(
    server_env: Env,
) -> None:
    """Lone surrogates (a byte that is not UTF-8 in an argument arrives as one), NUL,
    NaN and Infinity: each refused naming its field, with nothing written, by the CLI and
    by ``bridge import``, on PostgreSQL and MariaDB; the schedule reads back as it was."""
    env = server_env
    env.cli("add", "job", "--task", QUICK, "--timer", "every 1h", "--kwargs", '{"a": "é"}')
    before = schedules(env), rows(env.database_url, "SELECT * FROM audit_log ORDER BY id")
    add = ["add", "new", "--task", QUICK, "--timer", "@daily"]
    refusals: list[tuple[list[str], str, str]] = [
        ([*add, "--kwargs", '{"a": NaN}'], "kwargs", "NaN"),
        ([*add, "--args", "[Infinity]"], "args", "Infinity"),
        ([*add, "--args", '["\\udfff"]'], "args", "udfff"),
        ([*add, "--options", '{"headers": {"h": "\\u0000"}}'], "options", "u0000"),
        ([*add, "--queue", "q\udcff"], "queue", "udcff"),
        ([*add, "--jitter", "nan"], "jitter", "nan"),
        (["add", "bad\udcff", "--task", QUICK, "--timer", "@daily"], "name", "udcff"),
        (["edit", "job", "--kwargs", '{"\\ud800": 1}'], "kwargs", "ud800"),
        (["edit", "job", "--timer", "every 1h\udcff"], "timer", "udcff"),
        (["pause", "job", "--note", "away\udcff"], "note", "udcff"),
        (["show", "job\udcff"], "name", "udcff"),
        (["ls", "--prefix", "j\udcff"], "prefix", "udcff"),
    ]
    results = run_all(env, [args for args, _, _ in refusals])
    for (_args, field, value), result in zip(refusals, results, strict=True):
        assert_one_line_error(result, field, value)
        assert "Traceback" not in result.stderr
    head = f'{{"task": "{QUICK}", "timer": "@daily", '
    lines = [
        head + '"name": "i1", "kwargs": {"a": NaN}}',
        head + '"name": "i2", "args": ["\\udfff"]}',
        head + '"name": "i3", "jitter": Infinity}',
        head + '"name": "i4\\u0000"}',
        "[" * 5000 + "]" * 5000,
    ]
    path = env.workdir / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    imported = env.cli("import", str(path), check=False)
    assert imported.returncode == 1, imported.stderr
    assert imported.stdout == "created 0, updated 0, unchanged 0, refused 5\n"
    assert "Traceback" not in imported.stderr
    assert (schedules(env), rows(env.database_url, "SELECT * FROM audit_log ORDER BY id")) == before
    shown = json.loads(env.cli("show", "job", "--json").stdout)
    assert shown["kwargs"] == {"a": "é"}
