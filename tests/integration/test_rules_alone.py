"""The rules import with the standard library alone, in a virtual environment without a package.

``python -m venv --without-pip`` makes an environment with nothing installed
(not even pip); a ``.pth`` file puts a copy of the ``bridge`` package, and
nothing else of the source tree, on its path. There every module of
:mod:`bridge.rules` and :mod:`bridge.errors` imports, a timer is read and its
next occurrences computed, and a solar timer, whose library the ``solar``
extra installs, is refused in words that name the extra.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

#: Run in the bare environment: import every module of the rules, then use them.
PROBE = """
import importlib, importlib.util, json, pkgutil, sys, sysconfig
from datetime import datetime, timezone

started = set(sys.modules)
import bridge.errors
import bridge.rules

modules = [info.name for info in pkgutil.iter_modules(bridge.rules.__path__, "bridge.rules.")]
for name in modules:
    importlib.import_module(name)

from bridge.rules.timers import TimerSyntaxError, parse_timer, upcoming

timer = parse_timer("0 9 * * mon-fri", "Europe/Paris")
after = datetime(2026, 3, 27, 12, tzinfo=timezone.utc)
try:
    parse_timer("solar sunset 52.52 13.405")
    solar = None
except TimerSyntaxError as exc:
    solar = str(exc)
# What the standard library loads for itself (sysconfig's _sysconfigdata_...) lies in its
# folder without being one of its public names.
stdlib = tuple(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib"))
loaded = {name.partition(".")[0] for name in set(sys.modules) - started}
libraries = sorted(
    name
    for name in loaded - set(sys.stdlib_module_names) - {"bridge"}
    if not (getattr(sys.modules[name], "__file__", None) or "").startswith(stdlib)
)
print(json.dumps({
    "modules": modules,
    "libraries": libraries,
    "sqlalchemy": importlib.util.find_spec("sqlalchemy") is not None,
    "timer": timer.text,
    "next": [moment.isoformat() for moment in upcoming(timer, after, 3)],
    "solar": solar,
}))
"""


def test_the_rules_need_only_the_standard_library(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(
        REPO / "bridge", source / "bridge", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    [site_packages] = env.glob("lib/python*/site-packages")
    (site_packages / "bridge-source.pth").write_text(f"{source}\n")

    # -I: no PYTHONPATH, no user site-packages; the environment's own path and .pth only.
    result = subprocess.run(
        [str(env / "bin" / "python"), "-I", "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)

    expected = sorted(
        f"bridge.rules.{path.stem}"
        for path in (REPO / "bridge" / "rules").glob("*.py")
        if path.stem != "__init__"
    )
    assert found["modules"] == expected
    assert found["libraries"] == []
    assert not found["sqlalchemy"], "the environment is not bare: SQLAlchemy is installed"
    assert found["timer"] == "0 9 * * mon-fri"
    # 27 March 2026 is a Friday; Paris moves to summer time on the 29th.
    assert found["next"] == [
        "2026-03-30T07:00:00+00:00",
        "2026-03-31T07:00:00+00:00",
        "2026-04-01T07:00:00+00:00",
    ]
    assert "install celery-periodic-bridge[solar]" in found["solar"]
