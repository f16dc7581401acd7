"""Databases already at the schema's head, for the tests that do not test migrating.

``migrate`` from nothing runs every revision: about a second and a half on
PostgreSQL and six on MariaDB, whose DDL is slow, for each of some five
hundred tests. Instead the schema is migrated once, by the bridge's own
``migrate``, into a template, and each test's new database is a copy of it:

- PostgreSQL copies the template database (``CREATE DATABASE ... TEMPLATE``);
- MariaDB replays the template's own ``SHOW CREATE TABLE`` and copies its rows;
- SQLite copies the template file.

The template is named for a digest of the migrations, so a change to them
makes a new one, and the test processes running side by side build it once
between them, under a lock of the server's. The tests of ``migrate`` itself,
of an upgrade and of a schema of another release start from an empty database
as before.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import shutil
import sqlite3
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import NullPool

from bridge.storage.database import database_for
from tests.support import MYSQL_ADMIN_URL, PG_ADMIN_URL, REPO


@functools.cache
def _digest() -> str:
    """Of every file that decides the schema: the revisions, and the storage package they
    and their runner import (the models' types, MySQL's forms of the DDL)."""
    files = sorted((REPO / "migrations").rglob("*.py"))
    files += sorted((REPO / "bridge" / "storage").rglob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def at_head(url: str) -> None:
    """Give the new, empty database of ``url`` the schema ``migrate`` makes, as a copy."""
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        _postgres_copy(url)
    elif backend == "mysql":
        _mysql_copy(url)
    else:
        _sqlite_copy(url)


def _admin(admin_url: str) -> Connection:
    return create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool).connect()


def _migrate(url: str) -> None:
    database = database_for(url)
    try:
        database.migrate()
    finally:
        database.dispose()


# --- PostgreSQL ----------------------------------------------------------------------------


@functools.cache
def _postgres_template() -> str:
    """The template's name, built first if no test process has built it yet.

    It is migrated under a name of its own and renamed when whole: a template
    half-built by a process killed meanwhile is never copied. Nothing stays
    connected to it, which a copy requires.
    """
    name = f"bridge_template_{_digest()}"
    with _admin(PG_ADMIN_URL) as admin:
        admin.execute(text("SELECT pg_advisory_lock(hashtext('bridge test template'))"))
        try:
            exists = admin.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).first()
            if exists is None:
                partial = f"{name}_partial"
                admin.execute(text(f'DROP DATABASE IF EXISTS "{partial}" WITH (FORCE)'))
                admin.execute(text(f'CREATE DATABASE "{partial}"'))
                _migrate(make_url(PG_ADMIN_URL).set(database=partial).render_as_string(False))
                admin.execute(text(f'ALTER DATABASE "{partial}" RENAME TO "{name}"'))
        finally:
            admin.execute(text("SELECT pg_advisory_unlock(hashtext('bridge test template'))"))
    return name


def _postgres_copy(url: str) -> None:
    """The empty database made again as a copy of the template (nothing is connected to
    a database a test has just made)."""
    name = make_url(url).database
    template = _postgres_template()
    with _admin(PG_ADMIN_URL) as admin:
        admin.execute(text(f'DROP DATABASE "{name}"'))
        admin.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))


# --- MariaDB / MySQL -----------------------------------------------------------------------


@functools.cache
def _mysql_template() -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The template's name, its ``CREATE TABLE`` statements, and for each table holding
    rows the list of its stored (not generated) columns."""
    name = f"bridge_template_{_digest()}"
    with _admin(MYSQL_ADMIN_URL) as admin:
        admin.execute(text("SELECT GET_LOCK('bridge test template', 600)"))
        try:
            # Whole once the revision is recorded: migrate writes it last.
            done = (
                admin.execute(
                    text(
                        "SELECT 1 FROM information_schema.tables"
                        " WHERE table_schema = :name AND table_name = 'alembic_version'"
                    ),
                    {"name": name},
                ).first()
                and admin.execute(text(f"SELECT 1 FROM `{name}`.alembic_version")).first()
            )
            if not done:
                admin.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
                admin.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET latin1"))
                _migrate(make_url(MYSQL_ADMIN_URL).set(database=name).render_as_string(False))
        finally:
            admin.execute(text("SELECT RELEASE_LOCK('bridge test template')"))
        tables = admin.execute(
            text(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = :name AND table_type = 'BASE TABLE' ORDER BY table_name"
            ),
            {"name": name},
        ).scalars().all()  # fmt: skip
        creates = tuple(
            admin.execute(text(f"SHOW CREATE TABLE `{name}`.`{table}`")).one()[1]
            for table in tables
        )
        filled = []
        for table in tables:
            if admin.execute(text(f"SELECT 1 FROM `{name}`.`{table}` LIMIT 1")).first():
                columns = admin.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_schema = :name AND table_name = :table"
                        " AND extra NOT LIKE '%GENERATED%' ORDER BY ordinal_position"
                    ),
                    {"name": name, "table": table},
                ).scalars().all()  # fmt: skip
                filled.append((table, ", ".join(f"`{column}`" for column in columns)))
    return name, creates, tuple(filled)


def _mysql_copy(url: str) -> None:
    name = make_url(url).database
    template, creates, filled = _mysql_template()
    with _admin(MYSQL_ADMIN_URL) as admin:
        admin.execute(text(f"USE `{name}`"))
        admin.execute(text("SET FOREIGN_KEY_CHECKS = 0"))
        for create in creates:
            admin.execute(text(create))
        for table, columns in filled:
            admin.execute(
                text(
                    f"INSERT INTO `{name}`.`{table}` ({columns})"
                    f" SELECT {columns} FROM `{template}`.`{table}`"
                )
            )


# --- SQLite --------------------------------------------------------------------------------


@functools.cache
def _sqlite_template() -> Path:
    """A file migrated once in this test process (a file is no work to share), removed
    when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix="bridge-template-"))
    atexit.register(shutil.rmtree, folder, True)
    _migrate(f"sqlite:///{folder / 'bridge.db'}")
    return folder / "bridge.db"


def _sqlite_copy(url: str) -> None:
    target = make_url(url).database
    assert target and not Path(target).exists(), f"{url}: not a new SQLite database"
    source, copy = sqlite3.connect(_sqlite_template()), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
