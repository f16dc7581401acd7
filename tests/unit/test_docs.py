"""The commands the docs show are real: each one parses as the CLI would parse it.

Every ```console block of README.md and of the site's pages (docs/, at any
depth) is read. A command line (``$ ...``, with its ``\\`` continuation lines
joined) that runs ``celery`` is split as a shell would split it, then given to
click's own parser: Celery's global options, then the subcommand. For
``celery ... bridge SUB ...`` the subcommand must be one of
:data:`bridge.manage.cli.bridge`'s, and its options and arguments must parse; for
``celery ... beat`` and ``celery ... worker`` the options must be Celery's. A
``make`` line must name targets of the Makefile, an ``mkdocs`` line must parse as
MkDocs' own command line, a ``pip install`` must name extras the package declares,
a ``BRIDGE_*`` variable a command sets must be a setting, and a ``curl`` line must
ask for an operation of ``bridge serve``'s app (from its OpenAPI document), with
query parameters it reads. Nothing is invoked and no service is needed.

The command line guide's ``bridge --help`` listing is also compared with the real
one, and the configuration page's table of settings with :class:`bridge.Settings`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import click
import pytest
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_group
from click.testing import CliRunner
from mkdocs.__main__ import cli as mkdocs_cli

from bridge.config import Settings
from bridge.manage.cli import COMMAND_MODULES, bridge

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
#: The page of the site that shows every ``bridge`` command with what it prints.
CLI_GUIDE = "docs/cli.md"
#: The page of the site with the table of every setting.
CONFIGURATION = ROOT / "docs" / "configuration.md"

#: Shell words that end the command (what follows is another command).
SHELL_SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})
#: Shell redirections: each takes the next word (a file), which is not an argument.
REDIRECTIONS = frozenset({">", ">>", "<", "2>", "2>>", "&>"})


@dataclass(frozen=True)
class Command:
    """One command line of a console block, and the lines it is shown to print."""

    where: str
    text: str
    output: tuple[str, ...]

    def words(self) -> list[str]:
        """The command's words as a shell would pass them, without comments or redirections."""
        words: list[str] = []
        tokens = iter(shlex.split(self.text, comments=True))
        for token in tokens:
            if token in SHELL_SEPARATORS:
                break
            if token in REDIRECTIONS:
                next(tokens, None)
            elif not token.startswith((">", "<")):
                words.append(token)
        return words


def console_commands(path: Path) -> list[Command]:
    """The command lines of every ```console block of ``path``, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    commands: list[Command] = []
    in_block = False
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not in_block:
            in_block = line == "```console"
        elif line.startswith("```"):
            in_block = False
        elif line.startswith("$ "):
            where = f"{path.relative_to(ROOT)}:{index}"
            text = line[2:]
            while text.endswith("\\") and index < len(lines):
                text = text[:-1].rstrip() + " " + lines[index].strip()
                index += 1
            output: list[str] = []
            while index < len(lines) and not lines[index].strip().startswith(("$ ", "```")):
                output.append(lines[index].rstrip())
                index += 1
            commands.append(Command(where, text, tuple(output)))
    return commands


def celery_args(command: Command) -> list[str] | None:
    """What follows the word ``celery`` (also after ``docker compose run ...``), or None."""
    words = command.words()
    for position, word in enumerate(words):
        if word == "celery" or word.endswith("/celery"):
            return words[position + 1 :]
    return None


COMMANDS = [command for path in DOCS for command in console_commands(path)]
CELERY_COMMANDS = [command for command in COMMANDS if celery_args(command) is not None]

#: Celery's global options (``-A``, ``-b``, ...), parsed up to the subcommand's name.
GLOBAL_OPTIONS = click.Command(
    "celery",
    params=celery_group.params,
    context_settings={"allow_extra_args": True, "allow_interspersed_args": False},
)


def parse_only(command: click.Command) -> click.Command:
    """``command`` with its file parameters read as plain names, so parsing opens no file."""
    clone = copy.copy(command)
    clone.params = [copy.copy(param) for param in command.params]
    for param in clone.params:
        if isinstance(param.type, click.File):
            param.type = click.STRING
    return clone


def subcommand_of(group: click.Group, ctx: click.Context, name: str) -> click.Command:
    command = group.get_command(ctx, name)
    if command is None:
        raise click.UsageError(f"{group.name} has no subcommand {name!r}")
    return command


def check_parses(args: list[str]) -> None:
    """Parse ``args`` (what follows ``celery``) as Celery and the bridge would; fail if refused."""
    celery_ctx = GLOBAL_OPTIONS.make_context("celery", list(args), resilient_parsing=False)
    if not celery_ctx.args:
        raise click.UsageError("no celery subcommand")
    name, *rest = celery_ctx.args
    if name == "bridge":
        if not rest or rest in (["--help"], ["--version"]):
            return
        group_ctx = click.Context(bridge, parent=celery_ctx, info_name="bridge")
        sub, *sub_args = rest
        command = subcommand_of(bridge, group_ctx, sub)
        if "--help" in sub_args:
            return
        parse_only(command).make_context(
            sub, sub_args, parent=group_ctx, resilient_parsing=False
        ).close()
        return
    command = subcommand_of(celery_group, celery_ctx, name)
    app = Celery("docs", set_as_current=False)
    command.make_context(
        name,
        rest,
        parent=celery_ctx,
        obj=CLIContext(app=app, no_color=True, workdir=None),
        resilient_parsing=False,
    ).close()


def bridge_words(command: Command) -> list[str] | None:
    """What follows ``bridge`` in a ``celery ... bridge ...`` line, or None."""
    args = celery_args(command) or []
    return args[args.index("bridge") + 1 :] if "bridge" in args else None


def test_the_docs_show_bridge_commands() -> None:
    """The parser finds the commands: docs without them would pass the check vacuously."""
    shown = [command for command in CELERY_COMMANDS if bridge_words(command) is not None]
    assert len(shown) >= 60
    for doc in ("README.md", CLI_GUIDE, "docs/operations.md", "docs/policies.md"):
        assert any(command.where.startswith(f"{doc}:") for command in shown), doc


def test_the_cli_guide_shows_every_bridge_subcommand() -> None:
    shown = {
        words[0]
        for command in CELERY_COMMANDS
        if command.where.startswith(f"{CLI_GUIDE}:") and (words := bridge_words(command))
    }
    assert sorted(set(COMMAND_MODULES) - shown) == []


@pytest.mark.parametrize("command", CELERY_COMMANDS, ids=[c.where for c in CELERY_COMMANDS])
def test_a_documented_command_parses(command: Command) -> None:
    args = celery_args(command)
    assert args is not None
    try:
        check_parses(args)
    except click.UsageError as exc:
        pytest.fail(f"{command.where}: {command.text}\n  {exc.format_message()}", pytrace=False)


def test_the_cli_guide_help_listing_is_the_real_one() -> None:
    shown = next(
        c
        for c in CELERY_COMMANDS
        if c.where.startswith(f"{CLI_GUIDE}:")
        and (celery_args(c) or [])[-2:] == ["bridge", "--help"]
    )
    result = CliRunner().invoke(bridge, ["--help"], prog_name="celery bridge", terminal_width=80)
    assert result.exit_code == 0
    assert "\n".join(shown.output).strip() == result.output.strip()


def program_args(command: Command, program: str) -> list[str] | None:
    """What follows ``program`` (by name, or a path ending in it) when the line runs it."""
    words = command.words()
    if words and (words[0] == program or words[0].endswith(f"/{program}")):
        return words[1:]
    return None


def make_targets() -> set[str]:
    """The targets the Makefile declares."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w.-]*):(?!=)", text, re.M))


MAKE_COMMANDS = [c for c in COMMANDS if program_args(c, "make") is not None]
MKDOCS_COMMANDS = [c for c in COMMANDS if program_args(c, "mkdocs") is not None]


def test_the_docs_show_make_and_mkdocs_commands() -> None:
    assert any(c.where.startswith("README.md:") for c in MAKE_COMMANDS)
    assert any(c.where.startswith("README.md:") for c in MKDOCS_COMMANDS)


@pytest.mark.parametrize("command", MAKE_COMMANDS, ids=[c.where for c in MAKE_COMMANDS])
def test_a_documented_make_command_names_a_target(command: Command) -> None:
    args = program_args(command, "make") or []
    targets = [word for word in args if "=" not in word and not word.startswith("-")]
    assert targets, f"{command.where}: {command.text}"
    assert set(targets) <= make_targets(), f"{command.where}: {command.text}"


@pytest.mark.parametrize("command", MKDOCS_COMMANDS, ids=[c.where for c in MKDOCS_COMMANDS])
def test_a_documented_mkdocs_command_parses(command: Command) -> None:
    args = program_args(command, "mkdocs") or []
    try:
        name, *rest = args
        sub = subcommand_of(mkdocs_cli, mkdocs_cli.make_context("mkdocs", list(args)), name)
        sub.make_context(name, rest, resilient_parsing=False).close()
    except (click.UsageError, ValueError) as exc:
        pytest.fail(f"{command.where}: {command.text}\n  {exc}", pytrace=False)


def settings_table() -> dict[str, list[str]]:
    """The configuration page's settings: each row's cells, by setting, code marks removed."""
    rows: dict[str, list[str]] = {}
    for line in CONFIGURATION.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `bridge_"):
            rows[cells[0]] = cells[1:]
    return rows


def test_the_settings_table_is_the_settings() -> None:
    """Every field of :class:`bridge.Settings`, and only those, with its variable and default."""
    table = settings_table()
    fields = {f"bridge_{field.name}": field for field in dataclasses.fields(Settings)}
    assert sorted(table) == sorted(fields)
    for key, field in fields.items():
        environment, default, meaning = table[key]
        assert environment == key.upper(), key
        assert meaning, key
        if field.default == "":
            assert default == "none", key
        elif isinstance(field.default, bool):
            assert default.lower() == str(field.default).lower(), key
        elif isinstance(field.default, int | float):
            assert float(default) == field.default, key
        else:
            assert default == field.default, key


PIP_COMMANDS = [c for c in COMMANDS if program_args(c, "pip") is not None]


@pytest.mark.parametrize("command", PIP_COMMANDS, ids=[c.where for c in PIP_COMMANDS])
def test_a_documented_pip_install_names_declared_extras(command: Command) -> None:
    """``pip install`` of this package, by name or from the checkout, with extras it declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    args = program_args(command, "pip") or []
    assert args[0] == "install", command.where
    [requirement] = [word for word in args[1:] if not word.startswith("-")]
    found = re.fullmatch(r"(celery-periodic-bridge|\.)\[([a-z,]+)\]", requirement)
    assert found, f"{command.where}: {requirement}"
    assert set(found.group(2).split(",")) <= set(project["optional-dependencies"]), command.where


#: ``BRIDGE_NAME=`` where a command sets a variable, as ``export`` or as its prefix.
SETS_VARIABLE = re.compile(r"(?:^|\s)(BRIDGE_[A-Z_]+)=")


def test_a_variable_the_docs_set_is_a_setting() -> None:
    """A ``BRIDGE_*`` variable a command sets is one the settings read, spelled right."""
    settings = {f"BRIDGE_{field.name.upper()}" for field in dataclasses.fields(Settings)}
    for command in COMMANDS:
        for variable in SETS_VARIABLE.findall(command.text):
            assert variable in settings, f"{command.where}: {variable}"


CURL_COMMANDS = [c for c in COMMANDS if program_args(c, "curl") is not None]


@functools.cache
def http_operations() -> dict[tuple[str, str], set[str]]:
    """``bridge serve``'s operations, as (method, path template): their query parameters."""
    from bridge import Bridge
    from bridge.manage.web.app import create_app

    spec = create_app(bridge=Bridge(database_url="sqlite://")).openapi()
    return {
        (method.upper(), path): {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }


@pytest.mark.parametrize("command", CURL_COMMANDS, ids=[c.where for c in CURL_COMMANDS])
def test_a_documented_request_is_an_endpoint_of_the_server(command: Command) -> None:
    """A ``curl`` line asks for an operation the server has, with query parameters it reads."""
    args = program_args(command, "curl") or []
    method = args[args.index("-X") + 1] if "-X" in args else "POST" if "-d" in args else "GET"
    [url] = [word for word in args if word.startswith(("localhost:", "http://", "https://"))]
    parts = urlsplit(url if "://" in url else f"http://{url}")
    matching = [
        query
        for (verb, template), query in http_operations().items()
        if verb == method and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), parts.path)
    ]
    assert matching, f"{command.where}: no {method} {parts.path}"
    assert set(parse_qs(parts.query)) <= matching[0], f"{command.where}: {parts.query}"
