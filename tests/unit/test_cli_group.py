"""The ``bridge`` group imports its commands when one runs: Celery loads the group into
every process it starts, beat's and each worker's, where none of them runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

from bridge.manage.cli import COMMAND_MODULES, bridge
from bridge.manage.cli.group import LazyGroup


def test_each_command_is_found_in_the_module_named_for_it() -> None:
    held = {
        command.name: module
        for module in set(COMMAND_MODULES.values())
        for command in importlib.import_module(f"bridge.manage.cli.{module}").COMMANDS
    }
    assert held == COMMAND_MODULES
    assert isinstance(bridge, LazyGroup)


def test_an_unknown_command_is_none_and_imports_nothing() -> None:
    assert bridge.get_command(None, "fly") is None  # type: ignore[arg-type]


def test_the_group_imports_neither_the_bridge_nor_celery_nor_sqlalchemy() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, bridge.manage.cli\n"
            "print(*sorted(m for m in sys.modules if m.split('.')[0] in"
            " ('celery', 'sqlalchemy', 'kombu') or m.startswith('bridge.manage.api')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert loaded == []


def test_a_command_looked_up_leaves_the_listing_whole() -> None:
    """A reader of ``commands`` (mkdocs-click) falls back on the listing while it is empty:
    a lookup must not leave it holding some commands only."""
    assert bridge.get_command(None, "add") is not None  # type: ignore[arg-type]
    assert bridge.commands == {}
