"""Each supported broker end to end: Redis and RabbitMQ in production, the filesystem
broker on the embedded default.

What differs between brokers is what they do with a message: RabbitMQ drops
an expired one unseen (Celery's expiry becomes a per-message TTL), publishes
each message of a batch at once rather than in a pipeline, and carries
priorities as message properties. These tests hold the bridge's promises on
each: every occurrence sent once and recorded, an expired run ended within
seconds whoever (if anyone) saw it, ``replace`` revoking the running run, and
a message's priority and routing reaching the worker.
"""

from __future__ import annotations

import ast
import json
import re
import select
import socket
import subprocess
import uuid
from datetime import timedelta
from itertools import pairwise
from typing import Any

import httpx
import pytest
from celery import Celery
from celery.signals import before_task_publish
from kombu import Queue
from kombu.exceptions import BatchPublishError

from bridge.celery.broker import CeleryOutbox, Publisher, batch_producer
from bridge.clock import utcnow
from bridge.rules.kinds import Trigger
from bridge.rules.runs import Envelope, Payload
from tests.integration.test_policies import (
    FINAL,
    SEC,
    Run,
    add,
    cold_stop,
    count,
    db_runs,
    db_schedule,
    history,
    now,
    show,
    start_beat,
    start_worker,
    ts,
)
from tests.support import Env, free_port, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["redis", "rabbitmq", "filesystem"])
def any_env(request: pytest.FixtureRequest) -> Env:
    """Every broker the bridge is tested with, each with its usual database."""
    fixture = {"redis": "pg_env", "rabbitmq": "pg_rabbitmq_env", "filesystem": "embedded_env"}
    env: Env = request.getfixturevalue(fixture[request.param])
    return env


def test_a_run_no_worker_received_ends_expired_within_seconds(any_env: Env) -> None:
    """A sent run whose message expired unseen stops blocking its schedule at once.

    With no worker at all, every broker keeps the run from being recorded
    by a worker; RabbitMQ also drops the message. Beat ends it as expired a
    couple of seconds after its expiry, counts it, and the schedule goes on.
    """
    env = any_env
    add(env, "exp", "quick", "every 2s")  # expires at the next occurrence (the default)
    beat = start_beat(env)
    first = wait_for(lambda: history(env, "exp"), 30, what="a first run")[0]

    def first_ended() -> Run | None:
        return next((r for r in history(env, "exp") if r["id"] == first["id"]), None)

    ended = wait_for(lambda: (r := first_ended()) and r["status"] in FINAL and r, 30, what="end")
    assert (ended["status"], ended["error"], ended["started_at"]) == ("REVOKED", "expired", None)
    # Its message expired at the following occurrence, two seconds on; or, when a busy beat
    # sent it less than a second before that occurrence, a second after it was sent (the
    # least a message is given).
    expires = ts(ended["expires_at"])
    following = ended["plan_time"] + 2 * SEC
    assert expires is not None and following <= expires < following + 3 * SEC, ended
    # Two seconds of grace for a worker that took it just in time, one of polling, and slack.
    assert ended["finished_at"] - expires <= 4.5 * SEC, ended
    assert f"run {first['id']} of 'exp' ended REVOKED: expired before a worker received it" in (
        beat.log
    )

    # Every occurrence is tried (none skipped for long behind a dead run), and a worker
    # started now runs the next ones.
    start_worker(env, 2)
    wait_for(lambda: count(env, "exp", "SUCCESS") >= 2, 40, what="runs after the worker came")
    beat.stop()
    expired = [r for r in history(env, "exp") if r["status"] == "REVOKED"]
    assert expired and all(r["error"] == "expired" and not r["started_at"] for r in expired)
    assert show(env, "exp")["expired_count"] == len(expired)
    assert not [
        r for r in history(env, "exp") if r["status"] == "SENT" and r["queued_at"] < now() - 6 * SEC
    ]


def test_beat_and_worker_started_together_on_rabbitmq(pg_rabbitmq_env: Env) -> None:
    """Schedules due when beat and worker start together never stay blocked.

    The first runs may reach RabbitMQ before the worker consumes, and expire
    there; they end as expired within seconds and the following occurrences run.
    """
    env = pg_rabbitmq_env
    add(env, "every-1s", "quick", "every 1s")
    add(env, "every-2s", "quick", "every 2s")
    env.start("worker", "-c", "2")
    beat = env.start("beat")
    wait_for(
        lambda: count(env, "every-1s", "SUCCESS") >= 8 and count(env, "every-2s", "SUCCESS") >= 4,
        60,
        what="both schedules to run",
    )
    beat.stop()
    for name in ("every-1s", "every-2s"):
        runs = db_runs(env, name)
        assert all(r.status in (*FINAL, "SENT", "RECEIVED", "STARTED") for r in runs)
        assert all(r.status in ("SUCCESS", "REVOKED") for r in runs if r.status in FINAL), runs
        revoked = [r for r in runs if r.status == "REVOKED"]
        assert all(r.error == "expired" for r in revoked), revoked
        assert db_schedule(env, name).expired_count == len(revoked)
        # An expired run blocks its schedule for its expiry and a few seconds more.
        assert db_schedule(env, name).skipped_count <= 5 * len(revoked) + 2, name


def test_a_batch_reaches_the_worker_once_each_with_priority_and_routing(
    pg_rabbitmq_env: Env,
) -> None:
    """Beat's batched publish over RabbitMQ: each of many runs due together arrives once."""
    env = pg_rabbitmq_env
    names = [f"batch-{i:02}" for i in range(40)]
    # Catch-up all: a beat a busy machine makes more than an interval late still sends each
    # occurrence (under latest it would send the latest alone), so none may be missing.
    for name in names:
        add(env, name, "quick", "every 2s", "--overlap", "allow", "--expires", "never",
            "--catchup", "all")  # fmt: skip
    # Their messages never expire either: a worker that a busy machine makes take one late
    # would discard it, and say so.
    add(env, "prio", "delivery", "every 2s", "--options", json.dumps({"priority": 7}),
        "--expires", "never")  # fmt: skip
    add(env, "routed", "delivery", "every 2s", "--queue", "reports", "--expires", "never")
    start_worker(env, 8)
    env.start("worker", "-Q", "reports", "-c", "1").wait_log("ready", timeout=90)
    beat = start_beat(env, BRIDGE_BATCH_SIZE="16")  # several batches per instant
    wait_for(
        lambda: all(count(env, name, "SUCCESS") >= 3 for name in [*names, "prio", "routed"]),
        90,
        what="three runs of every schedule",
    )
    beat.stop()
    for name in names:
        runs = db_runs(env, name)
        plans = [r.plan_time for r in runs]
        assert len(plans) == len(set(plans)), name  # one record per occurrence
        steps = [(b - a) / timedelta(seconds=2) for a, b in pairwise(plans)]
        assert all(step == 1 for step in steps), (name, plans)  # none missed
    assert "Discarding" not in "".join(p.log for p in env.processes)
    prio = [r for r in history(env, "prio") if r["status"] == "SUCCESS"]
    assert all(ast.literal_eval(r["result"])["priority"] == 7 for r in prio), prio
    routed = [r for r in history(env, "routed") if r["status"] == "SUCCESS"]
    assert all(ast.literal_eval(r["result"])["routing_key"] == "reports" for r in routed), routed
    assert all(str(r["worker"]).startswith("worker-1@") for r in routed), routed


def test_replace_revokes_the_running_run_on_rabbitmq(pg_rabbitmq_env: Env) -> None:
    """Overlap ``replace`` over RabbitMQ: the running run is terminated and recorded."""
    env = pg_rabbitmq_env
    add(env, "rep", "slow", "every 3s", "--overlap", "replace", seconds=20)
    worker = start_worker(env, 4)
    beat = start_beat(env)
    wait_for(lambda: count(env, "rep", "REVOKED") >= 2, 40, what="two replaced runs")
    beat.stop()
    runs = history(env, "rep")
    replaced = [r for r in runs if r["status"] == "REVOKED"]
    for run in replaced:
        assert str(run["error"]).startswith("replaced by run "), run
        assert run["finished_at"] - (run["started_at"] or run["queued_at"]) < 10 * SEC, run
    assert any(f"Terminating {r['id']}" in worker.log for r in replaced if r["started_at"])
    assert not [r for r in runs if r["status"] == "SUCCESS"]
    cold_stop(worker)  # its last run would sleep on for 20 s


def test_beats_producer_declares_each_queue_once_a_connection(amqp_url: str) -> None:
    """Celery asks for the task's queue to be declared with every message; beat's producer
    skips what kombu has declared on the connection already, and declares it again on a
    new connection: RabbitMQ drops a message sent to a queue nobody declared."""
    app = Celery("declares", broker=amqp_url, set_as_current=False)
    queue = f"declared-{uuid.uuid4().hex[:8]}"

    def publish(count: int) -> None:
        with app.connection_for_write() as connection:
            producer = batch_producer(app, connection)
            for i in range(count):
                app.send_task("tests.nothing", args=[i], producer=producer, queue=queue)
            assert hash(Queue(queue)) in connection.declared_entities

    def waiting() -> int:
        with app.connection_for_write() as connection:
            return int(connection.default_channel.queue_declare(queue, passive=True).message_count)

    # RabbitMQ counts a message once it has queued it, which a busy server does a moment
    # after the publish returns: a lost message never would be.
    publish(3)
    wait_for(lambda: waiting() == 3, 10, what="three messages queued")
    with app.connection_for_write() as connection:
        connection.default_channel.queue_delete(queue)
    publish(2)  # a new connection: the queue is declared again, the messages kept
    wait_for(lambda: waiting() == 2, 10, what="two messages queued")


def test_a_batch_on_rabbitmq_delivers_every_message_in_order(amqp_url: str) -> None:
    """Beat's batches on RabbitMQ write their messages together: every one arrives, in
    the order published, whole, across several writes and a declaration of a new queue
    in the middle of the batch (which waits for RabbitMQ's answer, so must not be held
    back); a batch that fails is not sent at all, and the connection stays usable."""
    app = Celery("batched", broker=amqp_url, set_as_current=False)
    first, second = (f"batched-{uuid.uuid4().hex[:8]}" for _ in range(2))
    big = "x" * 2000  # 300 messages of 2 KB: several writes of AMQP_WRITE_BYTES
    with app.connection_for_write() as connection:
        producer = batch_producer(app, connection)
        transport = producer.channel.connection.transport
        writes: list[int] = []
        sendall = transport._write

        def counted(data: bytes) -> None:
            writes.append(len(data))
            sendall(data)

        transport._write = counted
        with producer.batch(max_size=500):
            for i in range(300):
                queue = first if i < 150 else second  # the second queue declared mid-batch
                app.send_task("tests.nothing", args=[i, big], producer=producer, queue=queue)
        assert transport._write is counted  # given back when the batch closed

        def failing_batch() -> None:
            with producer.batch(max_size=500):
                app.send_task("tests.nothing", args=["dropped"], producer=producer, queue=first)
                raise RuntimeError("the batch fails before it is flushed")

        with pytest.raises(RuntimeError):
            failing_batch()
        app.send_task("tests.nothing", args=[300, big], producer=producer, queue=second)
        assert 3 < len(writes) < 100  # far fewer writes than messages
        got: dict[str, list[int]] = {first: [], second: []}
        for queue, expected in ((first, 150), (second, 151)):
            with connection.SimpleQueue(queue) as received:
                for _ in range(expected):
                    message = received.get(timeout=10)
                    args = message.decode()[0]
                    assert args[1] == big
                    got[queue].append(args[0])
                    message.ack()
                assert received.qsize() == 0
            connection.default_channel.queue_delete(queue)
    assert got[first] == list(range(150))
    assert got[second] == list(range(150, 301))


def test_a_batch_on_rabbitmq_that_loses_its_connection_fails_whole(amqp_url: str) -> None:
    """The connection drops in the middle of a batch: kombu must not publish the rest
    on a new connection (what the batch held is lost, its delivery uncertain), so the
    batch fails with kombu's ``BatchPublishError``, which beat takes as a failed batch
    and marks nothing of it sent, and refuses any further message."""
    app = Celery("cut", broker=amqp_url, set_as_current=False)
    queue = f"cut-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as connection:
        producer = batch_producer(app, connection)
        failures: list[BaseException] = []

        def cut_batch() -> None:
            with producer.batch(max_size=500):
                for i in range(5):
                    app.send_task("tests.nothing", args=[i], producer=producer, queue=queue)
                producer.channel.connection.transport.sock.shutdown(socket.SHUT_RDWR)
                for i in range(5, 10):
                    try:
                        app.send_task("tests.nothing", args=[i], producer=producer, queue=queue)
                    except BatchPublishError as exc:
                        failures.append(exc)

        with pytest.raises(BatchPublishError):
            cut_batch()
        assert len(failures) == 5  # the first after the cut, and every one after it
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        assert channel.queue_declare(queue, passive=True).message_count == 0
        channel.queue_delete(queue)


def test_a_batch_on_rabbitmq_reads_what_the_broker_said_before_it_writes(amqp_url: str) -> None:
    """A message to an exchange that does not exist: RabbitMQ closes the channel once the
    batch is written. Before the next batch writes anything, what the broker said is
    read (py-amqp reads the socket before each publish, for a ``connection.blocked``
    notice): the batch finds the channel closed and fails whole, sending nothing."""
    app = Celery("told", broker=amqp_url, set_as_current=False)
    queue = f"told-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as connection:
        connection.default_channel.queue_declare(queue)
        producer = batch_producer(app, connection)
        with producer.batch(max_size=500):
            producer.publish({"sent": "nowhere"}, exchange=f"{queue}-missing", routing_key=queue)
        # Until RabbitMQ's word arrives: the channel's close, which py-amqp reads only when
        # asked to.
        readable, _, _ = select.select([producer.channel.connection.transport.sock], [], [], 10)
        assert readable

        def next_batch() -> None:
            with producer.batch(max_size=500):
                for i in range(3):
                    producer.publish({"sent": i}, routing_key=queue)

        with pytest.raises(BatchPublishError, match="NOT_FOUND"):
            next_batch()
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        assert channel.queue_declare(queue, passive=True).message_count == 0
        channel.queue_delete(queue)


def test_beat_connects_afresh_when_rabbitmq_closed_its_connection_between_batches(
    amqp_url: str,
) -> None:
    """RabbitMQ closes beat's idle connection (a restart, a missed heartbeat): beat
    publishes each message once, without kombu's retry, so the next batch would fail;
    before it starts, the outbox finds the connection closed and connects afresh."""
    app = Celery("closed", broker=amqp_url, set_as_current=False)
    queue = f"closed-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    outbox = CeleryOutbox(app)
    publisher = Publisher(app)

    def batch(count: int) -> None:
        outbox.begin()
        producer = outbox.producer()
        with producer.batch(max_size=500):
            for i in range(count):
                envelope = Envelope(str(uuid.uuid4()), i, "closed", utcnow(), Trigger.SCHEDULED)
                publisher.publish(
                    Payload("tests.nothing", [i], {}, {}), envelope, utcnow(), producer
                )

    try:
        batch(3)
        first = outbox.producer()
        port = first.channel.connection.transport.sock.getsockname()[1]
        listed = subprocess.run(
            ["rabbitmqctl", "-q", "list_connections", "pid", "peer_port"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        pid = next(line.split()[0] for line in listed.splitlines() if line.endswith(f"\t{port}"))
        subprocess.run(
            ["rabbitmqctl", "close_connection", pid, "closed by the test"],
            capture_output=True,
            check=True,
            timeout=30,
        )  # RabbitMQ has sent its Connection.Close when the command returns
        batch(2)
        assert outbox.producer() is not first
    finally:
        outbox.drop()
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        wait_for(
            lambda: channel.queue_declare(queue, passive=True).message_count == 5,
            10,
            what="the five messages queued",
        )
        channel.queue_delete(queue)


@pytest.mark.parametrize("pooled", [False, True], ids=["beat", "api"])
@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_runs_message_is_the_one_send_task_composes(
    broker: str, pooled: bool, request: pytest.FixtureRequest
) -> None:
    """The publisher composes a run's message with the app's own parts rather than
    ``send_task``: what reaches the broker is the same message, task options, routes
    (a router function sees the headers) and publish signals included, but for the time
    to live counted from a later now; over beat's producer or one from the app's pool."""
    url = request.getfixturevalue("redis_url" if broker == "redis" else "amqp_url")
    app = Celery("composes", broker=url, set_as_current=False)
    queue = f"routed-{uuid.uuid4().hex[:8]}"

    def by_schedule(
        name: str, args: object, kwargs: object, options: dict[str, Any], **_: object
    ) -> dict[str, str] | None:
        composed = options.get("headers", {}).get("bridge_schedule") == "composed"
        return {"queue": queue} if composed else None

    app.conf.task_routes = [by_schedule]

    # Not shared: apps made later in this process (other tests') must not be given it.
    @app.task(name="tests.routed", time_limit=30, priority=3, shared=False)
    def routed(*args: object, **kwargs: object) -> None: ...

    app.finalize()
    signalled: list[str] = []

    def before_publish(headers: dict[str, object], **_: object) -> None:
        signalled.append(str(headers["id"]))

    before_task_publish.connect(before_publish, weak=False)
    run_id = str(uuid.uuid4())
    expires = utcnow() + timedelta(minutes=5)
    payload = Payload("tests.routed", [1, "two"], {"three": [3]}, {"headers": {"own": "kept"}})
    envelope = Envelope(run_id, 7, "composed", utcnow(), Trigger.SCHEDULED, expires)
    try:
        with app.connection_for_write() as connection:
            producer = None if pooled else batch_producer(app, connection)
            Publisher(app).publish(payload, envelope, utcnow(), producer)
            app.send_task(
                "tests.routed",
                args=[1, "two"],
                kwargs={"three": [3]},
                task_id=run_id,
                headers={"own": "kept"} | envelope.headers(),
                expires=expires,
                producer=connection.Producer(),
            )
            with connection.SimpleQueue(queue) as received:
                ours, theirs = (received.get(timeout=10) for _ in range(2))
                for message in (ours, theirs):
                    message.ack()
    finally:
        before_task_publish.disconnect(before_publish)
    assert signalled == [run_id, run_id]
    assert ours.headers == theirs.headers
    assert ours.headers["timelimit"] == [30, None]
    assert ours.headers["own"] == "kept" and ours.headers["bridge_schedule"] == "composed"
    assert ours.decode() == theirs.decode() == [[1, "two"], {"three": [3]}, ours.decode()[2]]
    assert ours.content_type == theirs.content_type
    mine, celerys = dict(ours.properties), dict(theirs.properties)
    for properties in (mine, celerys):
        properties.pop("delivery_tag", None)
        properties.pop("delivery_info", None)
    # The broker's time to live, in milliseconds.
    ttl_ours, ttl_theirs = (float(p.pop("expiration")) / 1000 for p in (mine, celerys))
    assert abs(ttl_ours - ttl_theirs) < 5 and 290 < ttl_ours <= 300
    assert mine == celerys
    assert mine["priority"] == 3


def test_the_overview_and_metrics_count_the_messages_waiting_in_each_queue(
    broker_env: Env,
) -> None:
    """No worker takes them: three manual runs to a queue of the schedule's own wait there,
    as the broker counts them, beside the app's default queue."""
    queue = f"waiting-{uuid.uuid4().hex[:8]}"
    broker_env.cli(
        "add", "queued", "--task", "workers.app.quick", "--timer", "@yearly", "--queue", queue
    )
    for _ in range(3):
        broker_env.cli("run", "queued")
    port = free_port()
    broker_env.serve(port)
    try:
        assert_counted(port, queue)
    finally:
        with Celery(broker=broker_env.broker_url).connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)  # left on the broker otherwise


def assert_counted(port: int, queue: str) -> None:
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    assert f'bridge_queue_messages{{queue="{queue}"}} 3.0' in metrics, metrics[-2000:]
    assert 'bridge_queue_messages{queue="celery"}' in metrics
    page = httpx.get(f"http://127.0.0.1:{port}/", timeout=30).text
    row = re.search(rf'<tr data-queue="{queue}"><td>{queue}</td><td>(\d+)</td></tr>', page)
    assert row is not None and row.group(1) == "3", page[-3000:]
