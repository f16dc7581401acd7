"""The rules never read the clock: they are handed ``now``.

The import contracts (``lint-imports``, run by ``make lint``) keep the rules
from importing SQLAlchemy, Celery or :mod:`bridge.clock`; a call of the
standard library's clock needs no import the contracts could see, so this
test reads the rules' source for one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bridge.rules

RULES = sorted(Path(bridge.rules.__file__).parent.glob("*.py"))

#: Attribute calls that read the clock: ``datetime.now()``, ``time.time()``, ...
CLOCK_READS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
    ("time", "time_ns"),
}


def clock_reads(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in CLOCK_READS
        ):
            found.append(f"line {node.lineno}: {node.func.value.id}.{node.func.attr}()")
    return found


def test_the_check_finds_a_clock_read() -> None:
    assert clock_reads("from datetime import datetime\nx = datetime.now()\n") == [
        "line 2: datetime.now()"
    ]


@pytest.mark.parametrize("module", RULES, ids=lambda path: path.name)
def test_a_rule_module_does_not_read_the_clock(module: Path) -> None:
    assert clock_reads(module.read_text()) == []
