"""Which database errors are conflicts, worth sending the transaction again."""

from __future__ import annotations

import psycopg
import pymysql
import pytest
from sqlalchemy.exc import OperationalError

from bridge.storage.database import is_conflict


def wrapped(orig: BaseException) -> OperationalError:
    """The error SQLAlchemy raises for the driver's ``orig``."""
    return OperationalError("UPDATE periodic_task ...", {}, orig)


@pytest.mark.parametrize(
    ("orig", "conflict"),
    [
        (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"), True),
        (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), True),
        (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), False),
        (psycopg.errors.DeadlockDetected("deadlock detected"), True),
        (psycopg.errors.SerializationFailure("could not serialize access"), True),
        (psycopg.OperationalError("connection refused"), False),
    ],
)
def test_deadlocks_and_lock_timeouts_of_every_store_are_conflicts(
    orig: BaseException, conflict: bool
) -> None:
    assert is_conflict(wrapped(orig)) is conflict
