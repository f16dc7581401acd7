"""Peers: the burst of ``bench/burst.py`` against Celery's own scheduler, django-celery-beat
and RedBeat, installed from PyPI, side by side with the bridge and the raw loop.

For each size N, in one run: the raw ``send_task`` loop, then one ``celery
beat`` of each scheduler, each given N entries due at the same instant (a
whole second ahead, as for the bridge), each publishing to a Redis queue of
its own that ``bench/broker_probe.py`` empties:

* ``persistent``: Celery's ``PersistentScheduler``, the N entries in
  ``beat_schedule`` (``bench/peers/persistent_app.py``);
* ``django``: django-celery-beat's ``DatabaseScheduler`` on a PostgreSQL
  database ``bridge_peers_<random>``, N ``PeriodicTask`` rows created with
  ``bulk_create`` (``bench/peers/django_app.py``);
* ``redbeat``: RedBeat, N entries in the broker's Redis database
  (``bench/peers/redbeat_app.py``);
* ``bridge``: the bridge, exactly as ``bench/burst.py`` runs it.

The peers run in a virtualenv of their own, ``.bench/peers-venv``, created on
first use from ``bench/peers/requirements.txt`` (and again whenever that file
changes). A scheduler that has not sent all N messages ``--limit`` seconds
after the due instant is reported with what it had sent by then.

    .venv/bin/python -m bench.peers                       # 1,000 and 10,000
    .venv/bin/python -m bench.peers --sizes 1000 --schedulers redbeat bridge
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.broker_probe import purge_queue
from bench.burst import (
    Options,
    Result,
    add_common_arguments,
    bridge_burst,
    common_options,
    due_in,
    measure,
    run_sizes,
    run_tag,
    start_beats,
)
from bench.harness import Process, exit_status, run_checked, server_database, stop_all

VENV = REPO / ".bench" / "peers-venv"
PEERS = REPO / "bench" / "peers"
REQUIREMENTS = PEERS / "requirements.txt"


@dataclass(frozen=True)
class Peer:
    """A scheduler from PyPI and the app module under ``bench/peers/`` that runs it."""

    label: str
    module: str
    #: ``python -m <module>`` writes the entries before beat starts.
    seeded: bool = False
    #: It keeps its entries in a PostgreSQL database of its own.
    database: bool = False


PEERS_BY_NAME = {
    "persistent": Peer("celery PersistentScheduler", "persistent_app"),
    "django": Peer("django-celery-beat", "django_app", seeded=True, database=True),
    "redbeat": Peer("RedBeat", "redbeat_app", seeded=True),
}
SCHEDULERS = [*PEERS_BY_NAME, "bridge"]


def peers_python() -> Path:
    """The peers' interpreter, after creating or updating their virtualenv if need be.

    A copy of the requirements it was installed from is kept in the
    virtualenv: when ``bench/peers/requirements.txt`` differs, it is reinstalled.
    """
    python = VENV / "bin" / "python"
    installed = VENV / "requirements.txt"
    wanted = REQUIREMENTS.read_text()
    if python.exists() and installed.exists() and installed.read_text() == wanted:
        return python
    print(f"installing the peers into {VENV.relative_to(REPO)} ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    shutil.copyfile(REQUIREMENTS, installed)
    return python


def peer_burst(peer: Peer, size: int, python: Path, options: Options) -> Result:
    """``size`` entries due at one instant, sent by one beat of ``peer``."""
    tag = run_tag()
    queue = f"bridge-peers-{tag}"
    setup_started = time.monotonic()
    due = due_in(options.lead_for(size))
    database: AbstractContextManager[str | None] = (
        server_database(options.pg_url, "bridge_peers_") if peer.database else nullcontext()
    )
    with database as url:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(PEERS)]),
            "CELERY_BROKER_URL": options.redis_url,
            "BENCH_QUEUE": queue,
            "BURST_SIZE": str(size),
            "BURST_DUE": repr(due),
            **({"PEERS_DJANGO_DATABASE_URL": url} if url is not None else {}),
        }
        # ``-s``: a shelve file of the run's own for PersistentScheduler; the others ignore it.
        command = [
            str(python),
            "-m",
            "celery",
            "-A",
            peer.module,
            "beat",
            "-l",
            options.loglevel,
            "-s",
            str(options.workdir / f"{tag}-schedule"),
        ]
        beat = Process(f"{tag}-{peer.module}", command, options.workdir, env)
        try:
            if peer.seeded:
                run_checked([str(python), "-m", peer.module], env, options.workdir)
            start_beats([beat])
            setup = time.monotonic() - setup_started
            return measure(peer.label, [beat], options, queue, size, due, setup)
        finally:
            stop_all([beat])
            purge_queue(options.redis_url, queue)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description="The burst against Celery's scheduler, django-celery-beat, RedBeat and"
        " the bridge, side by side with a raw send_task loop.",
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--schedulers",
        nargs="+",
        choices=SCHEDULERS,
        default=SCHEDULERS,
        help="which schedulers to run, in this order (all)",
    )
    args = parser.parse_args(argv)
    options = common_options(parser, args)

    def run() -> int:
        python = peers_python()

        def bursts(size: int, opts: Options) -> list[Result]:
            return [
                bridge_burst(size, 1, opts)
                if name == "bridge"
                else peer_burst(PEERS_BY_NAME[name], size, python, opts)
                for name in args.schedulers
            ]

        run_sizes(options, bursts)
        return 0

    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
