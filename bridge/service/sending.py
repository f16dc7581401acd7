"""Runs sent and revoked with their records kept true: one rule for beat and the API.

A run is recorded before its message is published. A message that cannot
be sent, for a reason retrying would not cure (a value Celery or the broker
refuses), ends its run ``FAILURE`` with ``could not send: Type: message``, so
that a ``PENDING`` record does not block its schedule's overlap check. A
broker that cannot be reached is for the caller to name as passing
(``transient``): beat sends the run again later; a manual run fails.

Revoking runs records them ``REVOKED`` with the reason first and then
broadcasts the revoke, so that the record of a run the revoke terminates
says why rather than just "terminated". Beat ends the runs overlap
``replace`` displaces in the transaction that records their replacements
and checks its marks, and broadcasts with :func:`revoke_recorded` once that
transaction is committed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from bridge.clock import utcnow
from bridge.errors import BridgeError
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus
from bridge.rules.runs import Envelope, Payload
from bridge.service.ports import Broker


class RunEnds(Protocol):
    """The storage gateway that ends runs (beat's or the management side's)."""

    def finish_runs(
        self,
        run_ids: Sequence[str],
        status: RunStatus,
        now: datetime,
        reason: str,
        statuses: Collection[RunStatus] = ...,
    ) -> list[str]: ...


class NotSent(BridgeError):
    """A run's message could not be sent; its record was ended ``FAILURE`` with ``reason``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def failure_reason(exc: BaseException) -> str:
    """Why a message was not sent, in one line for the run's record."""
    return f"could not send: {type(exc).__name__}: {exc}".splitlines()[0]


def publish_or_fail(
    broker: Broker,
    runs: RunEnds,
    payload: Payload,
    envelope: Envelope,
    producer: Any = None,
    transient: tuple[type[BaseException], ...] = (),
) -> None:
    """Publish a recorded run; raises :class:`NotSent` after ending its record ``FAILURE``.

    An error of one of the ``transient`` kinds propagates as it is, and the
    record stays ``PENDING`` for the caller to send again.
    """
    try:
        broker.publish(payload, envelope, utcnow(), producer)
    except transient:
        raise
    except Exception as exc:
        reason = failure_reason(exc)
        runs.finish_runs([envelope.run_id], RunStatus.FAILURE, utcnow(), reason)
        raise NotSent(reason) from exc


def revoke(
    broker: Broker,
    runs: RunEnds,
    run_ids: Sequence[str],
    reason: str,
    terminate: bool = True,
    statuses: Collection[RunStatus] = NON_FINAL_STATUSES,
) -> list[str]:
    """End the runs among ``run_ids`` still in one of the open ``statuses`` ``REVOKED``
    with ``reason``, then revoke them on every worker (terminating them where they
    execute, unless ``terminate`` is False); the ids revoked. A run that ended or moved
    on meanwhile keeps its outcome and is not revoked."""
    if not run_ids:
        return []
    ended = runs.finish_runs(run_ids, RunStatus.REVOKED, utcnow(), reason, statuses)
    revoke_recorded(broker, ended, terminate)
    return ended


def revoke_recorded(broker: Broker, run_ids: Sequence[str], terminate: bool = True) -> None:
    """Revoke on every worker runs whose records already say ``REVOKED`` and why."""
    if run_ids:
        broker.revoke(run_ids, terminate)
