"""What a user installs works: the README's install line, in a clean environment.

The sdist is built, the wheel is built from the sdist, and the wheel is
installed into new virtual environments exactly as the README's install
line says (its extras, nothing of the test or development ones, no editable
install). There, with that environment's own ``celery`` and a small project
of the user's own (the README's "Your first schedule"), a real worker
and ``celery beat -S bridge`` run a schedule to ``SUCCESS``: on PostgreSQL
with Redis and with RabbitMQ, on the embedded default (SQLite and the
filesystem broker) with no extra at all, with every direct dependency at
its lowest allowed version on the oldest supported Python, and on the
newest supported Python. Those two test versions, not the install command:
uv installs them (:func:`tests.venvs.tool_venv`), pip the others.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support import (
    REPO,
    CeleryProcess,
    answers,
    free_port,
    postgres_database,
    rabbitmq_broker,
    redis_broker,
    rows,
    unavailable,
    wait_for,
)
from tests.venvs import tool_venv, user_venv

#: The first test of the module builds the wheel and the README's environment with pip: on
#: a loaded machine that alone can take minutes.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_install"), pytest.mark.timeout(600)]

#: The oldest and the newest Python the project supports (see README and pyproject's
#: classifiers).
OLDEST_PYTHON = "3.11"
NEWEST_PYTHON = "3.13"

#: The user's project: the README's app, configured from the environment of the test.
PROJECT = """\
import os

from celery import Celery

import bridge.folder_broker
import bridge.recorder

app = Celery("proj", broker=os.environ["PROJ_BROKER_URL"])
app.conf.bridge_database_url = os.environ["PROJ_DATABASE_URL"]
if app.conf.broker_url.startswith("filesystem://"):
    bridge.folder_broker.use(app, "broker")

bridge.recorder.install(app)


@app.task
def add(x, y):
    return x + y
"""


def readme_install_line() -> str:
    """The README's install line: ``pip install 'celery-periodic-bridge[...]'``."""
    found = re.search(r"^\$ (pip install '(celery-periodic-bridge[^']*)')$", readme(), re.M)
    assert found, "the README has no install line"
    return found.group(2)


def readme() -> str:
    return (REPO / "README.md").read_text()


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist, and the wheel built from it (``python -m build`` does both).

    Built once for the run's test processes, in the folder they share, under a lock: the
    modules' groups may start at once, and two builds in one tree clash on its egg-info.
    """
    run_folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_folder = run_folder.parent  # popen-gwN's parent: this run's, shared
    out = run_folder / "dist"
    with open(run_folder / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not any(out.glob("celery_periodic_bridge-*.whl")):
            subprocess.run(
                [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
                check=True,
                capture_output=True,
                timeout=600,
            )
    [sdist] = out.glob("celery_periodic_bridge-*.tar.gz")
    [wheel] = out.glob("celery_periodic_bridge-*.whl")
    return Dist(sdist, wheel)


def interpreter(version: str) -> str:
    """A Python ``version`` interpreter: on the PATH, or one pyenv built."""
    built = Path.home().glob(f".pyenv/versions/{version}*/bin/python{version}")
    for candidate in (f"python{version}", *sorted(str(path) for path in built)):
        try:
            subprocess.run([candidate, "--version"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        return candidate
    unavailable(f"Python {version}", f"no python{version} on the PATH or under ~/.pyenv")
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Venv:
    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def python(self, code: str) -> str:
        result = subprocess.run(
            [str(self.bin / "python"), "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env=clean_environ(self),
            timeout=120,
        )
        return result.stdout


def make_venv(where: Path, python: str, requirement: str, *pip_args: str) -> Venv:
    """A new virtual environment with ``pip install <requirement>``, as a user would run it."""
    user_venv(where, python, requirement, *pip_args)
    return Venv(where)


def with_extras(wheel: Path, line: str) -> str:
    """The README's requirement with the wheel in place of the name, extras kept."""
    return str(wheel) + line.removeprefix("celery-periodic-bridge")


def clean_environ(venv: Venv, **extra: str) -> dict[str, str]:
    """Nothing of the test run's environment: no PYTHONPATH, no BRIDGE_* or CELERY_*."""
    return {
        "PATH": f"{venv.bin}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(Path.home()),
        "LANG": "C.UTF-8",
        **extra,
    }


@pytest.fixture(scope="module")
def readme_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The README's install line, on the Python running the tests."""
    requirement = with_extras(dist.wheel, readme_install_line())
    return make_venv(tmp_path_factory.mktemp("venv") / "env", sys.executable, requirement)


@pytest.fixture(scope="module")
def bare_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """No extra at all: what the embedded default needs."""
    return make_venv(tmp_path_factory.mktemp("venv") / "env", sys.executable, str(dist.wheel))


#: The extras installed at their lower bounds: the README's, and Flower's.
LOWEST_EXTRAS = ("postgres", "redis", "web", "flower")


def lowest_constraints(where: Path) -> Path:
    """Every direct dependency of pyproject.toml pinned to its lower bound."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in LOWEST_EXTRAS:
        wanted += project["optional-dependencies"][extra]
    pins = []
    for requirement in wanted:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)", requirement)
        assert found, f"{requirement}: every dependency has a lower bound"
        pins.append(f"{found.group(1)}=={found.group(2)}")
    path = where / "lowest.txt"
    path.write_text("\n".join(pins) + "\n")
    return path


class Project:
    """The user's project folder, run with one virtual environment's ``celery``."""

    def __init__(self, venv: Venv, folder: Path, database_url: str, broker_url: str) -> None:
        self.venv = venv
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "proj.py").write_text(PROJECT)
        self.environ = clean_environ(
            venv, PROJ_DATABASE_URL=database_url, PROJ_BROKER_URL=broker_url
        )
        self.processes: list[CeleryProcess] = []

    def celery(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv.bin / "celery"), "-A", "proj", *args)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with the venv's Python in the project folder."""
        return self.run(str(self.venv.bin / "python"), "-c", code)

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in the project folder with its environment; it must succeed."""
        result = subprocess.run(
            command, cwd=self.folder, env=self.environ, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{shlex.join(command)}:\n{result.stdout}{result.stderr}"
        return result

    def start(self, name: str, *args: str) -> CeleryProcess:
        command = [str(self.venv.bin / "celery"), "-A", "proj", *args]
        process = CeleryProcess(name, command, self.folder, self.environ)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def history(self, name: str) -> list[dict[str, object]]:
        return list(json.loads(self.celery("bridge", "history", name, "--json").stdout))


def successes(database_url: str, run_id: str | None = None) -> int:
    """How many runs (of them, the one ``run_id``) have succeeded, read from the table."""
    query = "SELECT COUNT(*) FROM task_execution WHERE status = 'SUCCESS'"
    if run_id is None:
        return int(rows(database_url, query)[0][0])
    return int(rows(database_url, query + " AND id = :id", id=run_id)[0][0])


def runs_on(venv: Venv, folder: Path, database_url: str, broker_url: str) -> Project:
    """The README's steps in the user's project: migrate, add, worker, beat, runs SUCCESS."""
    project = Project(venv, folder, database_url, broker_url)
    try:
        assert ": migrated from nothing to " in project.celery("bridge", "migrate").stdout
        project.celery(
            "bridge", "add", "hello", "--task", "proj.add", "--timer", "every 2s",
            "--kwargs", '{"x": 1, "y": 2}',
        )  # fmt: skip
        worker = project.start("worker", "worker", "-l", "info", "-c", "1")
        worker.wait_log("ready", timeout=120)
        beat = project.start("beat", "beat", "-S", "bridge", "-l", "info")

        def succeeded() -> list[dict[str, object]]:
            return [r for r in project.history("hello") if r["status"] == "SUCCESS"]

        # The waits read the table (a celery process of the venv's costs a second or more
        # of CPU a look); what is then checked is what the user's command shows.
        wait_for(lambda: successes(database_url) >= 2, 90, what="two runs")
        done = succeeded()
        # An occurrence that passed while the worker started fires as a catch-up.
        assert len(done) >= 2 and all(r["result"] == "3" for r in done), done
        assert {r["trigger"] for r in done} <= {"scheduled", "catchup"}, done
        run_id = project.celery("bridge", "run", "hello").stdout.split()[-1]
        wait_for(lambda: successes(database_url, run_id) == 1, 60, what="the manual run")
        assert any(r["id"] == run_id for r in succeeded())
        logs = worker.log + beat.log
        assert "Traceback" not in logs and "ModuleNotFoundError" not in logs, logs[-3000:]
    except BaseException:
        for process in project.processes:
            print(f"===== {process.name} =====\n{process.log[-4000:]}")
        raise
    finally:
        project.stop()
    return project


def serves(project: Project) -> None:
    """``bridge serve`` answers over HTTP: the API, its page, /metrics, the dashboard."""
    port = free_port()
    server = project.start("serve", "bridge", "serve", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(f"{base}/readyz"), 60, what="the server")
        with urllib.request.urlopen(f"{base}/api/v1/schedules?limit=5") as response:
            page = json.load(response)
        assert [item["name"] for item in page["items"]] == ["hello"]
        with urllib.request.urlopen(f"{base}/metrics") as response:
            assert "bridge_schedule_info{" in response.read().decode()
        with urllib.request.urlopen(f"{base}/docs/static/swagger-ui-bundle.js") as response:
            assert response.status == 200
        # The dashboard's templates and files are in the wheel.
        with urllib.request.urlopen(f"{base}/schedules") as response:
            assert 'href="/schedules/hello"' in response.read().decode()
        with urllib.request.urlopen(f"{base}/static/bridge.js") as response:
            assert response.status == 200
        assert "Traceback" not in server.log, server.log[-3000:]
    except BaseException:
        print(f"===== serve =====\n{server.log[-4000:]}")
        raise
    finally:
        server.stop()


def test_the_readme_install_line_is_the_documented_one() -> None:
    """The README names the extras this test installs; each is one pyproject declares."""
    line = readme_install_line()
    extras = re.fullmatch(r"celery-periodic-bridge\[([a-z,]+)\]", line)
    assert extras, line
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for extra in extras.group(1).split(","):
        assert extra in declared["optional-dependencies"], extra


def test_postgresql_and_redis(readme_venv: Venv, tmp_path: Path) -> None:
    with postgres_database() as database_url:
        serves(runs_on(readme_venv, tmp_path / "proj", database_url, redis_broker()))


def test_postgresql_and_rabbitmq(readme_venv: Venv, tmp_path: Path) -> None:
    with postgres_database() as database_url, rabbitmq_broker() as broker_url:
        runs_on(readme_venv, tmp_path / "proj", database_url, broker_url)


def test_the_embedded_default_needs_no_extra(bare_venv: Venv, tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'proj' / 'bridge.db'}"
    project = runs_on(bare_venv, tmp_path / "proj", database_url, "filesystem://")
    command = [str(bare_venv.bin / "celery"), "-A", "proj", "bridge", "serve"]
    refused = subprocess.run(
        command, cwd=project.folder, env=project.environ, capture_output=True, text=True
    )
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "Error: bridge serve needs the web extra (No module named 'fastapi'): "
        "pip install 'celery-periodic-bridge[web]'"
    ]


def test_every_command_has_help(readme_venv: Venv, tmp_path: Path) -> None:
    """``celery -A proj bridge --help`` and each subcommand's, from the installed group."""
    project = Project(readme_venv, tmp_path / "proj", "sqlite:///bridge.db", "filesystem://")
    commands = readme_venv.python(
        "from bridge.manage.cli import COMMAND_MODULES\nprint(*COMMAND_MODULES)"
    ).split()
    assert {"add", "migrate", "run", "next", "history"} <= set(commands)
    listing = project.celery("bridge", "--help").stdout
    for command in commands:
        assert f"  {command} " in listing, command
    # Each command's help, through the same celery command line and its plugins, in one
    # process of the venv's rather than one each.
    helps = project.python(
        "from celery.bin.celery import celery\n"
        "from click.testing import CliRunner\n"
        f"for command in {commands!r}:\n"
        "    result = CliRunner().invoke(celery, ['-A', 'proj', 'bridge', command, '--help'])\n"
        "    print(command, result.exit_code, result.output.startswith('Usage: '))\n"
    ).stdout
    assert helps.splitlines() == [f"{command} 0 True" for command in commands]


def test_every_module_imports_with_only_what_its_extra_installs(
    readme_venv: Venv, bare_venv: Venv
) -> None:
    """No module of the package needs a test or development dependency.

    With the README's extras every module imports but the Django app's, which
    needs the ``django`` extra; with none, every module but those, the
    PostgreSQL change listener, which needs the ``postgres`` extra, and the
    HTTP side, which needs the ``web`` extra.
    """
    probe = (
        "import importlib, pkgutil, bridge\n"
        "for info in pkgutil.walk_packages(bridge.__path__, 'bridge.'):\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        print(info.name, exc.name)\n"
    )
    django_app = [
        f"bridge.contrib.django.{module} django"
        for module in ("admin", "apps", "conf", "models", "router")
    ]
    assert readme_venv.python(probe).splitlines() == django_app
    assert bare_venv.python(probe).splitlines() == [
        *django_app,
        "bridge.manage.web fastapi",
        "bridge.storage.listener psycopg",
    ]


# Needs only the wheel: beside the tests sharing the module's virtualenvs, not after them.
@pytest.mark.xdist_group("test_install_pythons")
def test_the_lowest_allowed_versions(dist: Dist, tmp_path: Path) -> None:
    """Every direct dependency at the lower bound pyproject.toml gives it, Flower's
    included, on the oldest supported Python whichever Python runs the tests."""
    readme_extras = re.fullmatch(r"celery-periodic-bridge\[([a-z,]+)\]", readme_install_line())
    assert readme_extras, readme_install_line()
    assert set(readme_extras.group(1).split(",")) <= set(LOWEST_EXTRAS)
    constraints = lowest_constraints(tmp_path)
    # The versions are the test's, not the install command: uv installs them.
    requirement = f"{dist.wheel}[{','.join(LOWEST_EXTRAS)}]"
    venv = Venv(tmp_path / "env")
    tool_venv(venv.path, interpreter(OLDEST_PYTHON), requirement, constraints=constraints)
    assert venv.python("import sys; print(sys.version)").startswith(f"{OLDEST_PYTHON}.")
    pins = dict(line.split("==") for line in constraints.read_text().split())
    names = [
        "celery", "kombu", "sqlalchemy", "alembic", "psycopg", "click", "flower",
        "fastapi", "uvicorn", "prometheus-client", "jinja2",
    ]  # fmt: skip
    installed = venv.python(
        f"from importlib.metadata import version\nprint(*(version(name) for name in {names!r}))"
    ).split()
    assert [Version(v) for v in installed] == [Version(pins[name]) for name in names]
    with postgres_database() as database_url:
        project = runs_on(venv, tmp_path / "proj", database_url, redis_broker())
        # Flower's command loads into that Celery.
        assert project.celery("flower", "--help").stdout.startswith("Usage: celery flower")
        serves(project)


# Needs only the wheel: beside the tests sharing the module's virtualenvs, not after them.
@pytest.mark.xdist_group("test_install_pythons")
def test_the_newest_supported_python(dist: Dist, tmp_path: Path) -> None:
    python = interpreter(NEWEST_PYTHON)
    # The README's packages on that Python (pip's install of them is the other tests').
    requirement = with_extras(dist.wheel, readme_install_line())
    venv = Venv(tmp_path / "env")
    tool_venv(venv.path, python, requirement)
    assert venv.python("import sys; print(sys.version)").startswith(NEWEST_PYTHON)
    with postgres_database() as database_url:
        runs_on(venv, tmp_path / "proj", database_url, redis_broker())


def test_the_sdist_holds_what_the_wheel_is_built_from(dist: Dist) -> None:
    """The wheel was built from the sdist; both carry every migration, the wheel no tests."""
    revisions = sorted(p.name for p in (REPO / "migrations" / "versions").glob("0*.py"))
    names = zipfile.ZipFile(dist.wheel).namelist()
    assert "bridge/migrations/env.py" in names
    assert "bridge/migrations/script.py.mako" in names
    assert [n for n in names if n.startswith("bridge/migrations/versions/0")] == [
        f"bridge/migrations/versions/{name}" for name in revisions
    ]
    assert not any(n.startswith(("tests/", "workers/", "bench/", "migrations/")) for n in names)
    with tarfile.open(dist.sdist) as sdist:
        members = sdist.getnames()
    for name in revisions:
        assert any(m.endswith(f"/migrations/versions/{name}") for m in members), name


#: A Django project as docs/django.md sets one up, on SQLite.
DJANGO_SETTINGS = """\
SECRET_KEY = "install-test"
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "site_proj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "site.db"}}
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "bridge.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASE_ROUTERS = ["bridge.contrib.django.router.BridgeRouter"]
CELERY_BROKER_URL = "memory://"
"""
DJANGO_CELERY = """\
import os

from celery import Celery

import bridge.recorder
from bridge.contrib.django.conf import database_url

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_proj.settings")

app = Celery("site_proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.bridge_database_url = database_url()
bridge.recorder.install(app)


@app.task(name="site_proj.ping")
def ping():
    return "pong"
"""
#: Signed in as a superuser, the admin adds a schedule through its form and lists it.
DJANGO_ADMIN = """\
import django
django.setup()
from django.contrib.auth.models import User
from django.test import Client
User.objects.create_superuser("admin", "a@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="admin"))
added = client.post("/admin/bridge/schedule/add/", {
    "name": "nightly", "task": "site_proj.ping", "timer": "every 1h", "timezone": "UTC",
    "args": "[]", "kwargs": "{}", "labels": "", "queue": "",
})
print(added.status_code, "nightly" in client.get("/admin/bridge/schedule/").content.decode())
"""


def test_the_django_install_line_gives_the_admin(dist: Dist, tmp_path: Path) -> None:
    """docs/django.md's install line, in a new virtualenv: a Django project set up as the
    page says migrates, and its admin adds a schedule that the bridge's CLI then lists."""
    found = re.search(
        r"^\$ pip install '(celery-periodic-bridge\[[^']*\])'$",
        (REPO / "docs" / "django.md").read_text(),
        re.M,
    )
    assert found, "docs/django.md has no install line"
    venv = make_venv(tmp_path / "env", sys.executable, with_extras(dist.wheel, found.group(1)))
    project = tmp_path / "proj"
    package = project / "site_proj"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from site_proj.celery import app\n")
    (package / "settings.py").write_text(DJANGO_SETTINGS)
    (package / "celery.py").write_text(DJANGO_CELERY)
    (package / "urls.py").write_text(
        "from django.contrib import admin\nfrom django.urls import path\n"
        'urlpatterns = [path("admin/", admin.site.urls)]\n'
    )
    environ = clean_environ(venv, DJANGO_SETTINGS_MODULE="site_proj.settings", PYTHONPATH=".")

    def run(*command: str) -> str:
        done = subprocess.run(
            command, cwd=project, env=environ, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run(str(venv.bin / "celery"), "-A", "site_proj", "bridge", "migrate")
    run(str(venv.bin / "python"), "-m", "django", "migrate", "--noinput")
    assert run(str(venv.bin / "python"), "-c", DJANGO_ADMIN).split() == ["302", "True"]
    listed = run(str(venv.bin / "celery"), "-A", "site_proj", "bridge", "ls", "--json")
    assert [schedule["name"] for schedule in json.loads(listed)] == ["nightly"]
