"""Bulk import speed: lines per second of ``bridge import`` on SQLite and PostgreSQL.

For each size (``--lines``, default 10,000 and 100,000) and each database, a
JSON Lines file of that many schedules (a mix of cron, interval and one-shot
timers in four zones, a third of them with policies) goes through the real
CLI, ``celery -A workers.app bridge ...``, in four steps:

* ``create``: import into an empty, migrated database (every line created);
* ``again``: import the same file again (every line unchanged);
* ``change``: import the file with every timer changed (every line updated,
  each cursor moved);
* ``export``: export the table (one line per schedule).

Each step prints its wall time, the lines per second that makes, and the CPU
time of the CLI process. Every step includes the CLI's start (importing
Celery and the app), which ``startup`` measures alone: an import of an empty
file.

    .venv/bin/python -m bench.bulk_import
    .venv/bin/python -m bench.bulk_import --lines 1000 --databases sqlite

PostgreSQL is reached through ``BRIDGE_BENCH_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``); the bench creates a
database named ``bridge_bulk_<random>`` and drops it afterwards. Exit status:
0 when every step reported the expected counts, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.harness import server_database

REPO = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "workers.app", "bridge"]
PG_ADMIN_URL = os.environ.get(
    "BRIDGE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TASKS = ("workers.app.quick", "workers.app.slow", "workers.app.fail")
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
CRONS = ("*/5 * * * *", "30 2 * * *", "0 9 * * mon-fri", "15 */2 * * *", "@daily")
INTERVALS = ("every 30s", "every 5m", "every 1h", "every 1h after completion")
#: A policy keyword and the values lines draw from.
POLICIES: dict[str, Sequence[Any]] = {
    "overlap": ("allow", "buffer_one", "replace"),
    "catchup": ("all", "none"),
    "catchup_window": ("1h", "1d"),
    "jitter": ("10s", "1m"),
    "max_failures": (3, 10),
    "max_attempts": (2, 5),
    "backoff": ("30s,2m", "10s..10m"),
    "expires": ("never", "10m"),
}


def schedule_line(number: int, rng: random.Random, now: datetime) -> dict[str, Any]:
    """One schedule as a line of the import file."""
    kind = rng.random()
    if kind < 0.45:
        timer = rng.choice(CRONS)
    elif kind < 0.9:
        timer = rng.choice(INTERVALS)
    else:
        timer = f"at {(now + timedelta(days=rng.randint(1, 365))).isoformat()}"
    line: dict[str, Any] = {
        "name": f"bulk-{number:07d}",
        "task": rng.choice(TASKS),
        "timer": timer,
        "timezone": rng.choice(ZONES),
        "kwargs": {"n": number},
    }
    if rng.random() < 1 / 3:
        for key in rng.sample(sorted(POLICIES), 3):
            line[key] = rng.choice(POLICIES[key])
    return line


def write_lines(path: Path, count: int, seed: int, changed: bool) -> None:
    """The import file; ``changed`` gives every schedule another timer of its kind."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    with path.open("w") as out:
        for number in range(count):
            line = schedule_line(number, rng, now)
            if changed:
                line["timer"] = changed_timer(line["timer"])
            out.write(json.dumps(line) + "\n")


#: The timer each cron and interval timer changes to in the ``change`` step.
CHANGED = {**dict.fromkeys(CRONS, "45 3 * * *"), **dict.fromkeys(INTERVALS, "every 7m")}


def changed_timer(timer: str) -> str:
    """Another timer of the same kind; a one-shot moves an hour later."""
    if timer.startswith("at "):
        return f"at {(datetime.fromisoformat(timer[3:]) + timedelta(hours=1)).isoformat()}"
    return CHANGED[timer]


@dataclass(frozen=True)
class Step:
    name: str
    seconds: float
    cpu: float
    output: str


def run_cli(env: dict[str, str], *args: str, stdin_path: Path | None = None) -> Step:
    """One CLI call: wall time, the child's CPU time and its standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with (stdin_path or Path(os.devnull)).open() as stdin:
        result = subprocess.run(
            [*CELERY, *args], env=env, stdin=stdin, capture_output=True, text=True, check=False
        )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise RuntimeError(f"bridge {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return Step(args[0], seconds, cpu, result.stdout)


@contextmanager
def database(kind: str, workdir: Path) -> Iterator[str]:
    """An empty database URL of ``kind``, removed afterwards."""
    if kind == "sqlite":
        path = workdir / f"bulk-{uuid.uuid4().hex[:8]}.db"
        yield f"sqlite:///{path}"
        for leftover in workdir.glob(path.name + "*"):
            leftover.unlink()
        return
    with server_database(PG_ADMIN_URL, "bridge_bulk_") as url:
        yield url


def bench(kind: str, count: int, files: dict[str, Path], workdir: Path) -> bool:
    """Run the four steps on a fresh database; print one row per step; True if counts held."""
    with database(kind, workdir) as url:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "BRIDGE_DATABASE_URL": url,
            "BRIDGE_BROKER_DIR": str(workdir / "broker"),
        }
        run_cli(env, "migrate")
        steps = [
            (run_cli(env, "import", str(files["empty"])), "created 0,"),
            (run_cli(env, "import", str(files["lines"])), f"created {count},"),
            (run_cli(env, "import", str(files["lines"])), f"unchanged {count},"),
            (run_cli(env, "import", str(files["changed"])), f"updated {count},"),
            (run_cli(env, "export", str(workdir / "export.jsonl")), ""),
        ]
    labels = ("startup", "create", "again", "change", "export")
    exported = sum(1 for _ in (workdir / "export.jsonl").open())
    ok = exported == count
    for label, (step, expected) in zip(labels, steps, strict=True):
        held = expected in step.output
        ok = ok and held
        rate = "-" if label == "startup" else f"{count / step.seconds:,.0f}"
        print(
            f"{kind:10} {count:>9,} {label:8} {step.seconds:8.2f} {rate:>10} {step.cpu:8.2f}"
            + ("" if held else f"   unexpected: {step.output.strip()}")
        )
    if exported != count:
        print(f"{kind:10} {count:>9,} export wrote {exported} lines, expected {count}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lines", type=int, nargs="+", default=[10_000, 100_000], help="sizes (10000 100000)"
    )
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=("sqlite", "postgresql"),
        default=["sqlite", "postgresql"],
        help="which databases (both)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated lines (1)")
    options = parser.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bridge-bulk-") as tmp:
        workdir = Path(tmp)
        (workdir / "empty.jsonl").write_text("")
        print(f"{'database':10} {'lines':>9} {'step':8} {'wall s':>8} {'lines/s':>10} {'cpu s':>8}")
        for count in options.lines:
            files = {
                "empty": workdir / "empty.jsonl",
                "lines": workdir / f"lines-{count}.jsonl",
                "changed": workdir / f"changed-{count}.jsonl",
            }
            write_lines(files["lines"], count, options.seed, changed=False)
            write_lines(files["changed"], count, options.seed, changed=True)
            for kind in options.databases:
                ok = bench(kind, count, files, workdir) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
