"""The benchmarks. What every bench module needs, and nothing heavy to import, so that
the broker probe's own process starts fast: the repository's root and the setup error."""

from pathlib import Path

#: The checkout: the ``PYTHONPATH`` of every process a bench starts.
REPO = Path(__file__).resolve().parent.parent


class SetupError(Exception):
    """The run could not be set up (a service unreachable, a process that would not start)."""
