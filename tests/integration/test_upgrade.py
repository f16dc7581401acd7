"""Upgrading in place from the previous release, installed for real.

The release 0.1.0 (the commit :data:`PREVIOUS`) is built into a wheel from
the repository's own history and installed with its dependencies into a
virtual environment of its own, once per test session. Its real beat and
worker build a history on PostgreSQL; then this tree's ``migrate`` upgrades
the store, and its beat and worker carry on. Every row of 0.1.0 is compared
before and after, the columns the migrations fill from the runs are checked
against the runs, and the schedules fire on with no occurrence sent twice.
Before the migration, every process of this release refuses the store in one
line naming both revisions and the command to run, and exits with status 1; a
beat that meets such a schema while it runs stops with status 1 too; a beat
started before the first migration of all waits for the tables instead.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from bridge.storage.database import database_for
from tests.support import (
    REPO,
    CeleryProcess,
    Env,
    execute,
    free_port,
    postgres_database,
    redis_broker,
    rows,
    wait_for,
)
from tests.venvs import tool_venv

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_upgrade")]

#: The commit of release 0.1.0, whose schema is at revision 0005.
PREVIOUS = "7e0381f"
#: The revision 0.1.0 leaves, and the one this release expects.
PREVIOUS_REVISION, HEAD = "0005", "0022"
#: The tables of 0.1.0, every row of which is compared before and after the upgrade.
TABLES = ("periodic_task", "task_execution", "beat_instance", "worker_instance")


@dataclass(frozen=True)
class Previous:
    """Release 0.1.0 installed: its virtual environment, and its reference app's folder."""

    venv: Path
    app_folder: Path

    def environ(self, env: Env) -> dict[str, str]:
        """The test's environment for a process of 0.1.0: its ``celery``, its app."""
        environ = env.environ()
        environ["PYTHONPATH"] = str(self.app_folder)
        environ["PATH"] = f"{self.venv / 'bin'}:{environ.get('PATH', '')}"
        return environ

    def command(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "celery"), "-A", "workers.app", *args]

    def cli(self, env: Env, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.command("bridge", *args),
            cwd=env.workdir,
            env=self.environ(env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"0.1.0 bridge {args}: {result.stdout}{result.stderr}"
        return result

    def start(self, env: Env, name: str, *args: str) -> CeleryProcess:
        process = CeleryProcess(name, self.command(*args), env.workdir, self.environ(env))
        env.processes.append(process)
        return process


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Previous:
    """0.1.0 built from the repository's history into a wheel and installed, with the
    extras the test needs, in a fresh virtual environment."""
    where = tmp_path_factory.mktemp("previous")
    source = where / "source"
    source.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS],
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout
    (where / "source.tar").write_bytes(archive)
    with tarfile.open(where / "source.tar") as tar:
        tar.extractall(source, filter="data")
    # 0.1.0's redis extra asked for redis-py alone; the kombu of today's install needs
    # packaging besides (which this release's extra gets through kombu's own). uv builds
    # the source into a wheel and installs it: the release is the point, not the command.
    venv = where / "venv"
    tool_venv(venv, sys.executable, f"{source}[postgres,redis]", "kombu[redis]")
    # Only the reference app on the path: the bridge itself comes from the wheel.
    app_folder = where / "app"
    shutil.copytree(source / "workers", app_folder / "workers")
    return Previous(venv, app_folder)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with postgres_database() as database_url:
        env = Env(tmp_path, database_url, redis_broker())
        try:
            yield env
        finally:
            env.kill_all()


def table(env: Env, columns: str, name: str, order: str = "") -> list[tuple[object, ...]]:
    return [tuple(row) for row in rows(env.database_url, f"SELECT {columns} FROM {name} {order}")]


def columns_of(env: Env) -> dict[str, str]:
    """The columns of each of :data:`TABLES` as the database has them now."""
    return {
        name: ", ".join(
            column
            for (column,) in rows(
                env.database_url,
                "SELECT column_name FROM information_schema.columns WHERE table_name = :t"
                " ORDER BY ordinal_position",
                t=name,
            )
        )
        for name in TABLES
    }


def snapshot(env: Env, columns: dict[str, str]) -> dict[str, list[tuple[object, ...]]]:
    """Every row of :data:`TABLES` in ``columns`` (0.1.0's: a column a later revision adds
    is left out of the comparison, and one it dropped would fail it)."""
    return {name: table(env, columns[name], name, "ORDER BY 1") for name in TABLES}


def runs_of(env: Env, name: str) -> list[tuple[str, str, datetime]]:
    """The status, trigger and plan time of each run of schedule ``name``."""
    return [
        tuple(row)
        for row in rows(
            env.database_url,
            "SELECT r.status, r.trigger, r.plan_time FROM task_execution r"
            " JOIN periodic_task p ON p.id = r.periodic_task_id WHERE p.name = :name",
            name=name,
        )
    ]


def settled(env: Env) -> bool:
    """No run of the history is still open."""
    return rows(
        env.database_url,
        "SELECT count(*) FROM task_execution WHERE status IN ('PENDING', 'SENT', 'RECEIVED',"
        " 'STARTED', 'RETRY')",
    ) == [(0,)]


def build_history(env: Env, previous: Previous) -> None:
    """0.1.0's beat and worker fire a schedule that succeeds, one that fails and one that
    retries; a paused one stays as it is. Stopped once each has ended runs."""
    previous.cli(env, "migrate")
    for name, task, timer in (
        ("ticks", "workers.app.quick", "every 1s"),
        ("fails", "workers.app.fail", "every 2s"),
        ("retries", "workers.app.flaky", "every 3s"),
    ):
        previous.cli(env, "add", name, "--task", task, "--timer", timer)
    previous.cli(env, "add", "paused", "--task", "workers.app.quick", "--timer", "@daily")
    previous.cli(env, "pause", "paused", "--note", "kept as it was")
    worker = previous.start(env, "old-worker", "worker", "-l", "info", "-c", "2")
    worker.wait_log("ready", timeout=120)
    beat = previous.start(env, "old-beat", "beat", "-S", "bridge", "-l", "info")

    def ended(name: str, status: str) -> int:
        return sum(1 for run in runs_of(env, name) if run[0] == status)

    wait_for(
        lambda: (
            ended("ticks", "SUCCESS") >= 4
            and ended("fails", "FAILURE") >= 2
            and ended("retries", "SUCCESS") >= 1
        ),
        90,
        what="0.1.0's runs",
    )
    beat.stop()
    wait_for(lambda: settled(env), 60, what="0.1.0's open runs to end")
    worker.stop()
    assert errors(worker.log + beat.log) == [], worker.log[-4000:] + beat.log[-4000:]


def errors(log: str) -> list[str]:
    """The lines of ``log`` logged at ERROR or above, but the failing task's own."""
    return [
        line
        for line in log.splitlines()
        if ("ERROR/" in line or "CRITICAL/" in line)
        and "raised unexpected: RuntimeError('this task always fails')" not in line
    ]


def refusals_before_migrate(env: Env) -> None:
    """Each process of this release against 0.1.0's schema: one line, exit 1, nothing sent."""
    runs = table(env, "id", "task_execution", "ORDER BY id")
    expected = (
        f"Error: schema: database {env.database_url} is at revision"
        f" {PREVIOUS_REVISION}; this release (celery-periodic-bridge 0.2.0) expects revision"
        f" {HEAD}: run `celery -A APP bridge migrate`"
    )
    for args in (("ls",), ("serve", "--port", str(free_port())), ("stats", "ticks")):
        result = env.cli(*args, check=False)
        assert (result.returncode, result.stderr.splitlines()) == (1, [expected]), result
    for kind in ("beat", "worker"):
        process = env.start(kind)
        wait_for(lambda process=process: process.popen.poll() is not None, 60, what=kind)
        assert process.popen.returncode == 1, process.log
        assert expected in process.log.splitlines(), process.log
        assert "Traceback" not in process.log, process.log
    assert table(env, "id", "task_execution", "ORDER BY id") == runs


def test_an_upgrade_from_0_1_0_keeps_everything_and_fires_on(env: Env, previous: Previous) -> None:
    build_history(env, previous)
    assert table(env, "version_num", "alembic_version") == [(PREVIOUS_REVISION,)]
    columns = columns_of(env)
    before = snapshot(env, columns)

    refusals_before_migrate(env)

    migrated = env.cli("migrate").stdout.strip()
    assert migrated.endswith(f": migrated from {PREVIOUS_REVISION} to {HEAD}"), migrated
    assert env.cli("migrate").stdout.strip().endswith(f": already at {HEAD}, nothing to do")
    assert snapshot(env, columns) == before

    # What the migrations filled from the runs is what the runs say.
    of_schedule = "FROM task_execution r WHERE r.periodic_task_id = p.id"
    tallied = "FROM schedule_tally t WHERE t.periodic_task_id = p.id"
    derived = table(
        env,
        "p.name, p.success_count, p.failure_count, p.last_success_at, p.last_failure_at,"
        f" (SELECT count(*) {of_schedule} AND r.status = 'SUCCESS'),"
        f" (SELECT count(*) {of_schedule} AND r.status IN ('FAILURE', 'LOST')),"
        f" (SELECT max(r.finished_at) {of_schedule} AND r.status = 'SUCCESS'),"
        f" (SELECT max(r.finished_at) {of_schedule} AND r.status = 'FAILURE'),"
        f" (SELECT coalesce(sum(t.success), 0) {tallied}),"
        f" (SELECT coalesce(sum(t.failure + t.lost), 0) {tallied})",
        "periodic_task p",
        "WHERE p.name IN ('ticks', 'fails', 'retries') ORDER BY p.name",
    )
    for name, *filled, ran, failed, success_at, failure_at, tally_ran, tally_failed in derived:
        assert filled == [ran, failed, success_at, failure_at], name
        assert (tally_ran, tally_failed) == (ran, failed), name
    assert [row[3] is not None for row in derived] == [False, True, True]  # fails, retries, ticks
    assert derived[0][4] is not None
    # The statistics count the runs whose durations they show.
    stats = env.cli("stats", "ticks").stdout
    ticks_ran = derived[2][5]
    assert f"SUCCESS {ticks_ran}" in stats and "duration       p50 " in stats, stats
    # 0.1.0 checks nothing: its CLI reads the migrated store without a word, which is why
    # docs/operations.md says to stop every process of 0.1.0 before migrating.
    assert "ticks" in previous.cli(env, "ls").stdout

    # The schedules fire on under this release, from where 0.1.0 left them.
    last_plans = {
        name: max(plan for _, trigger, plan in runs_of(env, name) if trigger == "scheduled")
        for name in ("ticks", "fails")
    }

    def fired_on(name: str) -> bool:
        return any(
            plan > last_plans[name] and status in ("SUCCESS", "FAILURE")
            for status, _, plan in runs_of(env, name)
        )

    worker = env.start("worker")
    worker.wait_log("ready", timeout=120)
    beat = env.start("beat")
    wait_for(lambda: all(fired_on(name) for name in last_plans), 60, what="this release's runs")
    beat.stop()
    worker.stop()
    assert errors(worker.log + beat.log) == [], worker.log[-4000:] + beat.log[-4000:]
    for name in ("ticks", "fails", "retries"):
        occurrences = [plan for _, trigger, plan in runs_of(env, name) if trigger == "scheduled"]
        assert len(occurrences) == len(set(occurrences)), f"{name}: an occurrence sent twice"
    assert runs_of(env, "paused") == []
    # 0.1.0's runs are still there as they were.
    runs = before["task_execution"]
    ids = ", ".join(f"'{row[0]}'" for row in runs)
    assert (
        table(env, columns["task_execution"], "task_execution", f"WHERE id IN ({ids}) ORDER BY 1")
        == runs
    )


def test_a_beat_started_before_the_first_migrate_waits_for_the_tables(tmp_path: Path) -> None:
    """The one mismatch beat waits on rather than refuses: no tables yet (a deployment that
    starts beat beside its migrate job). It says so once, then fires once they are there.
    The revisions the migration passes through on its way (SQLite commits each) are the
    migration under way, not a schema to refuse."""
    env = Env(tmp_path, f"sqlite:///{tmp_path / 'bridge.db'}", None)
    try:
        beat = env.start("beat")
        # The scheduler's own line (the recorder the app installs says so first, in words
        # of its own, before the scheduler has asked).
        beat.wait_log("has no bridge tables", timeout=60)
        wait_for(lambda: "; waiting for it" in beat.log, 60, what="the scheduler to wait")
        database_for(env.database_url).migrate("0006")
        database_for(env.database_url).dispose()
        time.sleep(4)  # beat's waits double from 0.5 s: it asks again while behind
        assert beat.popen.poll() is None, beat.log[-4000:]
        env.cli("migrate")
        env.cli("add", "first", "--task", "workers.app.quick", "--timer", "every 1s")
        wait_for(lambda: runs_of(env, "first"), 60, what="the first run sent")
        assert beat.popen.poll() is None
        waiting = [line for line in beat.log.splitlines() if line.endswith("waiting for it")]
        assert len(waiting) == 1, beat.log[-4000:]
        assert (
            f"has no bridge tables; this release (celery-periodic-bridge 0.2.0) expects"
            f" revision {HEAD}: run `celery -A APP bridge migrate`" in waiting[0]
        ), waiting
        assert errors(beat.log) == waiting, beat.log[-4000:]
    finally:
        env.kill_all()


def test_a_beat_that_meets_a_schema_it_does_not_match_while_it_runs_exits_1(
    tmp_path: Path,
) -> None:
    """A later release migrates the store under a running beat: beat stops at its next check
    of the schema in one line, and exits with status 1, so that a process manager sees a
    failure, not a clean stop (Celery's loop takes the exit that stops it for a clean one)."""
    env = Env(tmp_path, f"sqlite:///{tmp_path / 'bridge.db'}", None)
    try:
        env.cli("migrate")
        env.cli("add", "first", "--task", "workers.app.quick", "--timer", "every 1s")
        beat = env.start("beat", scheduler="tests.rechecking:RecheckingScheduler")
        wait_for(lambda: runs_of(env, "first"), 60, what="the first run sent")
        execute(env.database_url, f"UPDATE alembic_version SET version_num = '{HEAD}'")
        execute(env.database_url, "UPDATE schema_release SET oldest_release = '0.3.0'")
        wait_for(lambda: beat.popen.poll() is not None, 60, what="beat to stop")
        assert beat.popen.returncode == 1, beat.log[-4000:]
        refusal = (
            f"bridge: schema: database {env.database_url} is at revision {HEAD}, which needs"
            f" celery-periodic-bridge 0.3.0 or later; this release (celery-periodic-bridge"
            f" 0.2.0) expects revision {HEAD}: upgrade the package:"
            " pip install -U celery-periodic-bridge; beat stops"
        )
        assert [line.endswith(refusal) for line in errors(beat.log)] == [True], beat.log[-4000:]
        assert "Traceback" not in beat.log, beat.log[-4000:]
    finally:
        env.kill_all()
