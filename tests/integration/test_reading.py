"""Reads outside a transaction (:meth:`bridge.storage.database.Database.reading`) leave the
pooled connections as every writer expects them (a change that fails is rolled back),
connections the server dropped are replaced before they are used, and reads made together
share one connection."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text, update

from bridge import Bridge
from bridge.storage.database import Database
from bridge.storage.models import PeriodicTask
from tests.support import on_every_store


def change_failing_halfway(database: Database) -> None:
    with database.session() as session:
        session.execute(update(PeriodicTask).values(note="half done"))
        raise RuntimeError("the change fails after its first statement")


@on_every_store
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


@pytest.mark.parametrize("db_url", ["postgres", "mariadb"], indirect=True)
def test_connections_the_server_dropped_are_replaced_before_use(api: Bridge) -> None:
    """A pooled connection is tested before use, so connections a server restart, an
    operator or an idle timeout dropped fail no read or change."""
    api.add("kept", task="workers.app.quick", timer="every 1m")
    database = api.database
    engine = database.engine
    held = [engine.connect() for _ in range(3)]  # the pool keeps three connections
    backend = "pg_backend_pid()" if database.is_postgres else "CONNECTION_ID()"
    ids = [connection.exec_driver_sql(f"SELECT {backend}").scalar() for connection in held]
    for connection in held:
        connection.close()
    outside = Database(database.url, pre_ping=False)
    try:
        with outside.engine.connect() as killer:
            for backend_id in ids:
                if database.is_postgres:
                    killer.execute(text("SELECT pg_terminate_backend(:id)"), {"id": backend_id})
                else:
                    killer.exec_driver_sql(f"KILL {int(backend_id)}")
    finally:
        outside.dispose()
    for _ in range(3):  # each dropped connection, tested and replaced
        with database.reading() as session:
            assert session.scalar(select(PeriodicTask.name)) == "kept"
        with database.session() as session:
            session.execute(update(PeriodicTask).values(note="written"))
    assert api.get("kept").note == "written"


@on_every_store
def test_reads_made_together_share_a_session_and_changes_keep_their_own(api: Bridge) -> None:
    api.add("kept", task="workers.app.quick", timer="every 1m")
    database = api.database
    with database.reading_together():
        with database.reading() as first, database.reading() as second:
            assert first is second
        assert api.get("kept").note is None
        with pytest.raises(RuntimeError):
            change_failing_halfway(database)  # rolled back on a connection of its own
        api.pause("kept", "paused inside")  # committed on a connection of its own
        with database.reading() as third:
            assert third is first
            assert third.scalar(select(PeriodicTask.note)) == "paused inside"
    with database.reading() as after:
        assert after is not first
    assert api.get("kept").note == "paused inside"
