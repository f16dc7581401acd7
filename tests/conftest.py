"""Fixtures: a real database per test (SQLite file, fresh PostgreSQL or MariaDB database),
the real Redis broker, and real Celery processes that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import Bridge
from bridge.storage.database import database_for

from .stores import at_head
from .support import (
    Env,
    describe,
    mysql_database,
    postgres_database,
    rabbitmq_broker,
    redis_broker,
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'bridge.db'}"


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    with mysql_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using it runs once on SQLite and once on PostgreSQL; and on MariaDB too when
    it is marked :data:`tests.support.on_every_store`."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'bridge.db'}"
    elif request.param == "mariadb":
        with mysql_database() as url:
            yield url
    else:
        with postgres_database() as url:
            yield url


@pytest.fixture
def migrated(db_url: str) -> Iterator[str]:
    """The test's database at the schema's head (a copy of one ``migrate`` made)."""
    at_head(db_url)
    yield db_url
    database_for(db_url).dispose()


@pytest.fixture
def api(migrated: str) -> Bridge:
    from workers.app import app

    return Bridge(app, database_url=migrated)


@pytest.fixture
def redis_url() -> str:
    return redis_broker()


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """A RabbitMQ virtual host of the test's own."""
    with rabbitmq_broker() as url:
        yield url


def _env(tmp_path: Path, database_url: str, broker_url: str | None) -> Iterator[Env]:
    env = Env(tmp_path, database_url, broker_url)
    at_head(database_url)
    # Through the CLI as a user runs it: nothing left to do, and it says so.
    assert "already at" in env.cli("migrate").stdout
    try:
        yield env
    finally:
        env.kill_all()
        database_for(database_url).dispose()


@pytest.fixture
def pg_env(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Env]:
    """PostgreSQL + Redis, migrated through the CLI; processes stopped afterwards."""
    yield from _env(tmp_path, pg_url, redis_url)


@pytest.fixture
def pg_rabbitmq_env(tmp_path: Path, pg_url: str, amqp_url: str) -> Iterator[Env]:
    """PostgreSQL + RabbitMQ, migrated through the CLI; processes stopped afterwards."""
    yield from _env(tmp_path, pg_url, amqp_url)


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_env(request: pytest.FixtureRequest) -> Env:
    """PostgreSQL with each production broker in turn: Redis, then RabbitMQ."""
    env: Env = request.getfixturevalue("pg_env" if request.param == "redis" else "pg_rabbitmq_env")
    return env


@pytest.fixture
def mariadb_env(tmp_path: Path, mariadb_url: str, redis_url: str) -> Iterator[Env]:
    """MariaDB + Redis, migrated through the CLI; processes stopped afterwards."""
    yield from _env(tmp_path, mariadb_url, redis_url)


@pytest.fixture(params=["pg_env", "mariadb_env"])
def server_env(request: pytest.FixtureRequest) -> Env:
    """A database server with Redis: PostgreSQL, then MariaDB."""
    env: Env = request.getfixturevalue(request.param)
    return env


@pytest.fixture
def embedded_env(tmp_path: Path, sqlite_url: str) -> Iterator[Env]:
    """The quick-start default: SQLite and the filesystem broker."""
    yield from _env(tmp_path, sqlite_url, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the Celery process logs to a failing test's report."""
    report = yield
    # Whichever fixture gave the test its processes (pg_env, a file's own env, ...).
    funcargs = getattr(item, "funcargs", {})
    env = next((value for value in funcargs.values() if isinstance(value, Env)), None)
    if report.failed and isinstance(env, Env):
        report.sections.append(("celery process logs", describe(env)))
    return report
