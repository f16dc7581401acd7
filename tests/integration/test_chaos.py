"""The chaos bench's CI variant: beats killed at random double and lose nothing.

Runs ``python -m bench.chaos --duration 40 --schedules 50`` as a real
subprocess (three beats, two workers, PostgreSQL and Redis database 13; see
``bench/README.md``), then the same for 20 seconds on MariaDB (``--db mariadb``),
and checks each verdict: exit status 0, no duplicate, no loss, one run record
and one body execution per expected occurrence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import MYSQL_ADMIN_URL, PG_ADMIN_URL, REPO, port_open, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

#: Its own Redis database: the other integration tests flush theirs (8 to 11).
REDIS_URL = os.environ.get("BRIDGE_TEST_CHAOS_REDIS_URL", "redis://127.0.0.1:6379/13")
#: Seconds of chaos on each store: the suite's time goes to PostgreSQL's run, the
#: production store; MariaDB's is shorter (the bench's own runs are longer).
DURATIONS = {"postgresql": 40, "mariadb": 20}
#: Each store's admin URL and the port that must be open for it.
SERVERS = {
    "postgresql": ("--pg-url", PG_ADMIN_URL, "PostgreSQL", 5432),
    "mariadb": ("--mysql-url", MYSQL_ADMIN_URL, "MariaDB", 3306),
}
#: Half the bench's default: on a 2-core machine 100 runs a second plus a beat
#: restart every 3 s saturate it, the backlog doubles the run's length, and the
#: test would no longer fit in about two minutes (see bench/README.md).
SCHEDULES = 50


def figure(output: str, label: str) -> str:
    found = re.search(rf"^{re.escape(label)}: (.+)$", output, re.MULTILINE)
    assert found, f"no {label!r} line in the bench's output:\n{output}"
    return found.group(1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", list(DURATIONS))
def test_beats_killed_at_random_run_every_occurrence_once(tmp_path: Path, store: str) -> None:
    option, admin_url, service, port = SERVERS[store]
    duration = DURATIONS[store]
    if not port_open("127.0.0.1", port):
        unavailable(service, f"nothing listens on 127.0.0.1:{port}")
    if not port_open("127.0.0.1", 6379):
        unavailable("Redis", "nothing listens on 127.0.0.1:6379")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--db",
            store,
            "--duration",
            str(duration),
            "--schedules",
            str(SCHEDULES),
            option,
            admin_url,
            "--redis-url",
            REDIS_URL,
            "--drain-timeout",
            "75",
        ],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the process logs stay with the test
        capture_output=True,
        text=True,
        timeout=220,
    )
    output = f"{result.stdout}\n{result.stderr}"
    print(result.stdout)  # the figures, for the CI log (pytest -s, or on failure)
    assert result.returncode == 0, output
    assert figure(output, "duplicates") == "0", output
    assert figure(output, "lost") == "0", output
    expected = duration * SCHEDULES
    assert figure(output, "occurrences expected") == str(expected), output
    assert figure(output, "runs recorded") == str(expected), output
    assert figure(output, "body executions") == str(expected), output
    assert int(figure(output, "kills").split()[0]) >= duration // 5, output
