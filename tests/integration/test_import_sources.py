"""``bridge import --from``: real django-celery-beat and RedBeat stores, made by their own code.

django-celery-beat and RedBeat are installed from PyPI into a virtualenv of
their own (the pins of ``bench/peers/requirements.txt``), built once per
session under the session's temporary directory. Their code writes the
schedules (``tests/peers/django_source.py``: Django's migrations and the
package's models, on PostgreSQL and on SQLite; ``tests/peers/redbeat_source.py``:
``RedBeatSchedulerEntry`` on Redis). The bridge then imports them, compares
the next fire times with Celery's, disables the source, and a real beat fires
what was imported. The move of docs/migrating.md is walked command by command
with django-celery-beat's own beat running beside the bridge's
(``tests/peers/django_beat.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .. import support
from ..support import REPO, Env, rows, wait_for
from ..venvs import tool_venv

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.xdist_group("test_import_sources")]

PEERS = REPO / "tests" / "peers"
REQUIREMENTS = REPO / "bench" / "peers" / "requirements.txt"


@pytest.fixture(scope="session")
def peer_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """django-celery-beat, RedBeat, sqlalchemy-celery-beat and ephem from PyPI, in a
    virtualenv of their own, installed once."""
    venv = tmp_path_factory.getbasetemp() / "peers-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        tool_venv(
            venv, sys.executable, "-r", str(REQUIREMENTS), "ephem==4.2.1",
            "sqlalchemy-celery-beat==0.9.1",
        )  # fmt: skip
    return python


def peer(python: Path, script: str, *args: str, **env: str) -> str:
    result = subprocess.run(
        [str(python), str(PEERS / script), *args],
        cwd=PEERS,
        env={**os.environ, "PYTHONPATH": str(PEERS), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def django_source(
    request: pytest.FixtureRequest, tmp_path: Path, peer_python: Path
) -> Iterator[str]:
    """A django-celery-beat database, migrated and filled by django-celery-beat."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'django.db'}"
        peer(peer_python, "django_source.py", SOURCE_DATABASE_URL=url)
        yield url
        return
    fresh = support.postgres_database if request.param == "postgres" else support.mysql_database
    with fresh("bridge_django_") as database:
        url = database.replace("+psycopg://", "://").replace("+pymysql://", "://")
        peer(peer_python, "django_source.py", SOURCE_DATABASE_URL=url)
        yield url


@pytest.fixture
def target_env(request: pytest.FixtureRequest, django_source: str) -> Env:
    """Where the schedules move: a MariaDB store from a MariaDB source (the move of a
    Django project on MySQL), a PostgreSQL store from the others."""
    fixture = "mariadb_env" if django_source.startswith("mysql") else "pg_env"
    env: Env = request.getfixturevalue(fixture)
    return env


def bridge_rows(env: Env) -> dict[str, Any]:
    found = rows(
        env.database_url,
        "SELECT name, timer, timezone, enabled, source, options, args, kwargs, expires,"
        " remaining, last_run_at, total_run_count, description, note, nextrun FROM periodic_task",
    )
    return {row.name: row for row in found}


def test_django_celery_beat_moves_in_and_fires(
    target_env: Env, django_source: str, peer_python: Path
) -> None:
    env = target_env
    dry = env.cli("import", "--from", "django-celery-beat", django_source, "--dry-run", check=False)
    assert dry.returncode == 1, dry.stderr  # two rows are refused
    assert "source (Celery)" in dry.stdout
    assert "<- differs" not in dry.stdout
    assert dry.stdout.strip().splitlines()[-1] == (
        "dry run, nothing written: imported 10 (created 10, updated 0), unchanged 0, "
        "refused 2, approximated 0"
    )
    assert rows(env.database_url, "SELECT name FROM periodic_task") == []
    refused = dict(line.split(": ", 1) for line in dry.stderr.strip().splitlines())
    assert "--approximate" in refused["refused ends-in-a-week"]
    assert "elsewhere.task" in refused["refused needs-a-worker-only"]

    done = env.cli(
        "import", "--from", "django-celery-beat", django_source, "--disable-source",
        "--approximate", "--allow-unknown-task",
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == (
        "imported 12 (created 12, updated 0), unchanged 0, refused 0, approximated 1; "
        "disabled in the source 10"
    )
    found = bridge_rows(env)
    assert found["friday-13"].timer == "celery 0 0 13 * fri"
    assert found["sunset-berlin"].timer == "solar sunset 52.52 13.405"
    assert found["launch"].timer.startswith("at ")
    assert found["launch"].enabled
    weekday = found["weekday-0230-berlin"]
    assert (weekday.timer, weekday.timezone) == ("celery 30 2 * * mon-fri", "Europe/Berlin")
    assert json.loads(weekday.options) == {
        "queue": "reports", "exchange": "reports", "routing_key": "reports.daily",
        "priority": 5, "headers": {"team": "finance"},
    }  # fmt: skip
    assert (weekday.args, weekday.expires, weekday.total_run_count) == ("[1,2]", "10m", 40)
    assert found["every-2s"].description == "fast one"
    assert found["every-2s"].expires == "never"
    assert (found["done-once"].enabled, found["done-once"].remaining) == (False, 0)
    assert found["done-once"].note.startswith("finished")
    assert not found["paused-hourly"].enabled
    assert found["config-heartbeat"].source == "config"
    assert found["quarter-hours"].source == "api"
    source = json.loads(
        peer(peer_python, "django_source.py", "show", SOURCE_DATABASE_URL=django_source)
    )
    assert [name for name, row in source.items() if row["enabled"]] == []

    # Idempotent: a second import changes nothing.
    again = env.cli(
        "import", "--from", "django-celery-beat", django_source, "--approximate",
        "--allow-unknown-task",
    )  # fmt: skip
    assert "imported 0 (created 0, updated 0), unchanged 12" in again.stdout

    # The interval fires from where django-celery-beat left it, on a real beat.
    env.start("worker")
    env.start("beat")
    wait_for(
        lambda: list(
            rows(
                env.database_url,
                "SELECT r.status, r.plan_time, p.last_run_at FROM task_execution r JOIN"
                " periodic_task p ON p.id = r.periodic_task_id WHERE p.name = 'every-2s'"
                " AND r.status = 'SUCCESS'",
            )
        ),
        60,
        what="a run of every-2s",
    )


@pytest.fixture
def sqlalchemy_source(peer_python: Path) -> Iterator[str]:
    """A sqlalchemy-celery-beat store in a schema of its own on PostgreSQL, made by its code."""
    with support.postgres_database("bridge_sqlalchemy_") as database:
        peer(
            peer_python, "sqlalchemy_source.py", SOURCE_DATABASE_URL=database, SOURCE_SCHEMA="beat"
        )
        yield database


def test_sqlalchemy_celery_beat_moves_in(server_env: Env, sqlalchemy_source: str) -> None:
    """Into a store on PostgreSQL, then on MariaDB."""
    env = server_env
    args = ("import", "--from", "sqlalchemy-celery-beat", sqlalchemy_source, "--schema", "beat")
    dry = env.cli(*args, "--dry-run")
    assert "<- differs" not in dry.stdout
    done = env.cli(*args, "--disable-source")
    assert done.stdout.strip().splitlines()[-1] == (
        "imported 3 (created 3, updated 0), unchanged 0, refused 0, approximated 0; "
        "disabled in the source 2"
    )
    found = bridge_rows(env)
    assert (found["ny-mornings"].timer, found["ny-mornings"].timezone) == (
        "celery 0 9 * * 1-5",
        "America/New_York",
    )
    assert json.loads(found["ny-mornings"].options) == {"priority": 7}
    assert found["sydney-noon"].timer == "solar solar_noon -33.8688 151.2093"
    assert not found["sydney-noon"].enabled
    assert found["every-4s"].description == "from sqlalchemy"
    assert rows(sqlalchemy_source, "SELECT name FROM beat.celery_periodictask WHERE enabled") == []
    assert "unchanged 3" in env.cli(*args).stdout


@pytest.fixture
def redbeat_source(redis_url: str, peer_python: Path) -> str:
    prefix = "source-redbeat:"
    peer(peer_python, "redbeat_source.py", SOURCE_REDIS_URL=redis_url, SOURCE_PREFIX=prefix)
    return prefix


def test_redbeat_moves_in_and_fires(
    server_env: Env, redbeat_source: str, peer_python: Path
) -> None:
    """Into a store on PostgreSQL, then on MariaDB."""
    env = server_env
    assert env.broker_url is not None
    url = env.broker_url
    args = ("import", "--from", "redbeat", url, "--prefix", redbeat_source)
    dry = env.cli(*args, "--dry-run", check=False)
    assert "rrule" in dry.stderr and "refused rrule-weekly" in dry.stderr
    assert "<- differs" not in dry.stdout
    done = env.cli(*args, "--disable-source", check=False)
    assert done.stdout.strip().splitlines()[-1] == (
        "imported 4 (created 4, updated 0), unchanged 0, refused 1, approximated 0; "
        "disabled in the source 3"
    )
    found = bridge_rows(env)
    assert found["nightly"].timer == "celery 0 3 1-7 * mon"
    assert json.loads(found["nightly"].options) == {
        "queue": "reports",
        "priority": 3,
        "expires": 120,
    }
    assert found["config-heartbeat"].source == "config"
    assert not found["paused"].enabled
    assert found["every-3s"].last_run_at is not None
    source = json.loads(
        peer(
            peer_python,
            "redbeat_source.py",
            "show",
            SOURCE_REDIS_URL=url,
            SOURCE_PREFIX=redbeat_source,
        )
    )
    assert {name for name, row in source.items() if row["enabled"]} == {"rrule-weekly"}
    again = env.cli(*args, check=False)
    assert "imported 0 (created 0, updated 0), unchanged 4, refused 1" in again.stdout

    env.start("worker")
    env.start("beat")
    wait_for(
        lambda: rows(
            env.database_url,
            "SELECT r.id FROM task_execution r JOIN periodic_task p ON p.id = r.periodic_task_id"
            " WHERE p.name = 'every-3s' AND r.status = 'SUCCESS'",
        ),
        60,
        what="a run of every-3s",
    )


def old_beat(env: Env, peer_python: Path, source: str, name: str) -> support.CeleryProcess:
    """django-celery-beat's own beat on the source (``tests/peers/django_beat.py``), stopped
    with the test's other processes."""
    assert env.broker_url is not None
    process = support.CeleryProcess(
        name,
        [str(peer_python), "-m", "celery", "-A", "django_beat", "beat", "-l", "info",
         "-s", str(env.workdir / f"{name}-schedule")],
        env.workdir,
        {
            **os.environ,
            "PYTHONPATH": str(PEERS),
            "SOURCE_DATABASE_URL": source,
            "SOURCE_BROKER_URL": env.broker_url,
            "SOURCE_QUEUE": "source",
        },
    )  # fmt: skip
    env.processes.append(process)
    return process


def sent_by(beat: support.CeleryProcess, name: str) -> int:
    """How often django-celery-beat's beat has sent schedule ``name``."""
    return beat.log.count(f"Sending due task {name} ")


def bridge_runs(env: Env, name: str) -> int:
    found = rows(
        env.database_url,
        "SELECT r.id FROM task_execution r JOIN periodic_task p ON p.id = r.periodic_task_id"
        " WHERE p.name = :name",
        name=name,
    )
    return len(found)


def test_a_django_project_on_mariadb_moves_over_side_by_side_and_back(
    mariadb_env: Env, peer_python: Path
) -> None:
    """docs/migrating.md, walked command by command: a django-celery-beat store on MariaDB
    moves into a bridge store of its own, both beats running side by side, then back."""
    env = mariadb_env
    with support.mysql_database("bridge_django_") as database:
        source = database.replace("+pymysql://", "://")
        peer(peer_python, "django_source.py", SOURCE_DATABASE_URL=source)
        move = ("import", "--from", "django-celery-beat", source)
        accept = ("--approximate", "--allow-unknown-task")

        # 1. Look first: nothing written, every fire time as Celery's.
        dry = env.cli(*move, "--dry-run", *accept)
        assert "<- differs" not in dry.stdout
        assert dry.stdout.strip().splitlines()[-1].startswith("dry run, nothing written:")
        assert bridge_runs(env, "every-2s") == 0

        # 2. Side by side: the schedules paused in the bridge, the old beat firing them.
        paused = env.cli(*move, "--paused", *accept)
        assert "created 12" in paused.stdout
        env.start("worker")
        env.start("beat")
        first = old_beat(env, peer_python, source, "old-beat-0")
        wait_for(lambda: sent_by(first, "every-2s") >= 3, 60, what="the old beat's sends")
        assert bridge_runs(env, "every-2s") == 0, "paused in the bridge: one beat fires it"

        # 3. Take over: stop the old beat, import again disabling the source.
        assert first.stop() == 0
        done = env.cli(*move, "--disable-source", *accept)
        # Created since: the old beat's own celery.backend_cleanup entry.
        assert "refused 0" in done.stdout and "disabled in the source" in done.stdout
        shown = peer(peer_python, "django_source.py", "show", SOURCE_DATABASE_URL=source)
        assert [name for name, row in json.loads(shown).items() if row["enabled"]] == []
        wait_for(lambda: bridge_runs(env, "every-2s") >= 2, 60, what="the bridge's runs")
        again = old_beat(env, peer_python, source, "old-beat-1")
        again.wait_log("beat: Starting...", timeout=60)
        time.sleep(5)
        assert sent_by(again, "every-2s") == 0, "disabled in the source"

        # 4. Roll back: pause in the bridge, enable in the source, restart the old beat.
        env.cli("pause", "--label", "from:django-celery-beat", "--note", "rolled back")
        support.execute(
            database,
            "UPDATE django_celery_beat_periodictask SET enabled = true,"
            " last_run_at = UTC_TIMESTAMP(6)"
            " WHERE name IN ('every-2s', 'weekday-0230-berlin')",
        )
        assert again.stop() == 0
        after = bridge_runs(env, "every-2s")
        back = old_beat(env, peer_python, source, "old-beat-2")
        wait_for(lambda: sent_by(back, "every-2s") >= 3, 60, what="the old beat firing again")
        assert bridge_runs(env, "every-2s") == after, "paused in the bridge"
