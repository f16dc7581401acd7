"""Schedules that send a Celery canvas, with a real beat, workers, PostgreSQL and Redis.

One run covers the whole canvas: it starts with the first task, ends with the
last (each of a group's), fails at the first failure, and the overlap policy
sees it open all along. Flower and the workers see each task as usual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import Env, rows, wait_for

pytestmark = pytest.mark.postgres

#: Chords need a result backend, and their tasks' results kept.
KEPT = {"ignore_result": False}


def task(name: str, kwargs: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """One task's signature, in Celery's JSON form."""
    return {
        "task": f"workers.app.{name}",
        "args": [],
        "kwargs": kwargs or {},
        "options": dict(KEPT),
        "subtask_type": None,
        "immutable": True,
        **extra,
    }


def composite(kind: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "task": f"celery.{kind}",
        "args": [],
        "kwargs": kwargs,
        "options": {},
        "subtask_type": kind,
        "immutable": False,
    }


def written(tmp_path: Path, name: str, canvas: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(canvas))
    return str(path)


def runs_of(env: Env, name: str) -> list[Any]:
    return rows(
        env.database_url,
        "SELECT t.id, t.status, t.trigger, t.plan_time, t.started_at, t.finished_at,"
        " t.runtime, t.result, t.error FROM task_execution t"
        " JOIN periodic_task p ON p.id = t.periodic_task_id"
        " WHERE p.name = :name ORDER BY t.plan_time",
        name=name,
    )


@pytest.fixture
def backend(pg_env: Env, redis_url: str) -> dict[str, str]:
    """The result backend every process of the test shares."""
    return {"CELERY_RESULT_BACKEND": redis_url}


def test_a_chain_is_one_run_from_its_first_task_to_its_last(
    pg_env: Env, backend: dict[str, str], tmp_path: Path
) -> None:
    """Beat sends a chain every second under overlap ``skip``: each run lasts from its
    first task's start to its last task's end (a 3-second task in between), its result
    is the last task's, no two runs overlap, and the occurrences that fell due meanwhile
    are skipped. No task of the chain gets a record of its own."""
    pg_env.start("worker", "-c", "4", **backend).wait_log("ready", timeout=90)
    pg_env.start("beat", **backend).wait_log("beat: Starting", timeout=60)
    chain = composite(
        "chain",
        tasks=[
            task("quick", {"x": 1, "y": 1}),
            task("slow", {"seconds": 3}),
            task("quick", {"x": 20, "y": 22}),
        ],
    )
    pg_env.cli("add", "nightly-chain", "--timer", "every 1s",
               "--signature-file", written(tmp_path, "chain", chain), **backend)  # fmt: skip
    shown = json.loads(pg_env.cli("show", "nightly-chain", "--json").stdout)
    assert shown["task"] == "workers.app.quick"
    assert shown["signature"]["subtask_type"] == "chain"

    def two_done() -> list[Any] | None:
        done = [run for run in runs_of(pg_env, "nightly-chain") if run.status == "SUCCESS"]
        return done if len(done) >= 2 else None

    done = wait_for(two_done, 90, what="two runs of the chain to succeed")
    for run in done:
        assert run.result == "42", run
        assert run.runtime >= 3, run
        assert run.error is None
    spans = sorted((run.started_at, run.finished_at) for run in done)
    assert spans[0][1] <= spans[1][0], spans
    everything = rows(pg_env.database_url, "SELECT task, trigger FROM task_execution")
    assert all(trigger == "scheduled" for _, trigger in everything), everything
    skipped = json.loads(pg_env.cli("show", "nightly-chain", "--json").stdout)["skipped_count"]
    assert skipped >= 2


def test_a_chord_that_fails_half_way_fails_its_run_with_the_first_error(
    pg_env: Env, backend: dict[str, str], tmp_path: Path
) -> None:
    """A chord whose header has a failing task: the run ends FAILURE with that task's
    error, its body never runs, and the breaker counts it. A group ends only when each of
    its tasks has: its run lasts as long as the slowest."""
    pg_env.start("worker", "-c", "4", **backend).wait_log("ready", timeout=90)
    chord = composite(
        "chord",
        header=[task("quick"), task("fail", {"message": "half-way"}), task("slow", {"seconds": 1})],
        body=task("quick", {"x": 100, "y": 0}),
        kwargs={},
    )
    cli = pg_env.cli
    cli("add", "report-chord", "--timer", "every 1h",
        "--signature-file", written(tmp_path, "chord", chord), **backend)  # fmt: skip
    run_id = cli("run", "report-chord", process=True, **backend).stdout.split()[-1]

    def ended(name: str) -> Any:
        found = [run for run in runs_of(pg_env, name) if run.status not in ("SENT", "STARTED")]
        return found[0] if found else None

    run = wait_for(lambda: ended("report-chord"), 60, what="the chord's run to end")
    assert run.id == run_id
    assert run.status == "FAILURE"
    assert run.error == "RuntimeError: half-way"
    assert run.result is None  # the body never ran
    shown = json.loads(cli("show", "report-chord", "--json").stdout)
    assert shown["failure_count"] == 1

    group = composite("group", tasks=[task("quick"), task("slow", {"seconds": 3})])
    cli("add", "fan-out", "--timer", "every 1h",
        "--signature-file", written(tmp_path, "group", group), **backend)  # fmt: skip
    cli("run", "fan-out", process=True, **backend)
    run = wait_for(lambda: ended("fan-out"), 60, what="the group's run to end")
    assert run.status == "SUCCESS"
    assert run.runtime >= 3, run


def test_a_canvas_is_checked_before_anything_is_written(pg_env: Env, tmp_path: Path) -> None:
    """A canvas naming a task the app does not register, or of the wrong shape, is refused
    in one line naming the part at fault; nothing is written."""
    unknown = composite("chain", tasks=[task("quick"), task("nope")])
    refused = pg_env.cli("add", "bad-canvas", "--timer", "every 1h", "--signature-file",
                         written(tmp_path, "unknown", unknown), check=False)  # fmt: skip
    assert refused.returncode == 1
    assert "signature: got 'workers.app.nope', expected a canvas whose every task" in (
        refused.stderr
    )
    shapeless = composite("group", tasks=[])
    refused = pg_env.cli("add", "bad-canvas", "--timer", "every 1h", "--signature-file",
                         written(tmp_path, "empty", shapeless), check=False)  # fmt: skip
    assert refused.returncode == 1
    assert "signature.tasks: got [], expected a list of one or more signatures" in refused.stderr
    refused = pg_env.cli("add", "bad-canvas", "--timer", "every 1h", "--signature-file",
                         str(tmp_path / "missing.json"), check=False)  # fmt: skip
    assert refused.returncode == 1
    assert "signature-file: got" in refused.stderr and "No such file" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "bad-canvas" not in pg_env.cli("ls").stdout


def test_the_python_api_takes_a_celery_canvas_and_knows_its_queues(pg_env: Env) -> None:
    """Bridge.add takes Celery's own objects; the queues its tasks name are among the
    queues the schedules send to (which the overview and the metrics count)."""
    from celery import chain

    from bridge import Bridge
    from workers.app import app, quick, slow

    bridge = Bridge(app, database_url=pg_env.database_url)
    try:
        made = bridge.add(
            "etl",
            timer="0 2 * * *",
            signature=chain(quick.si(1, 1), slow.si(3).set(queue="slow-lane")),
        )
        assert made.task == "workers.app.quick" and made.canvas == (
            "chain(workers.app.quick, workers.app.slow)"
        )
        assert "slow-lane" in bridge.queues()
        edited = bridge.edit("etl", signature="none", task="workers.app.quick")
        assert edited.signature is None
        assert "slow-lane" not in bridge.queues()
    finally:
        bridge.database.dispose()
