"""Virtual environments the tests build, two ways.

A **user's** environment is made exactly as the README and the guides say:
``python -m venv``, then that environment's ``pip install``. The tests of an
install line use it and nothing else.

The tests' **own tools** (the peers' packages, the previous release, the
lowest allowed versions, another Python) need the same packages but not
pip's way of installing them: uv makes the environment and installs into it
from its cache for about a twentieth of pip's CPU, on a machine where the
suite's time is the CPU's.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from uv import find_uv_bin


def user_venv(where: Path, python: str, requirement: str, *pip_args: str) -> None:
    """``python -m venv WHERE`` and ``WHERE/bin/pip install REQUIREMENT``, as a user runs them."""
    subprocess.run([python, "-m", "venv", str(where)], check=True, timeout=300)
    install = [str(where / "bin" / "pip"), "install", "--quiet", *pip_args, requirement]
    result = subprocess.run(install, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{shlex.join(install)} failed:\n{result.stderr}"


def tool_venv(
    where: Path, python: str, *requirements: str, constraints: Path | None = None
) -> None:
    """A new environment of ``python`` at ``where`` with ``requirements`` installed by uv (each
    a name, a pin, a wheel or a source folder, extras allowed)."""
    uv = find_uv_bin()
    made = subprocess.run(
        [uv, "venv", "--quiet", "--python", python, str(where)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, f"uv venv {where} failed:\n{made.stderr}"
    install = [uv, "pip", "install", "--quiet", "--python", str(where / "bin" / "python")]
    if constraints is not None:
        install += ["--constraint", str(constraints)]
    result = subprocess.run([*install, *requirements], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (
        f"{shlex.join([*install, *requirements])} failed:\n{result.stderr}"
    )
