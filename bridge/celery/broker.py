"""The broker, through Celery: publishing a run's message, revoking runs, sending alerts.

:class:`CeleryBroker` is what beat, the workers and the management API are
handed as their :class:`bridge.service.ports.Broker`: beat (scheduled runs),
the management API (manual runs, backfills, cancels) and the watchdog
(overruns, alerts) all send through it, so every message carries the same
headers and options. Beat, the workers' own parts and the services see it
only as that protocol, and import neither Celery nor kombu.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import amqp
import kombu.exceptions
from celery import Celery, signature
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu.exceptions import OperationalError

from bridge.extras import EXTRA_MODULES, EXTRA_OF_SCHEME, MissingExtra, scheme_of
from bridge.rules.canvas import Canvas
from bridge.rules.runs import Envelope, Payload

logger = logging.getLogger("bridge.scheduler")

#: Options a task registered in the app lends its runs, as its own ``apply_async`` would;
#: a schedule's options win. Not ``expires``: a run's expiry is the envelope's alone.
_TASK_OPTIONS = (
    "queue",
    "routing_key",
    "exchange",
    "priority",
    "serializer",
    "delivery_mode",
    "compression",
    "time_limit",
    "soft_time_limit",
)


class Publisher:
    """Publishes runs' messages for one app, with the app's settings read once.

    A message is routed, composed and published by the app's own ``amqp``
    (``router.route``, ``create_task_message``, ``send_task_message``):
    Celery's wire format, its task routes, its publish signals and its sent
    event, as ``app.send_task`` uses them. What ``send_task`` adds is for a
    caller that runs inside a worker task or waits for the result; with the
    settings ``send_task`` reads again for every message, it costs as much
    again (about 90 against 180 µs of CPU a message in a pipelined batch).
    Beat, which is neither, publishes over a producer of its own and keeps
    one publisher for as long as it runs. A run sent without a producer (the
    management API, which a worker task may call) gets what ``send_task``
    gives such a caller: its parent task's ids, and the result backend's
    reply queue declared.

    A task registered in the app lends its options as defaults, as its own
    ``apply_async`` would (``send_task`` does so from Celery 5.7 on).
    """

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._amqp = app.amqp
        self._sent_event = bool(app.conf.task_send_sent_event)
        # How deep argsrepr goes: a setting from Celery 5.6, saferepr's own default before.
        levels = app.conf.get("task_repr_maxlevels")
        self._repr_depth: dict[str, Any] = {} if levels is None else {"maxlevels": levels}
        # Celery's own origin for a message sent from outside a worker.
        self._origin = anon_nodename()

    def publish(
        self, payload: Payload, envelope: Envelope, now: datetime, producer: Any = None
    ) -> None:
        """Send the run's call at ``now`` with the envelope's run id as task id and its
        headers and expiry, over ``producer`` or one from the app's pool.

        The payload's own headers are kept under the bridge's; its ``expires``
        gives way to the envelope's (see :func:`bridge.rules.runs.expires_at`).
        """
        if payload.canvas is not None:
            self._publish_canvas(payload.canvas, payload.options, envelope)
            return
        app, amqp, name = self.app, self._amqp, payload.task
        task = app.tasks.get(name) if app.finalized else None
        options = _task_options(task) | payload.options
        options.pop("expires", None)
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        ignore_result = options.pop("ignore_result", None)
        # A router function sees the headers among the options, as it does from send_task.
        options["headers"] = dict(options.get("headers", {})) | envelope.headers()
        options = amqp.router.route(options, name, payload.args, payload.kwargs, task)
        headers = options.pop("headers")
        parent = app.current_worker_task if producer is None else None
        if parent is not None and app.conf.task_inherit_parent_priority:
            options.setdefault("priority", parent.request.delivery_info.get("priority"))
        if envelope.expires is not None:
            # The message's time to live at the broker as well (AMQP), in seconds.
            options["expiration"] = max(0.0, (envelope.expires - now).total_seconds())
        message = amqp.create_task_message(
            envelope.run_id,
            name,
            payload.args,
            payload.kwargs,
            expires=envelope.expires,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            reply_to=app.thread_oid,
            root_id=parent and (parent.request.root_id or parent.request.id),
            parent_id=parent and parent.request.id,
            create_sent_event=self._sent_event,
            ignore_result=ignore_result,
            origin=self._origin,
            argsrepr=self._repr(payload.args, amqp.argsrepr_maxsize),
            kwargsrepr=self._repr(payload.kwargs, amqp.kwargsrepr_maxsize),
            **options,
        )
        if producer is not None:
            # Once: a batch belongs to its connection, and kombu's retry on a new one would
            # publish the rest of it there while what the old one held is lost. Beat
            # publishes a failed batch again from its records (see CeleryOutbox).
            once = options | {"retry": False}
            amqp.send_task_message(producer, name, message, headers=headers, **once)
            return
        with app.producer_or_acquire() as pooled:
            if not ignore_result:
                app.backend.on_task_call(pooled, envelope.run_id)
            amqp.send_task_message(pooled, name, message, headers=headers, **options)

    def _publish_canvas(self, canvas: Canvas, options: dict[str, Any], envelope: Envelope) -> None:
        """Apply the run's canvas as Celery applies one: each of its tasks carries the run's
        headers, its first task the run's id (see :mod:`bridge.rules.canvas`).

        Celery's own ``apply_async`` of the chain, group or chord composes and routes
        every message, so a chord's header and body, and the rest of a chain that a
        worker sends as each task ends, are what the app would send. It publishes over
        the app's pool rather than beat's producer: a canvas is rare, and its later
        tasks are a worker's to send anyway.
        """
        defaults = {key: value for key, value in options.items() if key != "expires"}
        marked = canvas.marked(envelope.run_id, envelope.headers(), defaults, envelope.expires)
        signature(marked, app=self.app).apply_async()

    def _repr(self, value: Any, maxsize: int) -> str:
        """Celery's ``saferepr`` of a call's arguments; ``repr`` of none, which is the
        same text for a fraction of the CPU (most schedules pass no arguments)."""
        if not value:
            return repr(value)
        return saferepr(value, maxsize, **self._repr_depth)  # type: ignore[no-any-return]


def _task_options(task: Any) -> dict[str, Any]:
    """The options a registered task sets (see :data:`_TASK_OPTIONS`)."""
    return {
        option: value
        for option in _TASK_OPTIONS
        if (value := getattr(task, option, None)) is not None
    }


class _SkipsDeclared:
    """Producer mixin: a declaration kombu has already made on the connection is skipped.

    Celery asks for the task's queue to be declared with every message. Kombu
    declares it once per connection, but only after binding a copy of the
    queue to the channel and wrapping the call for retries, every time: a
    fifth of ``send_task``'s CPU in a batch (measured: 228 against 177 µs a
    message). This looks in kombu's own record of what the connection has
    declared first, which kombu clears when it reconnects, so a queue is
    still declared again on a new connection.
    """

    connection: Any

    def maybe_declare(self, entity: Any, retry: bool = False, **retry_policy: Any) -> Any:
        declared = getattr(self.connection, "declared_entities", None) or ()
        if entity and entity.can_cache_declaration and hash(entity) in declared:
            return False
        return super().maybe_declare(entity, retry, **retry_policy)  # type: ignore[misc]


@functools.cache
def _batch_producer_class(producer_class: type) -> type:
    return type(f"Batch{producer_class.__name__}", (_SkipsDeclared, producer_class), {})


def batch_producer(app: Celery, connection: Any) -> Any:
    """A producer of the app's class for publishing many messages over ``connection``
    (see :class:`_SkipsDeclared`); on RabbitMQ its channel also writes a batch's
    messages together (see :class:`AmqpPublishBatch`)."""
    producer = _batch_producer_class(app.amqp.Producer)(connection, auto_declare=False)
    channel = producer.channel
    if isinstance(channel, amqp.Channel) and not channel.connection.confirm_publish:
        # Kombu's batch asks the channel for a batch of its own (Redis has one; py-amqp
        # has none). Beat's connection is its alone, so no other producer sees it.
        channel.create_publish_batch = functools.partial(AmqpPublishBatch, channel)
    return producer


class AmqpPublishBatch:
    """A kombu publish batch for a py-amqp channel: the frames of the batch's messages
    are written to the socket together, :data:`AMQP_WRITE_BYTES` at a time, rather
    than one ``sendall`` a message.

    Over a socket to a local RabbitMQ each write also runs the broker's side of
    the delivery in the kernel, and was a fifth of beat's publishing CPU. The
    messages, their order and their properties are py-amqp's own, written by
    ``basic_publish``. Only its ``Basic.Publish`` frames and their content are
    held: any other frame (a declaration, which waits for its answer; what
    py-amqp writes back when the broker closes a channel) sends what is held,
    then itself, at once. Not with publisher confirms, where each publish
    waits for its ack: :func:`batch_producer` offers no batch then.

    As with a Redis pipeline, a broker error while the batch publishes or
    writes leaves its delivery uncertain: it is raised as kombu's
    ``BatchPublishError``, which kombu does not retry on a new connection
    (the batch's session belongs to the old one) and beat takes as a failed
    batch, of which it marks nothing sent; the batch then refuses to go on.
    """

    def __init__(self, channel: Any, max_size: int) -> None:
        self.channel = channel
        self.max_size = max_size
        connection = channel.connection
        self._lost = (*connection.connection_errors, *connection.channel_errors)
        self._transport = connection.transport
        self._send = self._transport._write
        self._held: list[bytes] = []
        self._size = 0
        self._messages = 0
        self._failed: BaseException | None = None
        self._transport._write = self._write

    def publish(self, message: Any, **kwargs: Any) -> Any:
        self._check()
        held = len(self._held)
        try:
            result = self.channel.basic_publish(message, **kwargs)
        except self._lost as exc:
            raise self._fail(exc) from exc
        except BaseException:
            # Not a frame of a message left half written: the stream stays whole.
            del self._held[held:]
            raise
        self._messages += 1
        if self._size >= AMQP_WRITE_BYTES or self._messages >= self.max_size:
            self.flush()
        return result

    def _write(self, data: bytes) -> None:
        if _is_publish_frame(data):
            # py-amqp writes each frame from a buffer it reuses: hold a copy.
            self._held.append(bytes(data))
            self._size += len(data)
            return
        self.flush()
        self._send(data)

    def flush(self) -> None:
        self._check()
        held = self._held
        self.discard()
        if held:
            try:
                self._send(b"".join(held))
            except self._lost as exc:
                raise self._fail(exc) from exc

    def discard(self) -> None:
        self._held, self._size, self._messages = [], 0, 0

    def close(self) -> None:
        self.discard()
        self._transport._write = self._send

    def _fail(self, exc: BaseException) -> kombu.exceptions.BatchPublishError:
        self._failed = exc
        self.discard()
        return kombu.exceptions.BatchPublishError(
            f"RabbitMQ publish batch failed; delivery is uncertain: {exc!r}"
        )

    def _check(self) -> None:
        if self._failed is not None:
            raise kombu.exceptions.BatchPublishError(
                "RabbitMQ publish batch cannot go on after a failure"
            ) from self._failed


#: The start of a ``Basic.Publish`` method frame: frame type 1, then (after the channel
#: and the size) class 60, method 40.
_PUBLISH_METHOD = b"\x00\x3c\x00\x28"


def _is_publish_frame(data: bytes) -> bool:
    """Whether py-amqp's write is a message: its ``Basic.Publish`` frame (with, for a
    message that fits one frame, its content), or a content frame of a larger one (types
    2 and 3; beat's connection sends no other content)."""
    kind = data[0] if data else None
    return (kind == 1 and bytes(data[7:11]) == _PUBLISH_METHOD) or kind in (2, 3)


#: Bytes of a batch's frames held before they are written (a write a hundred messages).
AMQP_WRITE_BYTES = 64 * 1024


class CeleryBroker:
    """The broker of one Celery app, as beat, the workers and the management API use it
    (:class:`bridge.service.ports.Broker`)."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.publisher = Publisher(app)

    def publish(
        self, payload: Payload, envelope: Envelope, now: datetime, producer: Any = None
    ) -> None:
        self.publisher.publish(payload, envelope, now, producer)

    def revoke(self, run_ids: Sequence[str], terminate: bool) -> None:
        revoke(self.app, list(run_ids), terminate)

    def send_alert(self, task: str, payload: dict[str, Any]) -> None:
        self.app.send_task(task, args=[payload])

    def outbox(self) -> CeleryOutbox:
        return CeleryOutbox(self.app)


class CeleryOutbox:
    """A broker connection batches are published over, and its producer.

    Connected at the first publish and dropped when the broker fails, so the
    next batch connects afresh. A connection attempt is made once: the tick
    must not sit in Celery's long reconnect loop, deaf to SIGTERM, while the
    broker is down.
    """

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._connection: Any = None
        self._producer: Any = None
        self._errors: tuple[type[BaseException], ...] | None = None

    def producer(self) -> Any:
        if self._connection is None:
            self._connection = self.app.connection_for_write()
        if self._producer is None:
            self._connection.ensure_connection(max_retries=0)
            self._producer = batch_producer(self.app, self._connection)
        return self._producer

    def begin(self) -> None:
        """Before a batch, look on a py-amqp connection for the broker having closed it
        (a restart, its heartbeat timeout while beat was idle): one read that finds
        nothing when it is alive. Beat publishes a batch once, without kombu's retry
        (see :class:`AmqpPublishBatch`), so a connection found closed only by the
        batch's first message would fail a tick; it is dropped here instead, and the
        batch connects afresh. Other transports reconnect by themselves."""
        channel = getattr(self._producer, "channel", None)
        if not isinstance(channel, amqp.Channel):
            return
        try:
            channel.connection.drain_events(timeout=0)
        except TimeoutError:  # nothing to read: the connection is alive
            return
        except self.errors() as exc:
            logger.debug("bridge: the broker closed beat's connection: %s", exc)
            self.drop()

    def errors(self) -> tuple[type[BaseException], ...]:
        """The errors that mean the broker cannot be reached or took a batch in part.

        They are the transport's, the same for every connection: read once,
        as they are asked for with every message.
        """
        if self._errors is None:
            connection = self._connection or self.app.connection_for_write()
            self._errors = (
                kombu.exceptions.OperationalError,
                # A pipelined batch that failed: delivery of its messages is uncertain.
                kombu.exceptions.BatchPublishError,
                OSError,
                *connection.connection_errors,
                *connection.channel_errors,
            )
        return self._errors

    def drop(self) -> None:
        """Forget a connection that failed (or at shutdown), so the next send reconnects."""
        connection, self._connection, self._producer = self._connection, None, None
        if connection is not None:
            try:
                connection.release()
            except Exception:
                logger.debug("bridge: releasing a broker connection failed", exc_info=True)


def revoke(app: Celery, run_ids: list[str], terminate: bool = True) -> None:
    """Revoke runs, and with ``terminate`` end them where they already execute (overlap
    ``replace``, a cancel that asks for it) with SIGTERM.

    The revoke is broadcast to every worker, which also discards a message it
    has not started yet; the caller marks the records ``REVOKED``.
    """
    if run_ids:
        app.control.revoke(run_ids, terminate=terminate, signal="SIGTERM")


def queue_lengths(app: Celery, queues: Sequence[str]) -> dict[str, int | None]:
    """How many messages wait in each queue (not those a worker holds unacknowledged):
    0 for a queue the broker does not have (nothing was ever sent there, or it is
    empty on Redis), None for every queue when the broker does not answer.

    Each queue is asked on a channel of its own, by a passive declare, which creates
    nothing: RabbitMQ closes the channel of a declare that finds no queue, and on the
    virtual transports (Redis, the embedded folder) it counts the queue's messages,
    of every priority.
    """
    connection = app.connection_for_read()
    lost = (*connection.connection_errors, OperationalError, OSError)
    try:
        # One attempt, at once: a page or a scrape waits for it, and says when it failed.
        connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
        return {queue: _waiting(connection, queue) for queue in queues}
    except lost:
        return dict.fromkeys(queues)
    finally:
        connection.release()


def _waiting(connection: Any, queue: str) -> int:
    channel = connection.channel()
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except connection.channel_errors:
        return 0
    finally:
        with contextlib.suppress(*connection.channel_errors, *connection.connection_errors):
            channel.close()


def check_broker(app: Any) -> None:
    """Import what the app's broker transport needs now, so a missing library is one
    line naming its extra rather than an error from deep inside kombu.

    For a scheme an extra covers, its modules are imported first: kombu's
    own failure when one is missing can be an unrelated ``AttributeError``
    raised while its transport module loads. Then the transport is built,
    which imports anything else it needs but opens no connection.
    """
    scheme = scheme_of(str(app.conf.broker_url or "amqp://"))
    try:
        for module in EXTRA_MODULES.get(EXTRA_OF_SCHEME.get(scheme, ""), ()):
            importlib.import_module(module)
        connection = app.connection_for_write()
        try:
            connection.transport  # noqa: B018 - imports and builds the transport
        finally:
            connection.release()
    except ImportError as exc:
        raise MissingExtra("broker_url", scheme, exc) from None
