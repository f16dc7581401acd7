"""Reads outside a transaction (:meth:`bridge.storage.database.Database.reading`) leave the
pooled connections as every writer expects them: a change that fails is rolled back; and
connections the server dropped are replaced before they are used."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select, text, update

from bridge import Bridge
from bridge.storage.database import PING_AFTER_IDLE, Database
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
    """A pooled connection idle for a while is tested before use (one given back a moment
    ago is not: :data:`bridge.storage.database.PING_AFTER_IDLE`), so connections a server
    restart or an idle timeout dropped fail no read."""
    api.add("kept", task="workers.app.quick", timer="every 1m")
    database = api.database
    engine = database.engine
    held = [engine.connect() for _ in range(3)]  # the pool keeps three connections
    backend = "pg_backend_pid()" if database.is_postgres else "CONNECTION_ID()"
    ids = [connection.exec_driver_sql(f"SELECT {backend}").scalar() for connection in held]
    for connection in held:
        connection.close()
    with Database(database.url, pre_ping=False).engine.connect() as killer:
        for backend_id in ids:
            if database.is_postgres:
                killer.execute(text("SELECT pg_terminate_backend(:id)"), {"id": backend_id})
            else:
                killer.exec_driver_sql(f"KILL {int(backend_id)}")
    time.sleep(PING_AFTER_IDLE + 0.2)
    for _ in range(3):  # each dropped connection, tested and replaced
        with database.reading() as session:
            assert session.scalar(select(PeriodicTask.name)) == "kept"
        with database.session() as session:
            session.execute(update(PeriodicTask).values(note="written"))
    assert api.get("kept").note == "written"
