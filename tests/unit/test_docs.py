"""The commands the docs show are real: each one parses as the CLI would parse it.

Every ```console block of README.md and docs/*.md is read. A command line
(``$ ...``, with its ``\\`` continuation lines joined) that runs ``celery`` is
split as a shell would split it, then given to click's own parser: Celery's
global options, then the subcommand. For ``celery ... bridge SUB ...`` the
subcommand must be one of :data:`bridge.manage.cli.bridge`'s, and its options and
arguments must parse; for ``celery ... beat`` and ``celery ... worker`` the
options must be Celery's. Nothing is invoked and no service is needed.

The README's ``bridge --help`` listing is also compared with the real one.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_group
from click.testing import CliRunner

from bridge.manage.cli import bridge

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

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
        if not rest or rest == ["--help"]:
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
    for doc in ("README.md", "docs/operations.md", "docs/policies.md"):
        assert any(command.where.startswith(f"{doc}:") for command in shown), doc


def test_the_readme_shows_every_bridge_subcommand() -> None:
    shown = {
        words[0]
        for command in CELERY_COMMANDS
        if command.where.startswith("README.md:") and (words := bridge_words(command))
    }
    assert sorted(set(bridge.commands) - shown) == []


@pytest.mark.parametrize("command", CELERY_COMMANDS, ids=[c.where for c in CELERY_COMMANDS])
def test_a_documented_command_parses(command: Command) -> None:
    args = celery_args(command)
    assert args is not None
    try:
        check_parses(args)
    except click.UsageError as exc:
        pytest.fail(f"{command.where}: {command.text}\n  {exc.format_message()}", pytrace=False)


def test_the_readme_help_listing_is_the_real_one() -> None:
    shown = next(c for c in CELERY_COMMANDS if (celery_args(c) or [])[-2:] == ["bridge", "--help"])
    result = CliRunner().invoke(bridge, ["--help"], prog_name="celery bridge", terminal_width=80)
    assert result.exit_code == 0
    assert "\n".join(shown.output).strip() == result.output.strip()
