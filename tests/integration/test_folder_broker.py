"""The embedded default's broker: a worker never takes a message before it is whole."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from queue import Empty

import pytest
from celery import Celery
from kombu import Connection

from bridge.folder_broker import TRANSPORT, use

MESSAGES = 300
#: Large enough that writing one takes a while: kombu's own transport let a consumer take
#: the file in between, and it read a part of a message, or nothing.
BODY = "x" * 200_000


def test_a_consumer_takes_every_message_whole_while_they_are_written(tmp_path: Path) -> None:
    app = Celery("folder", set_as_current=False)
    use(app, tmp_path / "broker", polling_interval=0.01)
    options = app.conf.broker_transport_options

    def connect() -> Connection:
        return Connection("filesystem://", transport=TRANSPORT, transport_options=options)

    received: list[int] = []
    failures: list[BaseException] = []
    deadline = time.monotonic() + 120

    def consume() -> None:
        with connect() as connection:
            queue = connection.SimpleQueue("runs")
            while len(received) < MESSAGES and time.monotonic() < deadline:
                try:
                    message = queue.get(timeout=0.05)
                except Empty:
                    continue
                except Exception as exc:  # a message read before it was whole
                    failures.append(exc)
                    return
                received.append(message.payload["n"])
                message.ack()

    # The queue is bound before the consumer starts. Two connections of one process share
    # kombu's record of bindings, which it updates before it writes the exchange's file:
    # a producer in one thread could route by the file before the consumer's thread had
    # written it, and drop the message. A worker and a beat are processes of their own.
    with connect() as connection:
        queue = connection.SimpleQueue("runs")
        consumer = threading.Thread(target=consume)
        consumer.start()
        for n in range(MESSAGES):
            queue.put({"n": n, "body": BODY})
    consumer.join()
    assert not failures, failures[0]
    assert sorted(received) == list(range(MESSAGES))
    assert app.conf.broker_transport == TRANSPORT


def test_a_connection_to_the_folder_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kombu's virtual transports default to host ``localhost``, and it warned at every
    clone of a connection (a worker's first lines) that it reverted to it: no host means
    nothing for a folder."""
    app = Celery("folder", set_as_current=False)
    use(app, tmp_path / "broker")
    with caplog.at_level(logging.WARNING), app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        with connection.clone() as clone:
            clone.SimpleQueue("quiet").put({"sent": True})
        assert connection.SimpleQueue("quiet").get(timeout=5).payload == {"sent": True}
    assert [record.getMessage() for record in caplog.records] == []
