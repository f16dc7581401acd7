"""A beat killed by SIGKILL at each point of the fire sequence: the occurrence still runs once.

Each test kills a real beat process at one point (see :mod:`tests.crashing`),
checks that the database shows the crash happened there, then starts two
ordinary beats on the same database (PostgreSQL; at every point, MariaDB
too). One of them must take the dead instance's rows over and complete the
occurrence: one run record, its task body executed once, the row advanced to
its next occurrence and unmarked. The lease is five minutes, longer than any
test waits: the takeover comes from the dead instance's lock being gone.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bridge import Bridge
from bridge.rules.runs import run_id_for
from tests.crashing import POINTS
from tests.support import Env, execute, quoted, rows, wait_for

pytestmark = pytest.mark.e2e

#: Longer than the tests wait: a takeover must not need the lease to run out.
LEASE = "300"


def in_utc(row: Any) -> SimpleNamespace:
    """A row read straight from the database, its times aware: MySQL gives naive UTC."""
    return SimpleNamespace(
        **{
            key: value.replace(tzinfo=UTC)
            if isinstance(value, datetime) and value.tzinfo is None
            else value
            for key, value in row._mapping.items()
        }
    )


def schedule_row(env: Env) -> Any:
    return in_utc(
        rows(
            env.database_url,
            "SELECT id, worker, marked, nextrun, enabled FROM periodic_task WHERE name = 'crash'",
        )[0]
    )


def runs(env: Env) -> list[Any]:
    found = rows(
        env.database_url,
        f"SELECT id, plan_time, status, {quoted(env.database_url, 'trigger')}"
        " FROM task_execution"
        " WHERE periodic_task_id = (SELECT id FROM periodic_task WHERE name = 'crash')",
    )
    return [in_utc(row) for row in found]


#: Policies the crash tests run under, besides the defaults (skip, catch-up latest).
POLICIES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "buffer_one": {"overlap": "buffer_one"},
    "catchup_all_with_retries": {"catchup": "all", "max_attempts": 3, "backoff": ["1s"]},
}
#: Every crash point under the defaults; the points around the record under the others.
CASES = [(point, "defaults") for point in POINTS] + [
    (point, policy) for policy in POLICIES if policy != "defaults" for point in ("record", "sent")
]


def add_hourly(
    env: Env, names: list[str], journal: Path, anchor: datetime, **policies: Any
) -> list[Any]:
    """Hourly schedules anchored at ``anchor`` whose task journals each body run."""
    from workers.app import app

    api = Bridge(app, database_url=env.database_url)
    try:
        return [
            api.add(
                name,
                task="workers.app.once",
                timer="every 1h",
                kwargs={"path": str(journal)},
                anchor=anchor,
                **policies,
            )
            for name in names
        ]
    finally:
        api.database.dispose()


def add_crash_schedule(env: Env, journal: Path, anchor: datetime, **policies: Any) -> Any:
    """The hourly schedule ``crash`` anchored at ``anchor``; its task journals each body run."""
    [schedule] = add_hourly(env, ["crash"], journal, anchor, **policies)
    return schedule


def add_due_soon(env: Env, journal: Path, policies: dict[str, Any]) -> datetime:
    """The schedule with its first occurrence a few seconds away; returns it."""
    now = datetime.now(UTC).replace(microsecond=0)
    anchor = now + timedelta(seconds=3) - timedelta(hours=1)
    schedule = add_crash_schedule(env, journal, anchor, **policies)
    assert schedule.nextrun is not None
    return schedule.nextrun


def assert_crashed_at(env: Env, point: str, plan: datetime) -> None:
    """The database shows the fire stopped exactly where the hook killed it."""
    row, recorded = schedule_row(env), runs(env)
    advanced = row.nextrun == plan + timedelta(hours=1)
    if point == "mark":
        assert row.worker is not None and not recorded and not advanced
    elif point == "record":
        assert [r.status for r in recorded] == ["PENDING"] and not advanced
    elif point in ("publish", "sent"):
        # Published: the worker may already have picked it up.
        assert len(recorded) == 1 and row.worker is not None and not advanced
        if point == "sent":
            assert recorded[0].status != "PENDING"
    else:
        assert advanced and row.worker is None and len(recorded) == 1


@pytest.mark.parametrize(("point", "policy"), CASES)
def test_a_beat_killed_at_any_point_leaves_one_run(
    server_env: Env, tmp_path: Path, point: str, policy: str
) -> None:
    env = server_env
    journal = tmp_path / "journal"
    env.start("worker")
    plan = add_due_soon(env, journal, POLICIES[policy])

    doomed = env.start(
        "beat",
        scheduler="tests.crashing:CrashingScheduler",
        BRIDGE_TEST_CRASH_AT=point,
        BRIDGE_LEASE_SECONDS=LEASE,
    )
    wait_for(lambda: doomed.popen.poll() is not None, 60, what=f"the beat to die at {point!r}")
    assert doomed.popen.returncode == -signal.SIGKILL
    assert_crashed_at(env, point, plan)

    survivors = [env.start("beat", BRIDGE_LEASE_SECONDS=LEASE) for _ in range(2)]

    def completed() -> bool:
        row, recorded = schedule_row(env), runs(env)
        return (
            row.worker is None
            and row.nextrun == plan + timedelta(hours=1)
            and [r.status for r in recorded] == ["SUCCESS"]
        )

    wait_for(completed, 60, what="another beat to complete the occurrence")
    (run,) = runs(env)
    assert run.plan_time == plan and run.trigger == "scheduled"
    assert journal.read_text() == "ran\n", "the task body ran exactly once"
    # Nobody fires the occurrence again once it is complete.
    fired = [line for b in survivors for line in b.log.splitlines() if "bridge: fired" in line]
    assert len(fired) <= 1, fired
    assert all(beat.popen.poll() is None for beat in survivors)


def test_a_worker_killed_mid_run_leaves_it_lost_and_the_schedule_unblocked(pg_env: Env) -> None:
    env = pg_env
    quick_death = {"BRIDGE_WORKER_TIMEOUT": "3"}
    env.cli(
        "add", "long", "--task", "workers.app.slow", "--timer", "every 2s", "--kwargs",
        '{"seconds": 120}', "--expires", "never",
    )  # fmt: skip
    doomed = env.start("worker", **quick_death)
    env.start("beat", **quick_death)

    def long_runs() -> dict[str, Any]:
        found = rows(env.database_url, "SELECT id, status, worker, error FROM task_execution")
        return {run.id: run for run in found}

    def started() -> list[str]:
        return [run.id for run in long_runs().values() if run.status == "STARTED"]

    (run_id,) = wait_for(started, 60, what="a started run")
    os.killpg(doomed.popen.pid, signal.SIGKILL)  # the worker and its pool, mid-run

    wait_for(lambda: long_runs()[run_id].status == "LOST", 30, what="the run to be marked LOST")
    lost = long_runs()[run_id]
    assert lost.error.startswith(f"worker {lost.worker} silent since ")
    assert lost.error.endswith("presumed dead")
    assert lost.worker.startswith("worker-0@")

    # The schedule is no longer blocked: its next occurrence goes to a new worker.
    env.start("worker", **quick_death)
    wait_for(
        lambda: any(
            r.status == "STARTED" and "worker-2@" in r.worker for r in long_runs().values()
        ),
        60,
        what="the next occurrence started by the new worker",
    )


def test_a_held_occurrence_recorded_by_a_beat_that_died_is_sent_once(
    pg_env: Env, tmp_path: Path
) -> None:
    """Overlap ``buffer_one``: a beat died after recording the held occurrence, before advancing.

    The row's cursor is already past the held occurrence, so only the record's
    PENDING status says its fire was cut short. The database is put in exactly
    the state such a crash leaves (the record of the ``record`` crash point,
    the held column still set, an expired mark of a dead instance); a live
    beat must send that run once and clear the held occurrence.
    """
    env = pg_env
    journal = tmp_path / "journal"
    now = datetime.now(UTC).replace(microsecond=0)
    held = now - timedelta(minutes=1)
    schedule = add_crash_schedule(env, journal, held, overlap="buffer_one")
    following = held + timedelta(hours=1)
    run_id = run_id_for(schedule.id, held)
    execute(
        env.database_url,
        "UPDATE periodic_task SET held = :held, next_occurrence = :following, nextrun = :held,"
        " worker = 'gone:1:dead', marked = :expired WHERE id = :id",
        held=held, following=following, expired=now - timedelta(hours=1), id=schedule.id,
    )  # fmt: skip
    execute(
        env.database_url,
        "INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger,"
        " status, updated_at) VALUES (:id, :schedule, 'workers.app.once', :held, 1,"
        " 'scheduled', 'PENDING', :held)",
        id=run_id, schedule=schedule.id, held=held,
    )  # fmt: skip

    env.start("worker")
    env.start("beat", BRIDGE_LEASE_SECONDS=LEASE)

    def completed() -> bool:
        return [r.status for r in runs(env)] == ["SUCCESS"]

    wait_for(completed, 60, what="the held occurrence to run")
    (run,) = runs(env)
    assert (run.id, run.plan_time) == (run_id, held)
    assert journal.read_text() == "ran\n", "the task body ran exactly once"
    (row,) = rows(
        env.database_url,
        "SELECT held, next_occurrence, nextrun, worker FROM periodic_task WHERE name = 'crash'",
    )
    assert row.held is None and row.worker is None
    assert row.next_occurrence == following and row.nextrun == following


#: Schedules of the burst test: several batches, the first ones full.
BURST = 300


def test_a_beat_killed_in_a_burst_leaves_one_run_per_occurrence(
    pg_env: Env, tmp_path: Path
) -> None:
    """A burst of 300 schedules due at once: a beat killed as it marks its first full batch
    sent leaves every occurrence of the burst to the survivors: one run each, its body run
    once, every row advanced and unmarked."""
    env = pg_env
    journal = tmp_path / "journal"
    now = datetime.now(UTC).replace(microsecond=0)
    anchor = now + timedelta(seconds=6) - timedelta(hours=1)
    add_hourly(env, [f"burst-{i:03d}" for i in range(BURST)], journal, anchor)
    plan = anchor + timedelta(hours=1)
    # On a busy machine adding 300 schedules can outlast the six seconds: those added after
    # the plan's instant would first fall due an hour later. The burst is due at the plan.
    execute(
        env.database_url,
        "UPDATE periodic_task SET next_occurrence = :plan, nextrun = :plan"
        " WHERE name LIKE 'burst-%%'",
        plan=plan,
    )
    env.start("worker")
    doomed = env.start(
        "beat",
        scheduler="tests.crashing:CrashingScheduler",
        BRIDGE_TEST_CRASH_AT="sent",
        BRIDGE_LEASE_SECONDS=LEASE,
    )
    wait_for(lambda: doomed.popen.poll() is not None, 60, what="the beat to die mid-burst")
    assert doomed.popen.returncode == -signal.SIGKILL
    [(held,)] = rows(
        env.database_url, "SELECT count(*) FROM periodic_task WHERE worker IS NOT NULL"
    )
    assert held > 0, "the dead beat held rows of the burst"

    survivors = [env.start("beat", BRIDGE_LEASE_SECONDS=LEASE) for _ in range(2)]

    def completed() -> bool:
        [(done, runs_of_plan, ended)] = rows(
            env.database_url,
            "SELECT"
            " (SELECT count(*) FROM periodic_task WHERE worker IS NULL AND nextrun = :next),"
            " (SELECT count(*) FROM task_execution WHERE plan_time = :plan),"
            " (SELECT count(*) FROM task_execution WHERE status = 'SUCCESS')",
            next=plan + timedelta(hours=1),
            plan=plan,
        )
        return bool(done == runs_of_plan == ended == BURST)

    # About 10 s alone; several times that on a machine busy with other tests.
    try:
        wait_for(completed, 240, what="the survivors to complete the burst")
    except pytest.fail.Exception:
        state = rows(
            env.database_url,
            "SELECT p.worker IS NOT NULL AS marked, p.nextrun = :next AS advanced, r.status,"
            " count(*) FROM periodic_task p LEFT JOIN task_execution r"
            " ON r.periodic_task_id = p.id AND r.plan_time = :plan"
            " WHERE p.name LIKE 'burst-%%' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            next=plan + timedelta(hours=1),
            plan=plan,
        )
        lost = rows(
            env.database_url,
            "SELECT p.name, p.nextrun, p.last_run_id, p.total_run_count FROM periodic_task p"
            " WHERE p.name LIKE 'burst-%%' AND NOT EXISTS (SELECT 1 FROM task_execution r"
            " WHERE r.periodic_task_id = p.id AND r.plan_time = :plan) ORDER BY p.name LIMIT 3",
            plan=plan,
        )
        said = [
            line
            for process in env.processes
            for line in process.log.splitlines()
            if lost and lost[0][0] in line
        ]
        pytest.fail(
            f"the burst was not completed: (marked, advanced, run status, rows) {state};"
            f" rows with no run of the plan {plan}: {lost}; their log lines: {said}"
        )
    [(schedules, runs_total)] = rows(
        env.database_url,
        "SELECT count(DISTINCT periodic_task_id), count(*) FROM task_execution",
    )
    assert schedules == runs_total == BURST, "one run per occurrence"
    assert journal.read_text() == "ran\n" * BURST, "each body ran exactly once"
    assert all(beat.popen.poll() is None for beat in survivors)
