"""Catch-up: beat was down, a backlog is owed; how fast does it drain, and who waits?

In one run, on a fresh PostgreSQL database and a Redis queue no worker reads:

1. **Yardsticks.** The raw ``send_task`` loop and a bridge burst of
   ``--burst`` (10,000) schedules due at one instant (``bench/burst.py``).
2. **Backlog.** ``--schedules`` (1,000) schedules ``every 1s`` under catch-up
   ``all`` and overlap ``allow``, whose cursor stands ``--down`` (600) seconds
   in the past, as the table looks when every beat was down that long; and
   ``--on-time`` (10) schedules ``every 1s`` that fall due from the start.
   One beat starts; a probe pops every message as it arrives (the bridge's
   headers say which schedule and occurrence it is) until the backlog
   schedules are back on time, and the bench ends each popped run
   ``SUCCESS`` within 0.2 s, as quick workers would (no worker runs).

Printed: the owed occurrences, and the rate the backlog's schedules were
published at until they were back on time (their owed occurrences and those
falling due meanwhile, from the beat's first message to the arrival of the
last occurrence planned before the start), as a ratio to the burst's rate,
with the owed ones' own rate (each second of the drain also owes a second
more of every schedule); whether they came oldest first
(the largest step back in plan time between consecutive backlog messages);
and the lateness of the on-time schedules' messages while the backlog drained,
against the length of a tick (``TICK_MESSAGES`` batch sizes of messages at the
backlog's rate), and how many of their occurrences never arrived (under the
default catch-up ``latest`` an occurrence beat reaches after the next one is
due is passed over: a delay the lateness alone would hide). A backlog not
drained within ``--limit`` + 3 x ``--down`` seconds prints its figures so far
and exits 1.

    .venv/bin/python -m bench.catchup                      # 600 s down, 1,000 schedules
    .venv/bin/python -m bench.catchup --down 60 --schedules 200 --burst 2000
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from bench.beat_app import TASK
from bench.broker_probe import Message, MessageProbe, purge_queue
from bench.burst import (
    Options,
    add_common_arguments,
    bridge_burst,
    common_options,
    raw_ceiling,
    run_tag,
)
from bench.harness import (
    CELERY,
    Process,
    exit_status,
    percentile,
    process_env,
    run_checked,
    run_sql,
    server_database,
    settle,
    start_all,
    stop_all,
    tree_cpu_seconds,
    write_jsonl,
)
from bridge.config import Settings
from bridge.rules.decisions import TICK_MESSAGES

#: Seconds from importing the schedules to the on-time ones' first occurrence.
LEAD = 5.0
#: How often the popped runs are ended, as workers would end them.
FINISH_EVERY = 0.2
#: Ends the popped runs, locking them in id order as beat and the workers' writer do.
FINISH = """
UPDATE task_execution SET status = 'SUCCESS', finished_at = now(), updated_at = now()
WHERE id IN (
    SELECT id FROM task_execution
    WHERE id = ANY(:ids) AND status IN ('PENDING', 'SENT', 'RECEIVED', 'STARTED')
    ORDER BY id FOR UPDATE
)
"""
#: Open runs of each backlog schedule already in the table (``--open-runs``): sent
#: before beat went down, to workers that have not ended them yet.
SEED_OPEN = """
INSERT INTO task_execution (id, periodic_task_id, task, plan_time, attempt, trigger, status,
                            queued_at, updated_at)
SELECT gen_random_uuid()::text, p.id, p.task, :before - make_interval(secs => n), 1,
       'scheduled', 'SENT', now(), now()
FROM periodic_task p CROSS JOIN generate_series(1, :per) AS n
WHERE p.name LIKE 'backlog-%'
"""
#: Tries at ending one lot of runs.
CONFLICT_RETRIES = 5


class Finisher:
    """Ends each popped run ``SUCCESS`` a moment after it arrives, as quick workers would.

    No worker takes the messages (the probe pops them), and a backlog's runs
    left open would pile up under overlap ``allow``: hundreds per schedule,
    each read again by every tick, which no production beat with workers
    sees.
    """

    def __init__(self, url: str, probe: MessageProbe) -> None:
        self.engine = create_engine(url, poolclass=NullPool)
        self.probe = probe
        self._done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._finish, daemon=True)

    def __enter__(self) -> Finisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.engine.dispose()

    def _finish(self) -> None:
        while not self._stop.wait(FINISH_EVERY):
            arrived = self.probe.popped_after(self._done)
            ids = [m.run_id for m in arrived]
            self._done += len(arrived)
            for _ in range(CONFLICT_RETRIES if ids else 0):
                try:
                    with self.engine.begin() as connection:
                        connection.execute(text(FINISH), {"ids": ids})
                    break
                except OperationalError:  # a deadlock with beat, should one come anyway
                    continue


@dataclass(frozen=True)
class Drain:
    """What the probe saw of the backlog and of the on-time schedules."""

    owed: int
    #: The owed occurrences that arrived, in order of arrival.
    backlog: list[Message]
    #: Every message of the backlog's schedules until they were back on time: the owed
    #: ones and those that fell due meanwhile, which a catch-up publishes as well.
    published: int
    on_time: list[Message]
    #: The on-time schedules' occurrences due a second or more before the backlog was back
    #: on time, and how many of them never arrived (catch-up ``latest`` passed them over).
    on_time_due: int
    on_time_missing: int
    #: Seconds from the beat's first message to the last owed one's arrival.
    seconds: float
    cpu: float
    #: Whether the backlog's schedules got back on time within the limit.
    drained: bool


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.catchup",
        description="A backlog left by a beat that was down, drained under catch-up all.",
    )
    add_common_arguments(parser, sizes=False)
    parser.add_argument("--down", type=int, default=600, help="seconds beat was down (600)")
    parser.add_argument(
        "--schedules", type=int, default=1000, help="every-second schedules owed (1000)"
    )
    parser.add_argument(
        "--on-time", type=int, default=10, help="every-second schedules due from the start (10)"
    )
    parser.add_argument(
        "--burst", type=int, default=10_000, help="size of the yardstick burst (10000)"
    )
    parser.add_argument(
        "--open-runs",
        type=int,
        default=0,
        help="runs of each backlog schedule still open when beat starts (0): sent before it"
        " went down to workers that have not ended them; they stay open",
    )
    args = parser.parse_args(argv)
    for name in ("down", "schedules", "on_time", "burst"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.open_runs < 0:
        parser.error("--open-runs must be at least 0")
    options = common_options(parser, args)

    def run() -> int:
        raw = raw_ceiling(args.burst, options).figures
        burst = bridge_burst(args.burst, 1, options).figures
        drain = drain_backlog(options, args.down, args.schedules, args.on_time, args.open_runs)
        return report(
            None if raw is None else raw.rate, None if burst is None else burst.rate, drain
        )

    return exit_status(run)


def drain_backlog(
    options: Options, down: int, schedules: int, on_time: int, open_runs: int = 0
) -> Drain:
    """Seed the backlog and the on-time schedules (and ``open_runs`` open runs of each
    backlog schedule), start one beat, probe until drained."""
    queue = f"bridge-catchup-{run_tag()}"
    with server_database(options.pg_url, "bridge_catchup_") as url:
        env = process_env(url, options.redis_url, queue)
        run_checked([*CELERY, "bridge", "migrate"], env, options.workdir)
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD)
        seed = options.workdir / f"{queue}.jsonl"
        write_jsonl(seed, schedules_of(schedules, on_time, start))
        run_checked([*CELERY, "bridge", "import", str(seed)], env, options.workdir)
        owed_from = start - timedelta(seconds=down)
        set_back(url, owed_from)
        if open_runs:
            run_sql(url, SEED_OPEN, before=owed_from, per=open_runs)
            settle(url)
        beat = Process(
            "beat", [*CELERY, "beat", "-S", "bridge", "-l", options.loglevel], options.workdir, env
        )
        with MessageProbe(options.redis_url, queue) as probe, Finisher(url, probe):
            try:
                start_all([beat], lambda _: "beat: Starting", 60)
                before = tree_cpu_seconds(beat.pid)
                drained = probe.wait_for(
                    lambda m: m.schedule.startswith("backlog-") and m.lateness < 1.0,
                    options.limit + 3 * down,
                )
                cpu = tree_cpu_seconds(beat.pid) - before
            finally:
                stop_all([beat])
                purge_queue(options.redis_url, queue)
            arrivals = probe.since(0.0)
    if not arrivals:
        raise SystemExit("beat published nothing")
    until = max(m.at for m in arrivals) if drained is None else drained.at
    backlog = [m for m in arrivals if m.schedule.startswith("backlog-") and m.plan_time < start]
    first = min(m.at for m in arrivals)
    last = max((m.at for m in backlog), default=first)
    # Counted over the same span as the rate: up to the last owed occurrence.
    published = sum(1 for m in arrivals if m.schedule.startswith("backlog-") and m.at <= last)
    punctual = [m for m in arrivals if m.schedule.startswith("on-time-") and m.at <= until]
    until_wall = max(m.wall for m in arrivals) if drained is None else drained.wall
    due = {
        (f"on-time-{i:03d}", start + timedelta(seconds=k))
        for i in range(on_time)
        for k in range(max(0, int(until_wall - 1.0 - start.timestamp()) + 1))
    }
    came = {(m.schedule, m.plan_time) for m in arrivals if m.schedule.startswith("on-time-")}
    return Drain(
        schedules * down,
        backlog,
        published,
        punctual,
        len(due),
        len(due - came),
        last - first,
        cpu,
        drained is not None,
    )


def schedules_of(schedules: int, on_time: int, start: datetime) -> list[dict[str, str]]:
    """The backlog's schedules (their cursor is set back afterwards) and the on-time ones."""
    common = {"task": TASK, "timer": "every 1s", "timezone": "UTC", "anchor": start.isoformat()}
    owed = [
        {"name": f"backlog-{i:05d}", **common, "catchup": "all", "overlap": "allow"}
        for i in range(schedules)
    ]
    return owed + [{"name": f"on-time-{i:03d}", **common} for i in range(on_time)]


def set_back(url: str, since: datetime) -> None:
    """The backlog's cursor at ``since``: the table as beat left it when it went down."""
    run_sql(
        url,
        "UPDATE periodic_task SET next_occurrence = :since, nextrun = :since"
        " WHERE name LIKE 'backlog-%'",
        since=since,
    )


def report(raw_rate: float | None, burst_rate: float | None, drain: Drain) -> int:
    """Print the figures; 1 when an owed occurrence never arrived."""
    rate = drain.published / drain.seconds if drain.seconds > 0 else 0.0
    print(f"\nowed occurrences: {drain.owed:,}; published: {len(drain.backlog):,}")
    print(f"raw send_task loop: {raw_rate or 0:,.0f}/s; bridge burst: {burst_rate or 0:,.0f}/s")
    ratio = f"{rate / burst_rate:.2f}" if burst_rate else "n/a"
    print(
        f"backlog {'drained' if drain.drained else 'NOT drained'} in {drain.seconds:.1f} s:"
        f" {drain.published:,} messages of its schedules (owed and falling due meanwhile),"
        f" {rate:,.0f}/s, x burst {ratio} (target 0.80); owed ones"
        f" {len(drain.backlog) / drain.seconds if drain.seconds > 0 else 0.0:,.0f}/s;"
        f" beat CPU {drain.cpu:.1f} s"
    )
    steps = [
        (a.plan_time - b.plan_time).total_seconds()
        for a, b in zip(drain.backlog, drain.backlog[1:], strict=False)
    ]
    print(f"oldest first: largest step back in plan time {max([0.0, *steps]):.0f} s")
    tick = TICK_MESSAGES * Settings().batch_size / rate if rate else float("nan")
    late = [m.lateness for m in drain.on_time]
    if late:
        print(
            f"on-time schedules while it drained ({len(late)} messages): lateness"
            f" p50 {percentile(late, 0.5):.2f} s p99 {percentile(late, 0.99):.2f} s"
            f" max {max(late):.2f} s; a tick of the backlog {tick:.2f} s"
        )
    print(
        f"on-time occurrences never sent (catch-up latest passed them over):"
        f" {drain.on_time_missing:,} of {drain.on_time_due:,}"
    )
    return 0 if drain.drained and len(drain.backlog) >= drain.owed else 1


if __name__ == "__main__":
    sys.exit(main())
