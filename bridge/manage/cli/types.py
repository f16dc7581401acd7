"""The click parameter types of the commands: values refused in the project's words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bridge.errors import ValidationError
from bridge.rules.values import INT_MAX, whole_number

if TYPE_CHECKING:
    _IntType = click.ParamType[int]
else:  # click's ParamType is generic from 8.2 on; the bridge supports 8.1.2
    _IntType = click.ParamType


class WholeNumber(_IntType):
    """A whole number option with a range, refused in the project's words."""

    name = "N"

    def __init__(self, high: int = INT_MAX) -> None:
        self.high = high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return whole_number(
                param.name if param and param.name else "value", value, 1, self.high
            )
        except ValidationError as exc:
            self.fail(f"got {value!r}, expected {exc.expected}", param, ctx)
