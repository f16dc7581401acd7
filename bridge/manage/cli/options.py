"""Options several commands share: a schedule's definition and policies (``add``,
``edit``), and ``--json``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import Any

import click

from bridge.errors import ValidationError
from bridge.manage.cli.command import F
from bridge.manage.fields import DEFINITION_HELP, POLICY_HELP
from bridge.rules.policy import POLICY_NAMES

#: ``--json`` of the commands that read: their output as ISO-8601 UTC JSON.
json_option = click.option("--json", "as_json", is_flag=True, help="ISO-8601 UTC JSON output.")


def collected(into: str, names: Collection[str]) -> Callable[[F], F]:
    """Hand the options ``names`` to the command as one dict argument ``into``.

    Options not given are left out, so that ``add`` and ``edit`` pass the dict
    straight on to the API: its defaults (add) or the stored values (edit)
    stand for what the user did not type.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            kwargs[into] = {name: value for name, value in given.items() if value is not None}
            return command(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def with_options(options: Sequence[Callable[[F], F]], command: F) -> F:
    """Apply click options so that ``--help`` lists them in the order given."""
    for option in reversed(options):
        command = option(command)
    return command


DEFINITION_OPTIONS = [
    click.option("--task", help=DEFINITION_HELP["task"]),
    click.option("--timer", help=DEFINITION_HELP["timer"]),
    click.option("--args", metavar="JSON", help=DEFINITION_HELP["args"]),
    click.option("--kwargs", metavar="JSON", help=DEFINITION_HELP["kwargs"]),
    click.option("--timezone", help=DEFINITION_HELP["timezone"]),
    click.option("--queue", help=DEFINITION_HELP["queue"]),
    click.option(
        "--labels",
        metavar="A,B",
        help=DEFINITION_HELP["labels"] + " edit replaces them; '' removes them.",
    ),
    click.option("--options", metavar="JSON", help=DEFINITION_HELP["options"]),
    click.option(
        "--signature-file",
        "signature",
        metavar="FILE.json",
        help=DEFINITION_HELP["signature"] + " Read from FILE ('-': standard input); edit "
        "replaces it.",
    ),
    click.option(
        "--allow-unknown-task",
        is_flag=True,
        help=DEFINITION_HELP["allow_unknown_task"] + " (Only the workers import it.)",
    ),
]


def read_signature(definition: dict[str, Any]) -> dict[str, Any]:
    """``definition`` with the file ``--signature-file`` names read (``-``: standard input;
    ``none`` clears the canvas), as the command runs rather than as its options parse."""
    path = definition.get("signature")
    if path is None or path == "none":
        return definition
    try:
        with click.open_file(path, encoding="utf-8") as file:
            return {**definition, "signature": str(file.read())}
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ValidationError(
            "signature-file", path, f"a readable UTF-8 file of Celery's signature JSON ({reason})"
        ) from None


def definition_options(command: F) -> F:
    """What the schedule runs and when, passed to the command as ``definition``."""
    names = (
        *("task", "timer", "signature", "args", "kwargs", "timezone", "queue"),
        *("labels", "options"),
    )
    return with_options(
        DEFINITION_OPTIONS, collected("definition", (*names, "allow_unknown_task"))(command)
    )


def policy_options(command: F) -> F:
    """One text option per scheduling policy, passed to the command as ``policies``.

    Plain text rather than ``click.Choice``: the API checks every value and
    refuses a bad one in one line naming the field and what it expects.
    """
    return with_options(
        [
            _skip_calendar_option
            if name == "skip_calendars"
            else click.option(
                f"--{name.replace('_', '-')}",
                name,
                metavar=POLICY_HELP[name][0],
                help=POLICY_HELP[name][1],
            )
            for name in POLICY_NAMES
        ],
        collected("policies", POLICY_NAMES)(command),
    )


def _calendar_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[str] | str | None:
    """``--skip-calendar`` given once per calendar: their list, ``none`` to clear them, or
    None when not given (an edit keeps the stored ones)."""
    if value == ("none",):
        return "none"
    return list(value) or None


#: A schedule's calendars, one ``--skip-calendar NAME`` each (edit replaces the list).
_skip_calendar_option = click.option(
    "--skip-calendar",
    "skip_calendars",
    multiple=True,
    metavar="NAME",
    callback=_calendar_names,
    help="A calendar (bridge calendar add) on whose days and times no occurrence is sent, "
    "each counted as excluded; repeat it for several, edit replaces them, 'none' removes "
    "them. Default: none.",
)
