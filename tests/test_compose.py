"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The compose stack cannot be started here, so these tests check what would
make it fail on someone else's machine: a service missing or misnamed, a
command the installed package does not provide, an environment variable the
app reads but the stack does not set, a start order that lets beat run before
the tables exist, or an image that lacks a directory its commands import.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.support import REPO

pytestmark = pytest.mark.xdist_group("test_compose")

COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
CELERY_APP = ["celery", "-A", "workers.app"]
INFRA_SERVICES = {"postgres", "redis"}
APP_SERVICES = ["migrate", "worker", "beat", "server", "flower"]
LONG_RUNNING = ["worker", "beat", "server", "flower"]
#: What workers/app.py and bridge.config read from the environment.
APP_ENV_VARS = ["BRIDGE_DATABASE_URL", "CELERY_BROKER_URL"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def argv(service: dict[str, Any]) -> list[str]:
    """A service's command as the argument list the container runs."""
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment, whether written as a mapping or a ``KEY=value`` list."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw)
    return {key: str(value) for key, value in raw.items()}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Each dependency with its condition (the short list form means ``service_started``)."""
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def test_exactly_the_expected_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == INFRA_SERVICES | set(APP_SERVICES)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_are_built_from_the_repository(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert services[name]["build"] in (".", {"context": "."})


@pytest.mark.parametrize("name", APP_SERVICES)
def test_commands_run_the_reference_app(services: dict[str, dict[str, Any]], name: str) -> None:
    assert argv(services[name])[:3] == CELERY_APP


@pytest.mark.parametrize("name", APP_SERVICES)
def test_commands_exist_in_the_installed_package(
    services: dict[str, dict[str, Any]], name: str, tmp_path: Path
) -> None:
    """Each command with ``--help`` appended exits 0; a misspelt subcommand or option does not.

    Run with the service's own environment, except for a local SQLite store in
    place of the compose-network PostgreSQL host, so that the broker transport
    the stack names must be importable too.
    """
    env = {**os.environ, **environment(services[name])}
    env["BRIDGE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'bridge.db'}"
    env["BRIDGE_BROKER_DIR"] = str(tmp_path / "broker")
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "celery", "-A", "workers.app", *argv(services[name])[3:]]
    result = subprocess.run(
        [*command, "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_migrate_runs_the_bridge_migration(services: dict[str, dict[str, Any]]) -> None:
    assert argv(services["migrate"])[3:] == ["bridge", "migrate"]


def test_bridge_is_a_scheduler_alias_and_a_celery_command(
    services: dict[str, dict[str, Any]],
) -> None:
    """``beat -S bridge`` only works while the package registers that alias."""
    from importlib.metadata import entry_points

    from celery.beat import Scheduler
    from celery.utils.imports import load_extension_class_names, symbol_by_name

    beat = argv(services["beat"])
    assert beat[3] == "beat"
    assert beat[beat.index("-S") + 1] == "bridge"

    schedulers = dict(load_extension_class_names("celery.beat_schedulers"))
    assert schedulers.get("bridge") == "bridge.scheduler:DatabaseScheduler"
    assert issubclass(symbol_by_name(schedulers["bridge"]), Scheduler)

    commands = {ep.name: ep.value for ep in entry_points(group="celery.commands")}
    assert commands.get("bridge") == "bridge.manage.cli:bridge"
    assert "flower" in commands


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_environment_is_set(services: dict[str, dict[str, Any]], name: str) -> None:
    env = environment(services[name])
    for variable in APP_ENV_VARS:
        assert env.get(variable), f"{name} does not set {variable}"


def test_app_environment_points_at_the_compose_services(
    services: dict[str, dict[str, Any]],
) -> None:
    """The URLs name the compose hosts and the credentials the postgres service creates."""
    postgres = environment(services["postgres"])
    for name in APP_SERVICES:
        env = environment(services[name])
        database = urlsplit(env["BRIDGE_DATABASE_URL"])
        assert database.scheme == "postgresql+psycopg"
        assert database.hostname == "postgres"
        assert database.username == postgres.get("POSTGRES_USER", "postgres")
        assert database.password == postgres["POSTGRES_PASSWORD"]
        assert database.path.lstrip("/") == postgres.get("POSTGRES_DB", database.username)
        broker = urlsplit(env["CELERY_BROKER_URL"])
        assert broker.scheme == "redis"
        assert broker.hostname == "redis"


def test_start_order(services: dict[str, dict[str, Any]]) -> None:
    """Tables first, once; then the processes that use them, once the broker answers."""
    for name in INFRA_SERVICES:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert "pg_isready" in str(services["postgres"]["healthcheck"]["test"])
    assert depends_on(services["migrate"]) == {"postgres": "service_healthy"}
    assert services["migrate"].get("restart") == "no"
    for name in LONG_RUNNING:
        needs = depends_on(services[name])
        assert needs.get("migrate") == "service_completed_successfully", name
        assert needs.get("redis") == "service_healthy", name


def test_flower_port_is_published(services: dict[str, dict[str, Any]]) -> None:
    flower = services["flower"]
    port = next(arg.split("=", 1)[1] for arg in argv(flower) if arg.startswith("--port="))
    published = [str(mapping) for mapping in flower.get("ports", [])]
    assert f"{port}:{port}" in published


def test_the_server_listens_published_and_needs_a_token(
    services: dict[str, dict[str, Any]],
) -> None:
    """Beyond loopback the server refuses to start without a token: compose demands one."""
    server = services["server"]
    command = argv(server)
    assert command[3:5] == ["bridge", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert f"{port}:{port}" in [str(mapping) for mapping in server.get("ports", [])]
    token = environment(server)["BRIDGE_API_ADMIN_TOKEN"]
    assert token.startswith("${BRIDGE_API_ADMIN_TOKEN:?"), "a default token would be public"
    assert f"127.0.0.1:{port}/readyz" in " ".join(server["healthcheck"]["test"])


def test_beat_is_probed_with_bridge_health(services: dict[str, dict[str, Any]]) -> None:
    assert services["beat"]["healthcheck"]["test"][1:] == [*CELERY_APP, "bridge", "health"]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_base_image_and_user() -> None:
    instructions = dockerfile_instructions()
    assert ("FROM", "python:3.11-slim") in instructions
    assert ("WORKDIR", "/app") in instructions
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users, "the image runs as root"
    assert users[-1] not in {"root", "0"}


def test_dockerfile_copies_what_the_commands_need() -> None:
    """The package, its migrations, the app named by ``-A`` and the build metadata."""
    copied: set[str] = set()
    for keyword, args in dockerfile_instructions():
        if keyword == "COPY":
            parts = [part for part in shlex.split(args) if not part.startswith("--")]
            copied.update(source.rstrip("/") for source in parts[:-1])
    app_package = CELERY_APP[2].split(".")[0]
    assert {"bridge", "migrations", app_package, "pyproject.toml", "README.md"} <= copied


def test_dockerfile_leaves_no_source_package_to_shadow_the_installed_one() -> None:
    """The installed ``bridge`` carries ``bridge.migrations``; the source folder does not.

    A ``bridge/`` folder left in the working directory (which celery puts on
    ``sys.path``) would be imported instead, and ``bridge migrate`` would fail.
    """
    workdir = "/"
    copied_into = None
    for keyword, args in dockerfile_instructions():
        if keyword == "WORKDIR":
            workdir = args
        elif keyword == "COPY" and re.search(r"(^|\s)bridge/?(\s|$)", args):
            copied_into = workdir
    assert copied_into is not None
    assert copied_into != workdir, "bridge/ is copied into the final working directory"
    removals = [args for keyword, args in dockerfile_instructions() if keyword == "RUN"]
    assert any(f"rm -rf {copied_into}" in args for args in removals)


def test_dockerfile_installs_the_extras_the_stack_uses() -> None:
    """postgres for psycopg, redis for the broker, web for the server, flower for the UI:
    all real extras."""
    installs = " ".join(
        args for keyword, args in dockerfile_instructions() if keyword == "RUN" and "pip" in args
    )
    match = re.search(r"\.\[([a-z,]+)\]", installs)
    assert match, "the Dockerfile does not pip install the package with extras"
    extras = set(match.group(1).split(","))
    assert extras == {"postgres", "redis", "web", "flower"}
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert extras <= set(declared["optional-dependencies"])


def test_readme_mentions_compose() -> None:
    readme = REPO / "README.md"
    if not readme.exists():
        pytest.skip("README.md does not exist yet")
    assert "docker compose up" in readme.read_text()
