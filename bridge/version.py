"""The release of the bridge that is running, as the installed distribution says.

Read from the package's metadata rather than written here a second time, so
that ``pyproject.toml`` is the one place a release is numbered. The release is
what a process compares with the oldest one the store accepts (see
:mod:`bridge.rules.releases`).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "celery-periodic-bridge"


def _installed() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # imported from a checkout that was never installed
        return "unknown"


__version__ = _installed()
