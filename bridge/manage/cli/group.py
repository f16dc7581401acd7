"""The groups of the commands: usage errors in one line, and the ``bridge`` group's commands
imported only when one of them is run or listed.

Celery imports the ``bridge`` group (its ``celery.commands`` entry point)
in every process its command line starts, beat's and each worker's too,
where no command of the group runs. This module imports click alone: the
commands, and :class:`bridge.Bridge` behind them, stay out of those
processes (some 4 MB of modules each).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click

#: What click 8.2 and later raise to show a group's help when it is given no command (a
#: usage error there); click 8.1, which the requirements allow, exits with the help.
_HELP_FOR_NO_ARGUMENTS: tuple[type[Exception], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


@contextmanager
def usage_in_one_line() -> Iterator[None]:
    """A usage error (unknown option or command, missing argument, bad value) as one
    ``Error:`` line and exit status 1, like every other failure of the commands.

    Only the help shown when no command is given stays as click prints it.
    """
    try:
        yield
    except _HELP_FOR_NO_ARGUMENTS:
        raise
    except click.MissingParameter as exc:
        raise click.ClickException(" ".join(exc.format_message().split())) from None
    except click.BadParameter as exc:
        # A value a typed option refused: "count: got 'lots', expected a whole number ...".
        name = exc.param.name if exc.param is not None and exc.param.name else "value"
        raise click.ClickException(f"{name}: {exc.message}") from None
    except click.UsageError as exc:
        raise click.ClickException(" ".join(exc.format_message().split())) from None


class OneLineGroup(click.Group):
    """The ``bridge`` group: its usage errors and its commands' read as one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with usage_in_one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with usage_in_one_line():
            return super().invoke(ctx)


class LazyGroup(OneLineGroup):
    """A group whose commands are imported from their modules when first asked for.

    ``modules`` names, for each command, the module (a sibling of this one)
    whose ``COMMANDS`` tuple holds it.
    """

    def __init__(self, *args: Any, modules: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules = dict(modules)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.modules)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # Not kept in ``self.commands``: a reader of that (mkdocs-click) would take the
        # commands loaded so far for all of them.
        module = self.modules.get(cmd_name)
        if module is None:
            return self.commands.get(cmd_name)
        commands: tuple[click.Command, ...] = importlib.import_module(
            f"{__package__}.{module}"
        ).COMMANDS
        return next(command for command in commands if command.name == cmd_name)
