"""What every command shares: the :class:`Bridge` it acts through, and its failures in one line.

Every failure, a usage error as much as a refusal of the bridge or a
database error, ends the command with one ``Error: <reason>`` line and exit
status 1: no traceback and no click usage block reaches the user.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from bridge.errors import BridgeError
from bridge.manage.api import Bridge, DatabaseError, default_actor, error_reason

F = TypeVar("F", bound=Callable[..., Any])


def bridge_of(ctx: click.Context, check_schema: bool = True) -> Bridge:
    """The bridge of the command's app; unless ``check_schema`` is false, refused in one line
    when the store's schema is not one this release may run against."""
    app = getattr(ctx.obj, "app", None)
    api = Bridge(app, actor=default_actor("cli"))
    if check_schema:
        api.check_schema()
    return api


def fails_in_one_line(command: F) -> F:
    """Turn the bridge's refusals and database errors into ``Error: <reason>`` and exit 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BridgeError as exc:
            raise click.ClickException(str(exc)) from None
        except DatabaseError as exc:
            raise click.ClickException(f"database error: {error_reason(exc)}") from None

    return wrapper  # type: ignore[return-value]
