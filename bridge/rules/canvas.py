"""A schedule that sends a Celery canvas (a signature, chain, group or chord), as values.

A canvas is given in Celery's own JSON form (``json.dumps(chain(a.s(), b.s()))``)
and kept in that form, normalised: every node's keys and values checked, a
composite's options handed down to its tasks as defaults, nothing else kept.
Nothing is sent here; :mod:`bridge.celery.broker` turns the marked form back into a
Celery signature and applies it.

One run covers the whole canvas. Every task of it carries the run's headers
and :data:`HEADER_RUN`, so a worker maps each task's events to the one run
record; its first task's id is the run id (so :class:`bridge.celery.task.BridgeTask`'s
once-only start holds for it), and the tasks that end the canvas (a chain's
last, a chord's body, each task of a group that ends it) carry
:data:`HEADER_PART`. The run ends when each of those has succeeded (the run
record counts them down) or at the first failure of any task.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bridge.errors import ValidationError
from bridge.rules.options import check_options
from bridge.rules.values import dumps, json_input, text_problem

#: The header naming the run a canvas's task belongs to.
HEADER_RUN = "bridge_run"
#: The header marking a task whose success ends its part of the canvas.
HEADER_PART = "bridge_part"
LAST = "last"

#: The deepest nesting, and the most tasks, one canvas holds: a run's record follows every
#: task, and a hostile body must not make the check itself costly.
DEPTH_MAX = 8
TASKS_MAX = 100
#: The longest task name, as the ``task`` column keeps it.
NAME_MAX = 200

EXPECTED = (
    "a Celery signature, chain, group or chord in Celery's JSON form "
    '(json.dumps(signature)), such as {"task": "app.tasks.report", "args": [], '
    '"kwargs": {}, "options": {}, "subtask_type": null}'
)
#: The composite kinds, by Celery's ``subtask_type``, and the task name each carries.
_COMPOSITES = {"chain": "celery.chain", "group": "celery.group", "chord": "celery.chord"}


@dataclass(frozen=True)
class Canvas:
    """A checked canvas: its normalised Celery form and what a run of it needs to know."""

    #: Celery's JSON form, normalised.
    tree: Mapping[str, Any]
    #: The name of each task, in order (the first is the one the run's id goes to).
    tasks: tuple[str, ...]
    #: How many tasks end the canvas: the successes its run waits for.
    ends: int

    @property
    def text(self) -> str:
        """The stored form (the ``signature`` column)."""
        return dumps(self.tree)

    @property
    def queues(self) -> set[str]:
        """The queues its tasks' options name."""
        return {
            queue
            for task in _tasks_of(self.tree)
            if isinstance(queue := task["options"].get("queue"), str) and queue
        }

    @property
    def shape(self) -> str:
        """The canvas in a line, as Celery's own calls would write it:
        ``chain(app.a, group(app.b, app.c))``, ``chord([app.a, app.b], app.c)``."""
        return _shape(self.tree)

    def marked(
        self,
        run_id: str,
        headers: Mapping[str, Any],
        defaults: Mapping[str, Any],
        expires: datetime | None,
    ) -> dict[str, Any]:
        """The canvas as one run of it is sent: each task with ``defaults`` under its own
        options, the run's ``headers`` (and :data:`HEADER_RUN`, :data:`HEADER_PART`) over
        its own, the first task under the run id, and the tasks sent at once (not those a
        chain or chord sends later, which would expire on their way) expiring at
        ``expires``."""
        firsts, lasts = _ends(self.tree)

        def mark(node: Mapping[str, Any], path: tuple[int, ...]) -> dict[str, Any]:
            kind = node.get("subtask_type")
            if kind is None:
                options = merged(defaults, node["options"])
                options["headers"] = (
                    dict(options.get("headers", {}))
                    | dict(headers)
                    | {HEADER_RUN: run_id}
                    | ({HEADER_PART: LAST} if path in lasts else {})
                )
                if not any(path):  # the leftmost task: the canvas's first
                    options["task_id"] = run_id
                if expires is not None and path in firsts:
                    options["expires"] = expires
                return {**node, "options": options}
            children = _children(node)
            marked = [mark(child, (*path, i)) for i, child in enumerate(children)]
            if kind == "chord":
                kwargs = {**node["kwargs"], "header": marked[:-1], "body": marked[-1]}
            else:
                kwargs = {**node["kwargs"], "tasks": marked}
            return {**node, "kwargs": kwargs}

        return mark(self.tree, ())


def _tasks_of(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tasks of a normalised canvas, in order."""
    if node.get("subtask_type") is None:
        return [node]
    return [task for child in _children(node) for task in _tasks_of(child)]


def _shape(node: Mapping[str, Any]) -> str:
    kind = node.get("subtask_type")
    if kind is None:
        return str(node["task"])
    parts = [_shape(child) for child in _children(node)]
    if kind == "chord":
        return f"chord([{', '.join(parts[:-1])}], {parts[-1]})"
    return f"{kind}({', '.join(parts)})"


def merged(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A task's options over the defaults its schedule or canvas gives: its own win, and
    its headers are added to theirs rather than replacing them."""
    options = dict(defaults) | dict(own)
    if "headers" in defaults and "headers" in own:
        options["headers"] = dict(defaults["headers"]) | dict(own["headers"])
    return options


def _children(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A composite node's parts in order (a chord's header tasks, then its body)."""
    if node["subtask_type"] == "chord":
        return [*node["kwargs"]["header"], node["kwargs"]["body"]]
    return list(node["kwargs"]["tasks"])


def _ends(
    node: Mapping[str, Any], path: tuple[int, ...] = ()
) -> tuple[set[tuple[int, ...]], set[tuple[int, ...]]]:
    """The paths of the tasks that start the canvas, and of those that end it."""
    kind = node.get("subtask_type")
    if kind is None:
        return {path}, {path}
    parts = [_ends(child, (*path, i)) for i, child in enumerate(_children(node))]
    if kind == "chain":
        return parts[0][0], parts[-1][1]
    if kind == "group":
        return set().union(*(p[0] for p in parts)), set().union(*(p[1] for p in parts))
    # A chord: its header starts it, its body ends it.
    return set().union(*(p[0] for p in parts[:-1])), parts[-1][1]


def parse_canvas(value: Any, field: str = "signature") -> Canvas:
    """Check a canvas given as Celery's JSON form (a mapping, or its JSON text).

    Raises :class:`ValidationError` naming the part at fault
    (``signature.tasks[1].task``), what was given and what is expected.
    """
    if isinstance(value, Mapping) and not isinstance(value, dict | str):
        value = dict(value)
    if isinstance(value, dict):
        # A Celery signature is a dict whose arguments may be tuples: JSON's form of it.
        try:
            value = json.loads(json.dumps(value))
        except (TypeError, ValueError, RecursionError):
            raise ValidationError(field, "<a value JSON cannot carry>", EXPECTED) from None
    value = json_input(field, value, dict, EXPECTED)
    tasks: list[str] = []
    tree = _node(value, field, 0, tasks, {})
    _, lasts = _ends(tree)
    return Canvas(tree, tuple(tasks), len(lasts))


def _node(
    value: Any, field: str, depth: int, tasks: list[str], inherited: Mapping[str, Any]
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(field, value, EXPECTED)
    if depth > DEPTH_MAX:
        raise ValidationError(field, "...", f"a canvas nested at most {DEPTH_MAX} deep")
    kind = value.get("subtask_type")
    options = _options(value.get("options"), field)
    if kind is None:
        return _task(value, field, tasks, merged(inherited, options))
    if not isinstance(kind, str) or kind not in _COMPOSITES:
        raise ValidationError(
            f"{field}.subtask_type", kind, "null (one task), chain, group or chord"
        )
    kwargs = value.get("kwargs")
    if not isinstance(kwargs, Mapping):
        raise ValidationError(f"{field}.kwargs", kwargs, f"the {kind}'s parts, as Celery gives")
    defaults = merged(inherited, options)
    if kind == "chord":
        header = kwargs.get("header")
        if isinstance(header, Mapping) and header.get("subtask_type") == "group":
            group_kwargs = header.get("kwargs")
            header = group_kwargs.get("tasks") if isinstance(group_kwargs, Mapping) else None
        if not isinstance(header, list) or not header:
            raise ValidationError(f"{field}.header", header, "a list of one or more signatures")
        parts = [
            _node(part, f"{field}.header[{i}]", depth + 1, tasks, defaults)
            for i, part in enumerate(header)
        ]
        body = _node(kwargs.get("body"), f"{field}.body", depth + 1, tasks, defaults)
        shaped = {"kwargs": {}, "header": parts, "body": body}
    else:
        members = kwargs.get("tasks")
        if not isinstance(members, list) or not members:
            raise ValidationError(f"{field}.tasks", members, "a list of one or more signatures")
        shaped = {
            "tasks": [
                _node(part, f"{field}.tasks[{i}]", depth + 1, tasks, defaults)
                for i, part in enumerate(members)
            ]
        }
    return {
        "task": _COMPOSITES[kind],
        "args": [],
        "kwargs": shaped,
        "options": {},
        "subtask_type": kind,
        "immutable": False,
    }


def _task(
    value: Mapping[str, Any], field: str, tasks: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    name = value.get("task")
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > NAME_MAX
        or text_problem(name) is not None
    ):
        raise ValidationError(
            f"{field}.task", name, f"a Celery task name of at most {NAME_MAX} characters"
        )
    args = value.get("args", [])
    if not isinstance(args, list | tuple):
        raise ValidationError(f"{field}.args", args, "a JSON list")
    kwargs = value.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ValidationError(f"{field}.kwargs", kwargs, "a JSON object with text keys")
    immutable = value.get("immutable", False)
    if not isinstance(immutable, bool):
        raise ValidationError(f"{field}.immutable", immutable, "true or false")
    tasks.append(name)
    if len(tasks) > TASKS_MAX:
        raise ValidationError(field, name, f"a canvas of at most {TASKS_MAX} tasks")
    return {
        "task": name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "options": options,
        "subtask_type": None,
        "immutable": immutable,
    }


def _options(value: Any, field: str) -> dict[str, Any]:
    """A node's options, checked as a schedule's are (``expires`` is the run's alone)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field}.options", value, "a JSON object")
    try:
        options = check_options(dict(value))
    except ValidationError as exc:
        raise ValidationError(f"{field}.{exc.field}", exc.value, exc.expected) from None
    options.pop("expires", None)
    return options


@functools.lru_cache(maxsize=256)
def stored_canvas(text: str) -> Canvas:
    """A stored canvas (the ``signature`` column), checked once per text: beat reads the
    same few at every fire, and the pages and the queue listing read them again. Raises
    :class:`ValidationError` for one that no longer reads (changed with SQL, say)."""
    return parse_canvas(text)


def run_of(request_id: str, headers: Mapping[str, Any] | None) -> tuple[str, bool, bool]:
    """The run a delivered task's events belong to, whether the task starts that run, and
    whether its success ends (its part of) it: a plain run is its own task."""
    run_id = (headers or {}).get(HEADER_RUN)
    if not isinstance(run_id, str):
        return request_id, True, True
    return run_id, request_id == run_id, (headers or {}).get(HEADER_PART) == LAST
