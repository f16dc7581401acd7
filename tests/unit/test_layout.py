"""The package's layout: what the rules may import, and what ``import bridge`` imports.

The import contracts (``lint-imports``, run by ``make lint``) keep the rules
from importing the libraries the project installs, and :mod:`bridge.clock`.
Two things they cannot see are checked here, in the rules' source: a library
missing from their list, and a call of the standard library's clock, which
needs no import at all. The rules are handed ``now``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import bridge
import bridge.errors
import bridge.rules

RULES = sorted(Path(bridge.rules.__file__).parent.glob("*.py"))
#: What a module of the rules may import besides the standard library: the rules, and
#: the exceptions.
OWN = ("bridge.rules", "bridge.errors")
#: The one library a rule imports, inside the function that needs it rather than with
#: its module: ephem, which the ``solar`` extra installs, for the sun's events.
DEFERRED = {("solar.py", "ephem")}

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


def imported(source: str, package: str) -> list[tuple[int, str, bool]]:
    """Each module an import statement of a module of ``package`` names: its line, its
    name, and whether the import runs with the module (rather than in a function, when
    that is called)."""
    tree = ast.parse(source)
    deferred = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # What is imported from a package may be a module of it: ``from bridge.celery
            # import broker`` imports bridge.celery.broker.
            module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names = [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(node.lineno, name, id(node) not in deferred) for name in names]
    return found


def foreign(path: Path, package: str) -> list[str]:
    """The imports of ``path``, a module of ``package``, that are neither the standard
    library nor the rules' own, but those :data:`DEFERRED` allows."""
    found = []
    for line, name, at_import in imported(path.read_text(), package):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or any(name.startswith(f"{own}.") for own in OWN):
            continue
        if not at_import and (path.name, top) in DEFERRED:
            continue
        found.append(f"{path.name} line {line}: {name}" + ("" if at_import else " (deferred)"))
    return found


def test_the_check_finds_an_import_of_a_library(tmp_path: Path) -> None:
    module = tmp_path / "solar.py"
    module.write_text(
        "import json\nimport ephem\nfrom bridge.rules.kinds import RunStatus\n"
        "from bridge.storage import models\nfrom . import values\n"
        "from bridge.celery import broker\n"
        "from ..storage.models import PeriodicTask\n"
        "def load():\n    import ephem\n    import croniter\n"
    )
    assert foreign(module, "bridge.rules") == [
        "solar.py line 2: ephem",
        "solar.py line 4: bridge.storage.models",
        "solar.py line 6: bridge.celery.broker",
        "solar.py line 7: bridge.storage.models.PeriodicTask",
        "solar.py line 10: croniter (deferred)",
    ]


@pytest.mark.parametrize(
    ("module", "package"),
    [
        *(pytest.param(path, "bridge.rules", id=path.name) for path in RULES),
        pytest.param(Path(bridge.errors.__file__), "bridge", id="errors.py"),
    ],
)
def test_a_rule_module_imports_the_standard_library_and_the_rules(
    module: Path, package: str
) -> None:
    assert foreign(module, package) == []


STORAGE = sorted(Path(bridge.__file__).parent.joinpath("storage").glob("*.py"))


def rules_called(path: Path, package: str) -> set[str]:
    """The functions of the rules a module imports: its types, enums and constants are
    the vocabulary storage shares with them; a function is a decision."""
    found = set()
    for _, name, _ in imported(path.read_text(), package):
        module, _, attribute = name.rpartition(".")
        if (
            name.startswith("bridge.rules.")
            and module != "bridge.rules"
            and inspect.isfunction(getattr(importlib.import_module(module), attribute))
        ):
            found.add(name)
    return found


def test_the_check_finds_a_rule_called() -> None:
    settlement = Path(bridge.__file__).parent / "service" / "settlement.py"
    assert {"bridge.rules.decisions.settle", "bridge.rules.fire.state_of"} <= rules_called(
        settlement, "bridge.service"
    )


@pytest.mark.parametrize("module", STORAGE, ids=[path.name for path in STORAGE])
def test_storage_applies_no_rule(module: Path) -> None:
    """Storage runs statements and hands values back; the units of work of
    :mod:`bridge.service` decide, through the rules, between its reads and its writes."""
    assert rules_called(module, "bridge.storage") == set()


def test_the_public_names_are_those_of_their_modules() -> None:
    """``from bridge import Bridge`` and the rest, imported on first use."""
    for name in set(bridge.__all__) - {"__version__"}:
        home = importlib.import_module(getattr(bridge, name).__module__)
        assert getattr(bridge, name) is getattr(home, name), name
    assert set(bridge.__all__) <= set(dir(bridge))
    assert bridge.__version__ == version("celery-periodic-bridge")


def test_an_unknown_name_is_an_attribute_error() -> None:
    """``hasattr`` answers False, and ``from bridge import clock`` imports the submodule."""
    assert not hasattr(bridge, "Nothing")
    from bridge import clock

    assert clock.__name__ == "bridge.clock"


def test_the_wheel_lists_every_package_of_the_source() -> None:
    """setuptools builds the wheel from the packages pyproject.toml names, not from the
    tree: a package left out of the list installs without it, and every import of it
    fails where users installed the wheel."""
    import tomllib

    root = Path(bridge.__file__).parent
    config = tomllib.loads((root.parent / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(("bridge", *init.parent.relative_to(root).parts))
        for init in root.rglob("__init__.py")
    }
    assert found - listed == set()


def test_a_checkout_without_the_installed_mapping_finds_its_migrations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Imported from a source checkout where ``bridge.migrations`` (the wheel's mapping of
    ``migrations/``) is not importable, the store reads the checkout's ``migrations/``."""
    from bridge.storage import database

    def not_installed(package: str) -> None:
        raise ModuleNotFoundError(package)

    monkeypatch.setattr(database.resources, "files", not_installed)
    assert Path(database.migrations_location()) == Path(bridge.__file__).parents[1] / "migrations"
    assert database.shipped_revisions()[:2] == ("0001", "0002")
