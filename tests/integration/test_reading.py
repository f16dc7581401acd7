"""Reads outside a transaction (:meth:`bridge.storage.database.Database.reading`) leave the
pooled connections as every writer expects them: a change that fails is rolled back."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from bridge import Bridge
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask
from tests.support import on_every_store

pytestmark = on_every_store


def change_failing_halfway(database: Database) -> None:
    with database.session() as session:
        session.execute(update(PeriodicTask).values(note="half done"))
        raise RuntimeError("the change fails after its first statement")


def test_a_failed_change_after_reads_on_the_same_connections_is_rolled_back(api: Bridge) -> None:
    api.add("kept", task="workers.app.quick", timer="every 1m")
    api.pause("kept", "as it was")
    database = api.database
    for _ in range(25):  # more than the pool keeps: each connection read on, then written on
        with database.reading() as session:
            assert session.scalar(select(PeriodicTask.note)) == "as it was"
        with pytest.raises(RuntimeError):
            change_failing_halfway(database)
    assert api.get("kept").note == "as it was"
    with database.session() as session:
        session.execute(update(PeriodicTask).values(note="changed"))
    with database.reading() as session:  # what another transaction committed, at once
        assert session.scalar(select(PeriodicTask.note)) == "changed"
