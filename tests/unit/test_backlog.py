"""The workers' write queue: a batch rolled back over a conflict is written again, not held."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg.errors
from sqlalchemy.exc import OperationalError

from bridge.worker.backlog import Backlog, Reply


@dataclass
class Asking:
    """A write whose maker waits for the answer, as a delivery checking its run is new."""

    key: str = "run-1"
    what: str = "the start of run-1"
    reply: Reply = field(default_factory=Reply)


def test_a_deadlock_is_retried_and_the_asker_gets_the_real_answer() -> None:
    attempts: list[int] = []

    def apply(batch: Sequence[Asking]) -> None:
        attempts.append(len(batch))
        if len(attempts) == 1:
            deadlock = psycopg.errors.DeadlockDetected("deadlock detected")
            raise OperationalError("UPDATE task_execution ...", None, deadlock)
        for write in batch:
            write.reply.give(True)

    backlog: Backlog[Asking] = Backlog(apply, retries=3)
    assert backlog.ask(Asking(), timeout=10) is True
    assert attempts == [1, 1]


def test_an_unreachable_database_answers_none_at_once() -> None:
    def apply(batch: Sequence[Asking]) -> None:
        raise OperationalError("SELECT 1", None, psycopg.OperationalError("connection refused"))

    backlog: Backlog[Asking] = Backlog(apply, retries=0)
    assert backlog.ask(Asking(), timeout=10) is None
