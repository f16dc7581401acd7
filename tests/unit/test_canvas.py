"""A canvas a schedule sends: checked in Celery's JSON form, and marked for one run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery, chain, chord, group
from celery.canvas import Signature, _chain
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ValidationError
from bridge.rules.canvas import HEADER_PART, HEADER_RUN, LAST, parse_canvas, run_of
from bridge.rules.definition import build_definition

app = Celery("canvas-tests", set_as_current=False)
a = app.signature("app.a", args=(1,), options={"queue": "reports"})
b = app.signature("app.b", immutable=True)
c = app.signature("app.c", kwargs={"to": "ops"})
EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)


def leaves(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of a Celery JSON canvas, in order."""
    kind = node["subtask_type"]
    if kind is None:
        return [node]
    if kind == "chord":
        parts = [*node["kwargs"]["header"], node["kwargs"]["body"]]
    else:
        parts = node["kwargs"]["tasks"]
    return [leaf for part in parts for leaf in leaves(part)]


def marked(canvas: Any) -> list[dict[str, Any]]:
    parsed = parse_canvas(json.loads(json.dumps(canvas)))
    tree = parsed.marked("run-1", {"bridge_schedule_id": 7}, {"priority": 3}, EXPIRES)
    return leaves(tree)


def test_a_chain_starts_under_the_run_id_and_ends_with_its_last_task() -> None:
    first, second, third = marked(chain(a, b, c))
    assert first["options"]["task_id"] == "run-1"
    assert "task_id" not in second["options"] and "task_id" not in third["options"]
    assert [HEADER_PART in t["options"]["headers"] for t in (first, second, third)] == [
        False,
        False,
        True,
    ]
    for task in (first, second, third):
        assert task["options"]["headers"][HEADER_RUN] == "run-1"
        assert task["options"]["headers"]["bridge_schedule_id"] == 7
        assert task["options"]["priority"] == 3
    # Only what is sent at once expires: a chain's later tasks are sent as it goes.
    assert first["options"]["expires"] == EXPIRES
    assert "expires" not in second["options"]
    # A task's own options win over the schedule's.
    assert first["options"]["queue"] == "reports"
    assert second["immutable"] is True and first["args"] == [1]


def test_a_tasks_headers_are_added_to_the_schedules() -> None:
    tagged = app.signature("app.a", options={"headers": {"team": "ops"}})
    parsed = parse_canvas(json.loads(json.dumps(chain(tagged, b))))
    tree = parsed.marked("run-1", {"bridge_schedule_id": 7}, {"headers": {"env": "prod"}}, None)
    first, second = leaves(tree)
    assert first["options"]["headers"]["team"] == "ops"
    assert first["options"]["headers"]["env"] == "prod"
    assert second["options"]["headers"]["env"] == "prod"


def test_a_group_ends_with_each_of_its_tasks_and_a_chord_with_its_body() -> None:
    assert parse_canvas(json.loads(json.dumps(group(a, b, c)))).ends == 3
    tasks = marked(group(a, b))
    assert all(t["options"]["headers"][HEADER_PART] == LAST for t in tasks)
    assert all(t["options"]["expires"] == EXPIRES for t in tasks)
    header_a, header_b, body = marked(chord([a, b], c))
    assert parse_canvas(json.loads(json.dumps(chord([a, b], c)))).ends == 1
    assert HEADER_PART not in header_a["options"]["headers"]
    assert body["options"]["headers"][HEADER_PART] == LAST
    assert "expires" not in body["options"] and header_b["options"]["expires"] == EXPIRES


def test_a_marked_canvas_is_one_celery_applies() -> None:
    """Celery reads the marked form back as the same kind of canvas, the run id first."""
    parsed = parse_canvas(json.loads(json.dumps(chain(a, group(b, c)))))
    rebuilt = Signature.from_dict(parsed.marked("run-1", {}, {}, None), app=app)
    assert isinstance(rebuilt, _chain)
    assert rebuilt.tasks[0].options["task_id"] == "run-1"


def test_the_queues_of_a_canvas_are_those_its_tasks_name() -> None:
    routed = app.signature("app.c", options={"queue": "mail"})
    assert parse_canvas(json.loads(json.dumps(chord([a, b], routed)))).queues == {
        "reports",
        "mail",
    }
    assert parse_canvas(json.loads(json.dumps(chain(b, b)))).queues == set()


def test_a_worker_maps_each_task_to_its_run() -> None:
    assert run_of("t-1", {"bridge_schedule_id": 1}) == ("t-1", True, True)
    assert run_of("run-1", {HEADER_RUN: "run-1"}) == ("run-1", True, False)
    assert run_of("t-2", {HEADER_RUN: "run-1", HEADER_PART: LAST}) == ("run-1", False, True)
    assert run_of("t-3", None) == ("t-3", True, True)


@pytest.mark.parametrize(
    ("canvas", "field", "expected"),
    [
        ({"task": ""}, "signature.task", "a Celery task name"),
        ({"subtask_type": "map"}, "signature.subtask_type", "null (one task), chain, group"),
        ({"subtask_type": []}, "signature.subtask_type", "null (one task), chain, group"),
        (
            {"task": "x", "options": {"headers": {"bridge_part": "last"}}},
            "signature.options.headers",
            "without the bridge's own headers",
        ),
        ({"subtask_type": "chain", "kwargs": {"tasks": []}}, "signature.tasks", "one or more"),
        (
            {"subtask_type": "group", "kwargs": {"tasks": [{"task": "x", "args": {}}]}},
            "signature.tasks[0].args",
            "a JSON list",
        ),
        (
            {
                "subtask_type": "chord",
                "kwargs": {
                    "header": {"subtask_type": "group", "kwargs": ["x"]},
                    "body": {"task": "x"},
                },
            },
            "signature.header",
            "a list of one or more signatures",
        ),
        ({"task": "x", "options": {"link": "y"}}, "signature.options", "one of exchange"),
        ({"task": "x", "options": {"priority": 999}}, "signature.options.priority", "0 to 255"),
        ({"task": "x", "kwargs": {"n": float("nan")}}, "signature", "finite"),
        ("[1, 2]", "signature", "Celery's JSON form"),
        ("{", "signature", "Celery's JSON form"),
    ],
)
def test_a_bad_canvas_is_refused_naming_the_part_at_fault(
    canvas: Any, field: str, expected: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_canvas(canvas)
    assert refused.value.field == field
    assert expected in str(refused.value)


def test_a_canvas_too_deep_or_too_large_is_refused() -> None:
    deep: dict[str, Any] = {"task": "x"}
    for _ in range(9):
        deep = {"subtask_type": "chain", "kwargs": {"tasks": [deep]}}
    with pytest.raises(ValidationError, match="nested at most 8 deep"):
        parse_canvas(deep)
    wide = {"subtask_type": "group", "kwargs": {"tasks": [{"task": "x"}] * 101}}
    with pytest.raises(ValidationError, match="at most 100 tasks"):
        parse_canvas(wide)


def test_a_schedule_with_a_canvas_names_its_first_task_and_no_arguments() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    canvas = json.loads(json.dumps(chain(a, b)))
    definition, _ = build_definition(
        task=None, timer="every 1m", timezone="UTC", anchor=now, signature=canvas
    )
    assert definition.task == "app.a"
    assert json.loads(definition.signature or "")["subtask_type"] == "chain"
    with pytest.raises(ValidationError, match=r"^args: got \[1\], expected none with a"):
        build_definition(
            task=None, timer="every 1m", timezone="UTC", anchor=now, signature=canvas, args=[1]
        )
    with pytest.raises(ValidationError, match=r"^task: got 'app\.b', expected none with a"):
        build_definition(
            task="app.b", timer="every 1m", timezone="UTC", anchor=now, signature=canvas
        )
    with pytest.raises(ValidationError, match=r"^signature: got 'app\.b', expected a canvas"):
        build_definition(
            task=None,
            timer="every 1m",
            timezone="UTC",
            anchor=now,
            signature=canvas,
            known_tasks={"app.a"},
        )


names = st.sampled_from(["app.a", "app.b", "app.c"])
canvases = st.recursive(
    st.builds(lambda name: {"task": name, "subtask_type": None}, names),
    lambda parts: st.one_of(
        st.builds(
            lambda kind, tasks: {"subtask_type": kind, "kwargs": {"tasks": tasks}},
            st.sampled_from(["chain", "group"]),
            st.lists(parts, min_size=1, max_size=3),
        ),
        st.builds(
            lambda header, body: {
                "subtask_type": "chord",
                "kwargs": {"header": header, "body": body},
            },
            st.lists(parts, min_size=1, max_size=3),
            parts,
        ),
    ),
    max_leaves=12,
)


@settings(deadline=None)
@given(canvases)
def test_every_task_of_any_canvas_belongs_to_the_run(canvas: dict[str, Any]) -> None:
    """Whatever its shape: every task carries the run, exactly the first under its id, as
    many tasks end it as the run counts, and marking keeps the tasks and their order."""
    parsed = parse_canvas(canvas)
    tasks = leaves(parsed.marked("run-1", {"bridge_schedule_id": 1}, {}, None))
    assert [task["task"] for task in tasks] == list(parsed.tasks)
    assert [task["options"].get("task_id") for task in tasks] == ["run-1"] + [None] * (
        len(tasks) - 1
    )
    assert all(task["options"]["headers"][HEADER_RUN] == "run-1" for task in tasks)
    ending = [task for task in tasks if task["options"]["headers"].get(HEADER_PART) == LAST]
    assert len(ending) == parsed.ends >= 1
    # The stored form reads back as itself.
    assert parse_canvas(parsed.text).tree == parsed.tree
