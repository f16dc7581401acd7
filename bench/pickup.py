"""Change pickup latency: how soon a change that makes a schedule due now reaches the broker.

Beat runs idle (nothing due for an hour) with no worker. The bench then
makes ``--changes`` (50) changes of each kind through :class:`bridge.Bridge`,
one at a time, each after a random pause so that it lands anywhere in beat's
poll cycle:

* ``add``: a new schedule whose one occurrence is now (``at <now>``);
* ``edit``: a schedule due in an hour gets the timer ``at <now>``;
* ``resume``: a paused schedule whose occurrence has passed is resumed with
  ``from_="catchup"``, so that it is due at once.

For each change it takes the moment the API call returned (the change is
committed) and the moment the schedule's message was popped off the Redis
queue. The latency is the arrival minus the later of the commit and the
occurrence's plan time (for ``add`` and ``edit`` the occurrence may fall a
few milliseconds after the commit).

    .venv/bin/python -m bench.pickup
    .venv/bin/python -m bench.pickup --db postgresql --changes 20

Exit status: 0 when every change's message arrived, 1 otherwise, 2 when the
run could not be set up. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bench.beat_app import TASK, app
from bench.broker_probe import Message, MessageProbe, new_queue
from bench.harness import (
    STORES,
    Beat,
    add_service_options,
    admin_url,
    database,
    exit_status,
    machine_load,
    percentile,
    process_env,
    safe_url,
    spread,
    workdir,
)
from bridge import Bridge, Schedule
from bridge.config import Settings
from bridge.errors import ValidationError

KINDS = ("add", "edit", "resume")
#: The issue's target on PostgreSQL, where a change wakes beat at once.
TARGET_P99 = 0.100
#: How far ahead of the clock an ``at`` timer is written: the API refuses an
#: occurrence that is not after the moment it handles the call.
AHEAD = timedelta(milliseconds=2)


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pickup",
        description="Latency from a change that makes a schedule due now to its message.",
    )
    parser.add_argument("--changes", type=int, default=50, help="changes of each kind (50)")
    parser.add_argument(
        "--db",
        choices=("both", "all", *STORES),
        default="both",
        help="store(s) to measure (both: PostgreSQL and SQLite; all: MariaDB too)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=Settings.poll_interval,
        help=f"BRIDGE_POLL_INTERVAL of beat ({Settings.poll_interval:g})",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the pauses between changes")
    add_service_options(parser)
    options = parser.parse_args(argv)
    if options.changes < 1 or options.poll_interval <= 0:
        parser.error("--changes must be at least 1 and --poll-interval greater than 0")
    return options


@dataclass
class Latencies:
    """Per kind of change: the latencies measured, and the changes whose message never came."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    missing: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))


class Changes:
    """The schedules the changes apply to, and the changes themselves."""

    def __init__(self, bridge: Bridge, count: int) -> None:
        self.bridge = bridge
        self.count = count

    def prepare(self) -> None:
        """An idle schedule, the schedules to edit, and the paused ones to resume.

        Each schedule to resume gets its occurrence a second after it is
        added and is paused at once (beat is not running yet); by the time it
        is resumed, that occurrence has passed.
        """
        hour_later = datetime.now(UTC) + timedelta(hours=1)
        self.bridge.add("idle", task=TASK, timer="every 1h", anchor=hour_later)
        for i in range(self.count):
            self.bridge.add(f"edit-{i}", task=TASK, timer="every 1h", anchor=hour_later)
        for i in range(self.count):
            soon = datetime.now(UTC) + timedelta(seconds=1)
            self.bridge.add(f"resume-{i}", task=TASK, timer="every 1h", anchor=soon)
            self.bridge.pause(f"resume-{i}", note="bench: to resume")

    def make(self, kind: str, i: int) -> tuple[str, float]:
        """Make change ``i`` of ``kind``: the schedule's name and when it is due (wall clock).

        Due is the later of the moment the call returned and the occurrence.
        """
        name = f"{kind}-{i}" if kind != "add" else f"new-{i}"
        change: Callable[[], Schedule] = {
            "add": lambda: self.bridge.add(name, task=TASK, timer=_now_timer()),
            "edit": lambda: self.bridge.edit(name, timer=_now_timer()),
            "resume": lambda: self.bridge.resume(name, from_="catchup"),
        }[kind]
        schedule = _patiently(change)
        committed = time.time()
        assert schedule.nextrun is not None
        return name, max(committed, schedule.nextrun.timestamp())


def _now_timer() -> str:
    return f"at {(datetime.now(UTC) + AHEAD).isoformat()}"


def _patiently(change: Callable[[], Schedule]) -> Schedule:
    """The change, tried again when the clock passed its ``at`` before the API read it."""
    for _ in range(3):
        try:
            return change()
        except ValidationError as exc:
            if exc.field != "timer":
                raise
    return change()


def of_schedule(name: str) -> Callable[[Message], bool]:
    """Whether a message is a run of the schedule ``name``."""
    return lambda arrival: arrival.schedule == name


def measure(options: argparse.Namespace, store: str, rng: random.Random) -> Latencies:
    queue = new_queue("pickup")
    latencies = Latencies()
    with (
        workdir("pickup") as folder,
        database(store, admin_url(store, options), folder) as url,
        MessageProbe(options.redis_url, queue) as probe,
    ):
        print(f"{store}: {safe_url(url)}, broker {options.redis_url} queue {queue}", flush=True)
        bridge = Bridge(app, database_url=url)
        changes = Changes(bridge, options.changes)
        changes.prepare()
        env = process_env(url, options.redis_url, queue, poll_interval=f"{options.poll_interval:g}")
        with Beat(env, folder) as beat:
            beat.ready()
            beat.observe(2.0)  # past beat's first ticks, and the resumable occurrences
            timeout = options.poll_interval + 10.0
            for i in range(options.changes):
                for change in KINDS:
                    time.sleep(rng.uniform(0.0, options.poll_interval))
                    name, due = changes.make(change, i)
                    arrival = probe.wait_for(of_schedule(name), timeout)
                    if arrival is None:
                        latencies.missing[change] += 1
                    else:
                        latencies.seconds[change].append(arrival.wall - due)
        bridge.database.dispose()
    return latencies


def report(options: argparse.Namespace, store: str, latencies: Latencies) -> bool:
    """Print one store's figures; whether every change's message arrived."""
    print(f"pickup latency on {store}, beat poll interval {options.poll_interval:g}s:")
    for change in KINDS:
        missing = latencies.missing[change]
        note = f", {missing} never arrived" if missing else ""
        print(f"  {change:<7} {spread(latencies.seconds[change])}{note}")
    every = [s for change in KINDS for s in latencies.seconds[change]]
    print(f"  {'all':<7} {spread(every)}")
    if every:
        p99 = percentile(every, 0.99)
        if store == "postgresql":
            target = f"p99 < {TARGET_P99 * 1000:.0f} ms: {'met' if p99 < TARGET_P99 else 'missed'}"
        else:
            target = (
                f"within the poll interval ({options.poll_interval:g}s):"
                f" {'met' if p99 <= options.poll_interval else 'missed'}"
            )
        print(f"  target {target}")
    return not any(latencies.missing.values())


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    stores = {"both": ("postgresql", "sqlite"), "all": STORES}.get(options.db, (options.db,))
    print(f"pickup: {options.changes} changes of each kind ({', '.join(KINDS)}), seed {seed}")

    def run() -> int:
        complete = True
        for store in stores:
            latencies = measure(options, store, random.Random(seed))
            complete = report(options, store, latencies) and complete
        print(machine_load())
        return 0 if complete else 1

    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
