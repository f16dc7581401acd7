"""How the commands print: times, durations and states as text, tables, and ``--json``.

Times are shown in the local zone with their UTC offset; ``--json`` gives
ISO-8601 UTC.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import click

from bridge.manage.api import NOTE_RUNNING_RUN, Schedule
from bridge.rules.health import Health
from bridge.rules.timers import format_duration
from bridge.rules.values import answerable


def local(value: datetime | None) -> str:
    """A time in the machine's zone with its offset, to the second; '-' for none."""
    return "-" if value is None else value.astimezone().isoformat(sep=" ", timespec="seconds")


def echo_json(value: Any) -> None:
    """Print ``value`` as strict JSON: a number that is not finite, which only an older
    release can have stored, as null (lone surrogates are escaped, as always)."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, allow_nan=False)
    except ValueError:
        text = json.dumps(answerable(value), indent=2, sort_keys=True)
    click.echo(text)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    for line in (headers, *rows):
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


def state_text(schedule: Schedule) -> str:
    if schedule.broken:
        return "BROKEN"
    if schedule.enabled:
        return "yes"
    return "finished" if schedule.health == Health.FINISHED else "paused"


def labels_text(schedule: Schedule) -> str:
    return ",".join(schedule.labels) or "-"


def next_run_text(schedule: Schedule) -> str:
    """``nextrun`` for people: a fixed-delay schedule has none while its run is under way."""
    if schedule.nextrun is None and schedule.fixed_delay:
        return NOTE_RUNNING_RUN
    return local(schedule.nextrun)


def duration_text(seconds: float | None) -> str:
    """A duration column (stored as seconds) the way it is written: ``1h30m``, ``0s``."""
    if seconds is None:
        return "-"
    delta = timedelta(seconds=seconds)
    if not delta:
        return "0s"
    try:
        return format_duration(delta)
    except ValueError:  # a fraction of a second, given through the API
        return f"{seconds:g}s"
