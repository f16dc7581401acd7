"""The README's quick start, exactly as a newcomer runs it: ``make demo`` on a fresh copy.

A copy of the tracked files (what a clone holds) gets its own ``.venv`` from
``make demo``, which then migrates, adds the example schedules, starts a
worker and beat on the embedded default and prints the runs. The test
waits for a successful run in that report, stops the demo as Ctrl-C does,
and runs the command the demo prints on the way out, with ``run`` in place
of ``history``: its message must land where the demo's worker reads.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import REPO, wait_for

pytestmark = pytest.mark.e2e


def fresh_copy(target: Path) -> Path:
    """The files a clone of the repository holds, and nothing the working tree has besides."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_make_demo_shows_runs_and_its_hint_reaches_the_demo(tmp_path: Path) -> None:
    clone = fresh_copy(tmp_path / "clone")
    # A newcomer's shell: none of the settings of the test run, and no make above this one
    # (a sub-make prints "Leaving directory" after the demo's last line).
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("BRIDGE_", "CELERY_", "PYTHONPATH", "VIRTUAL_ENV", "MAKE", "MFLAGS"))
    }
    # The interpreter running the tests: the README asks for python3 3.11 or newer.
    demo = subprocess.Popen(
        ["make", "demo", f"PYTHON={sys.executable}"],
        cwd=clone,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(demo.stdout or []), daemon=True)
    reader.start()

    def succeeded() -> bool:
        assert demo.poll() is None, f"make demo exited {demo.returncode}:\n{''.join(output)}"
        printed = "".join(output)
        # The hint printed on the way out names the slow schedule: wait for its first
        # success too, or its history could still be empty when Ctrl-C comes.
        return all(
            re.search(rf"^\s+SUCCESS\s+plan .* scheduled {outcome}$", printed, re.M)
            for outcome in ("42", "slept 20s")
        )

    try:
        wait_for(succeeded, 240, interval=1, what="a successful quick and slow run in the report")
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in the terminal
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            logs = {log.name: log.read_text()[-3000:] for log in (clone / ".demo").glob("*.log")}
            pytest.fail(f"make demo outlived Ctrl-C by 120 s:\n{''.join(output)}\n{logs}")
        reader.join(10)
    printed = "".join(output)
    assert "worker and beat started; their logs are in .demo/." in printed
    # What a newcomer reads first: not the build backend's notes on an editable install
    # (pip's own lines depend on the machine's pip configuration).
    installing = printed.split("worker and beat started")[0]
    assert "setuptools" not in installing and "Editable install" not in installing, installing
    assert "stopped. Look around with, for example:" in printed

    hint = printed.rstrip().splitlines()[-1].strip()
    words = shlex.split(hint)
    settings = dict(word.split("=", 1) for word in words if "=" in word and "/" not in word[:1])
    command = [word for word in words if word not in {f"{k}={v}" for k, v in settings.items()}]
    assert command[:5] == [".venv/bin/celery", "-A", "workers.app", "bridge", "history"], hint
    history = subprocess.run(
        command, cwd=clone, env={**environ, **settings}, capture_output=True, text=True
    )
    assert history.returncode == 0 and "SUCCESS" in history.stdout, history

    queue = clone / ".demo" / "broker" / "queue"
    waiting = set(queue.iterdir())
    run = [*command[:4], "run", "quick-every-10s"]
    sent = subprocess.run(run, cwd=clone, env={**environ, **settings}, capture_output=True)
    assert sent.returncode == 0, sent
    assert set(queue.iterdir()) - waiting, "the run's message is not in the demo's broker folder"
    assert not (clone / ".broker").exists()
