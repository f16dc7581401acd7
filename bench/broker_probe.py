"""Reading the broker: when each message arrives there, seen from outside the publisher.

Every bench that times messages reads them here, in one of two ways.
:class:`MessageProbe` (``bench/lone.py``, ``scale.py``, ``pickup.py``) is a
thread that pops beat's messages one at a time and reads the bridge's
headers; the rest of this docstring is about :class:`Probe`, the process
that times a whole burst.

A scheduler's own logs say when it meant to send; the broker says when the
message was there for a worker to take. The probe is a separate process that
empties one queue, on either broker the burst runs on:

* **Redis**: every ``--interval`` seconds (2 ms) it pops what the queue holds
  with one ``RPOP <queue> <count>`` and notes the time of that poll and how
  many messages it returned. A message's arrival is the poll that found it,
  so it is known to within one interval and one round trip; a poll that
  returns a full batch is followed at once by the next one. Popping keeps
  Redis small during a 100,000-message burst, and its cost is mostly one
  round trip per interval, whatever the publisher's speed: about a tenth of
  one core while a burst lasts (``bench/README.md`` has the figures).
* **RabbitMQ** (``amqp://``): it declares the queue as Celery does (so that
  no message published before a consumer exists is dropped as unroutable)
  and consumes it without acknowledgements, so the broker pushes each
  message as soon as it is routed; a message's arrival is the moment the
  probe reads it off the socket. Bodies are not decoded.

Message bodies are not looked at until the burst is over, and then only to
count distinct task ids (a publisher that sent one twice would show as a
duplicate).

    .venv/bin/python -m bench.broker_probe --queue Q --expect 1000 \\
        --due 2026-11-21T10:00:00+00:00 --limit 120 [--broker-url amqp://...]

prints the figures of the burst it saw. ``bench/burst.py`` and
``bench/peers.py`` run it through :class:`Probe`, which has it write its
arrivals to a JSON file and reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self, cast

import amqp.exceptions
import kombu.exceptions
import redis
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.message import Message as Delivery
from kombu.messaging import Consumer

from bench import REPO, SetupError

#: Seconds between two polls of the queue.
DEFAULT_INTERVAL = 0.002
#: The most messages one poll takes; a full batch is followed by another poll at once.
BATCH = 10_000
#: What the probe prints once it is connected and polling.
READY = "ready"


@dataclass(frozen=True)
class Figures:
    """The burst as the broker saw it, against the instant it was due."""

    expected: int
    received: int
    #: Distinct task ids among the messages received.
    unique: int
    #: Seconds after the due instant of the first and of the last arrival.
    first: float
    last: float
    #: How many messages the first poll found.
    first_count: int
    #: Lateness (arrival - due instant) of the median and the 99th-percentile
    #: message of the whole burst; None when that message never arrived.
    p50: float | None
    p99: float | None

    @property
    def complete(self) -> bool:
        return self.received >= self.expected

    @property
    def max(self) -> float | None:
        """The lateness of the burst's last message; None when it never arrived."""
        return self.last if self.complete else None

    @property
    def span(self) -> float:
        """Seconds from the first arrival to the last."""
        return self.last - self.first

    @property
    def rate(self) -> float | None:
        """Messages per second from the first arrival to the last; None if they coincide.

        The messages of the first poll are not counted: they arrived before
        the span starts. A publisher that sends in batches would otherwise
        be credited with its whole first batch in no time.
        """
        if self.span <= 0:
            return None
        return (self.received - self.first_count) / self.span

    @property
    def rate_from_due(self) -> float | None:
        """Messages per second from the due instant to the last arrival."""
        return self.received / self.last if self.last > 0 else None


@dataclass(frozen=True)
class Arrivals:
    """What one probe run saw: each poll that found messages, as (epoch seconds, count)."""

    polls: list[tuple[float, int]]
    unique: int
    expected: int
    interval: float
    #: CPU seconds the probe spent polling (not starting, nor counting task ids afterwards).
    cpu: float

    @property
    def received(self) -> int:
        return sum(count for _, count in self.polls)

    def figures(self, due: float) -> Figures | None:
        """The figures against ``due`` (epoch seconds); None when nothing arrived."""
        if not self.polls:
            return None
        late = [(at - due, count) for at, count in self.polls]
        return Figures(
            expected=self.expected,
            received=self.received,
            unique=self.unique,
            first=late[0][0],
            last=late[-1][0],
            first_count=late[0][1],
            p50=weighted_percentile(late, 0.5, self.expected),
            p99=weighted_percentile(late, 0.99, self.expected),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "polls": self.polls,
            "unique": self.unique,
            "expected": self.expected,
            "interval": self.interval,
            "cpu": self.cpu,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Arrivals:
        return cls(
            polls=[(float(at), int(count)) for at, count in data["polls"]],
            unique=int(data["unique"]),
            expected=int(data["expected"]),
            interval=float(data["interval"]),
            cpu=float(data["cpu"]),
        )


def weighted_percentile(
    values: Sequence[tuple[float, int]], fraction: float, total: int
) -> float | None:
    """Nearest-rank percentile of ``total`` values, of which ``values`` (ascending, with
    their counts) are known and the rest are larger; None when the rank falls in the rest."""
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for value, count in values:
        seen += count
        if seen >= rank:
            return value
    return None


# -- the broker -----------------------------------------------------------------------


def is_amqp(url: str) -> bool:
    """Whether ``url`` names a RabbitMQ broker rather than Redis."""
    return url.split("://", 1)[0].lower() in {"amqp", "pyamqp", "amqps"}


def check_broker(url: str) -> None:
    """SetupError unless the broker at ``url`` (Redis or RabbitMQ) answers."""
    if is_amqp(url):
        try:
            with Connection(url, connect_timeout=3) as connection:
                connection.connect()
        except (OSError, kombu.exceptions.KombuError) as exc:
            raise SetupError(f"RabbitMQ at {url}: {exc}") from exc
        return
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise SetupError(f"Redis at {url}: {exc}") from exc


def purge_queue(url: str, queue: str) -> None:
    """Delete what the run's queue left in the broker.

    On Redis: the queue and kombu's bindings to it; on RabbitMQ: the queue
    and the exchange of the same name that Celery declared for it.
    """
    if is_amqp(url):
        failures = (OSError, kombu.exceptions.KombuError, amqp.exceptions.AMQPError)
        with contextlib.suppress(*failures), Connection(url, connect_timeout=3) as connection:
            channel = connection.channel()
            channel.queue_delete(queue)
            channel.exchange_delete(queue)
        return
    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        patterns = (f"{queue}*", f"_kombu.binding*.{queue}")
        keys = [key for pattern in patterns for key in client.scan_iter(match=pattern)]
        if keys:
            client.delete(*keys)
        client.close()


def celery_queue(queue: str) -> Queue:
    """The queue as Celery declares its default one: durable, on a direct exchange of its name."""
    return Queue(queue, Exchange(queue, "direct"), routing_key=queue)


def new_queue(label: str) -> str:
    """A queue name of the run's own."""
    return f"bridge-{label}-{uuid.uuid4().hex[:8]}"


# -- one message at a time ---------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One of beat's messages, popped off the queue."""

    #: When it was popped: wall clock (``time.time()``) and ``time.monotonic()``.
    wall: float
    at: float
    schedule: str
    plan_time: datetime
    trigger: str
    #: The task id: the run's id.
    run_id: str

    @property
    def lateness(self) -> float:
        """Seconds from the run's plan time to its arrival at the broker."""
        return self.wall - self.plan_time.timestamp()


class MessageProbe:
    """Pops beat's messages off the run's Redis queue as they arrive.

    A thread blocks in ``BRPOP`` on the queue, so a message is taken the
    moment beat pushes it; its arrival time is read right then. The bridge's
    headers say which schedule and occurrence it is.
    """

    def __init__(self, redis_url: str, queue: str) -> None:
        self.redis_url = redis_url
        self.queue = queue
        self.client = redis.Redis.from_url(redis_url, socket_connect_timeout=3)
        self.arrivals: list[Message] = []
        self._arrived = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._pop, daemon=True)

    def _pop(self) -> None:
        while not self._stopping.is_set():
            popped = self.client.brpop([self.queue], timeout=1)
            if popped is None:
                continue
            wall, at = time.time(), time.monotonic()
            headers = json.loads(popped[1])["headers"]
            arrival = Message(
                wall=wall,
                at=at,
                schedule=str(headers["bridge_schedule"]),
                plan_time=datetime.fromisoformat(headers["bridge_plan_time"]),
                trigger=str(headers["bridge_trigger"]),
                run_id=str(headers["id"]),
            )
            with self._arrived:
                self.arrivals.append(arrival)
                self._arrived.notify_all()

    def wait_for(self, wanted: Callable[[Message], bool], timeout: float) -> Message | None:
        """The first arrival ``wanted`` accepts, waiting up to ``timeout``; None if none came."""
        deadline = time.monotonic() + timeout
        looked = 0  # each arrival is looked at once: a backlog brings hundreds of thousands
        with self._arrived:
            while True:
                found = next((a for a in self.arrivals[looked:] if wanted(a)), None)
                looked = len(self.arrivals)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self._arrived.wait(left)

    def popped_after(self, count: int) -> list[Message]:
        """The arrivals after the first ``count``."""
        with self._arrived:
            return self.arrivals[count:]

    def since(self, moment: float) -> list[Message]:
        """The arrivals popped after ``moment`` (monotonic)."""
        with self._arrived:
            return [a for a in self.arrivals if a.at >= moment]

    def __enter__(self) -> MessageProbe:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise SetupError(f"Redis at {self.redis_url}: {exc}") from exc
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop popping and delete the run's keys (its queue and kombu's bindings)."""
        self._stopping.set()
        self._thread.join(5.0)
        self.client.close()
        purge_queue(self.redis_url, self.queue)


# -- the burst probe process ----------------------------------------------------------------


class Stop:
    """Set by SIGTERM: the probe reports what it has instead of dying silently."""

    requested = False

    @classmethod
    def install(cls) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            cls.requested = True

        signal.signal(signal.SIGTERM, handler)


def poll(url: str, queue: str, expected: int, deadline: float, interval: float) -> Arrivals:
    """Empty ``queue`` until ``expected`` messages have arrived or ``deadline`` has passed."""
    drain = consume_amqp if is_amqp(url) else pop_redis
    cpu_before = time.process_time()
    polls, ids = drain(url, queue, expected, deadline, interval)
    cpu = time.process_time() - cpu_before
    return Arrivals(
        polls=polls, unique=len(set(ids())), expected=expected, interval=interval, cpu=cpu
    )


#: What a drain returns: its polls (epoch seconds, count), and a function that
#: reads the task ids of what arrived, called once the burst is over.
Drained = tuple[list[tuple[float, int]], Callable[[], list[str]]]


def pop_redis(url: str, queue: str, expected: int, deadline: float, interval: float) -> Drained:
    """Pop the Redis list ``queue`` every ``interval`` seconds."""
    client = redis.Redis.from_url(url)
    client.ping()
    print(READY, flush=True)
    polls: list[tuple[float, int]] = []
    bodies: list[bytes] = []
    received = 0
    while received < expected and not Stop.requested:
        started = time.time()
        if started >= deadline:
            break
        batch = cast("list[bytes] | None", client.rpop(queue, BATCH))
        if batch:
            polls.append((time.time(), len(batch)))
            bodies += batch
            received += len(batch)
            if len(batch) == BATCH:
                continue
        time.sleep(max(0.0, started + interval - time.time()))
    return polls, lambda: [task_id(body) for body in bodies]


def consume_amqp(url: str, queue: str, expected: int, deadline: float, interval: float) -> Drained:
    """Consume the RabbitMQ ``queue`` without acknowledgements, noting each delivery."""
    polls: list[tuple[float, int]] = []
    ids: list[str] = []

    def arrived(message: Delivery) -> None:
        polls.append((time.time(), 1))
        ids.append(str(message.headers.get("id")))

    with Connection(url) as connection:
        channel = connection.channel()
        declared = celery_queue(queue)(channel)
        declared.declare()
        with Consumer(channel, [declared], on_message=arrived, no_ack=True):
            print(READY, flush=True)
            while len(polls) < expected and not Stop.requested and time.time() < deadline:
                with contextlib.suppress(TimeoutError):
                    connection.drain_events(timeout=max(interval, 0.05))
    return polls, lambda: ids


def task_id(body: bytes) -> str:
    """The Celery task id of a message as kombu's Redis transport stores it."""
    return str(json.loads(body)["headers"]["id"])


class Probe:
    """The probe process: started before the burst, read once the burst is over.

    ``with Probe(...) as probe:`` returns once the probe polls. It stops by
    itself when ``expected`` messages have arrived or ``due + limit`` has
    passed, or earlier on :meth:`stop`; :meth:`result` waits for its report.
    """

    def __init__(
        self,
        broker_url: str,
        queue: str,
        expected: int,
        due: float,
        limit: float,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        descriptor, name = tempfile.mkstemp(prefix="burst-probe-", suffix=".json")
        os.close(descriptor)
        self.report = Path(name)
        self.command = [
            sys.executable,
            "-m",
            "bench.broker_probe",
            "--broker-url",
            broker_url,
            "--queue",
            queue,
            "--expect",
            str(expected),
            "--due",
            repr(due),
            "--limit",
            repr(limit),
            "--interval",
            repr(interval),
            "--json",
            str(self.report),
        ]
        self.deadline = due + limit
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != READY:
            self.process.kill()
            self.process.wait()
            self.report.unlink(missing_ok=True)
            raise RuntimeError(f"the broker probe did not start (it said {line!r})")
        return self

    def finished(self, timeout: float) -> bool:
        """Whether the probe has stopped, waiting at most ``timeout`` seconds."""
        assert self.process is not None
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        """Stop polling now (the publisher died); :meth:`result` has what arrived so far."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def result(self) -> Arrivals:
        """Wait for the probe's report: the burst is complete, the limit has passed or
        the probe was stopped."""
        assert self.process is not None
        status = self.process.wait(max(0.0, self.deadline - time.time()) + 60.0)
        if status != 0:
            raise RuntimeError(f"the broker probe exited with status {status}")
        return Arrivals.from_json(json.loads(self.report.read_text()))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.report.unlink(missing_ok=True)


# -- the command line ------------------------------------------------------------------


def instant(text: str) -> float:
    """Epoch seconds, or ISO-8601 with an offset, as epoch seconds."""
    try:
        return float(text)
    except ValueError:
        parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset")
    return parsed.timestamp()


def rate(value: float | None) -> str:
    """Messages per second, or ``-`` when there is no time span to divide by."""
    return "-" if value is None else f"{value:,.0f}"


def lateness(value: float | None, limit: float) -> str:
    """A lateness in seconds, or how late it is at least when the message never arrived."""
    return f">{limit:g}" if value is None else f"{value:.3f}"


def describe(figures: Figures | None, arrivals: Arrivals, limit: float) -> str:
    if figures is None:
        return f"nothing arrived (expected {arrivals.expected})"
    missing = "" if figures.complete else f" of {figures.expected} expected"
    duplicates = figures.received - figures.unique
    return "\n".join(
        [
            f"received {figures.received}{missing}, {duplicates} duplicate task ids",
            f"first {figures.first:+.3f}s last {figures.last:+.3f}s after the due instant",
            f"rate {rate(figures.rate)}/s first to last, {rate(figures.rate_from_due)}/s from due",
            f"lateness (s) p50 {lateness(figures.p50, limit)} p99 {lateness(figures.p99, limit)}"
            f" max {lateness(figures.max, limit)}",
            f"probe: {len(arrivals.polls)} polls with messages, every {arrivals.interval * 1e3:g}"
            f" ms, {arrivals.cpu:.2f} CPU s",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.broker_probe",
        description="Empty a Redis or RabbitMQ queue and say when each message arrived.",
    )
    parser.add_argument(
        "--broker-url", default="redis://127.0.0.1:6379/12", help="redis://... or amqp://..."
    )
    parser.add_argument("--queue", required=True, help="the queue to empty")
    parser.add_argument("--expect", type=int, required=True, help="messages the burst sends")
    parser.add_argument(
        "--due", type=instant, required=True, help="the due instant: ISO-8601 or epoch seconds"
    )
    parser.add_argument(
        "--limit", type=float, default=120.0, help="seconds after the due instant to give up"
    )
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between polls (0.002)"
    )
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="write the arrivals to FILE as JSON instead"
    )
    args = parser.parse_args(argv)
    Stop.install()
    arrivals = poll(args.broker_url, args.queue, args.expect, args.due + args.limit, args.interval)
    if args.json:
        args.json.write_text(json.dumps(arrivals.to_json()))
    else:
        print(describe(arrivals.figures(args.due), arrivals, args.limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
