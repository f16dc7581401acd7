"""The built wheel carries the migrations, so a non-editable install can migrate."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support import REPO, rows


def test_wheel_ships_migrations_and_migrates(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("celery_periodic_bridge-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "bridge/migrations/env.py" in names
    assert "bridge/migrations/script.py.mako" in names
    assert any(n.startswith("bridge/migrations/versions/0001_") for n in names)
    assert any(n.startswith("bridge/migrations/versions/0002_") for n in names)
    assert any(n.startswith("bridge/migrations/versions/0005_") for n in names)
    assert any(n.startswith("bridge/migrations/versions/0006_") for n in names)
    assert not any(n.startswith(("tests/", "workers/", "migrations/")) for n in names)

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    url = f"sqlite:///{tmp_path / 'wheel.db'}"
    script = (
        "import bridge, sys\n"
        f"assert bridge.__file__.startswith({str(installed)!r}), bridge.__file__\n"
        "from bridge.database import Database\n"
        f"Database({url!r}).migrate()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=120,
    )
    assert rows(url, "SELECT version_num FROM alembic_version") == [("0006",)]
