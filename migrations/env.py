"""Alembic environment of the bridge.

Run through :meth:`bridge.database.Database.migrate`, which hands over an
open connection inside a locked transaction; a plain ``alembic`` call with a
URL works too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from bridge.storage import mysql  # noqa: F401 - the forms of the schema on MySQL and MariaDB
from bridge.storage.models import Base

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite can only alter tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as fresh:
        _run(fresh)
