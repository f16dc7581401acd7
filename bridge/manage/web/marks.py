"""The small pieces of HTML a page repeats hundreds of times, written in Python.

A list of 100 schedules shows 2,000 marks of runs, 200 times and 200 badges:
written by template macros, they took more of the server's time than the rest
of the page, the database included (each macro call costs Jinja tens of
microseconds). The macros of ``macros.html`` call these, so every page writes
them the same way. The list's rows themselves are written here too
(:func:`schedule_row_html`): through the template, 100 rows' attribute
look-ups, tests and escapes cost the page as much as reading them.

Everything a user wrote is escaped, and a text holding a lone surrogate (only
an older release may have stored one) shown as its escape, as the templates'
``finalize`` does for what they write themselves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from markupsafe import Markup

from bridge.manage.api import Schedule
from bridge.rules.decisions import BROKEN_NOTE
from bridge.rules.health import Health


class Mark(Protocol):
    """A mark of a strip: when, its status, what hovering it says."""

    @property
    def at(self) -> datetime: ...
    @property
    def status(self) -> str: ...
    @property
    def title(self) -> str: ...


class Written(Markup):
    """HTML written here from texts each :func:`shown` already, which :func:`shown` passes as
    it is: a list's rows are 150 KB, and looking through them again for a lone surrogate
    took as long as encoding the page."""

    __slots__ = ()


def shown(value: Any) -> Any:
    """What a page shows of ``value``: a text holding a lone surrogate, which no page can be
    encoded with, as its escape; anything else as it is."""
    if isinstance(value, str) and type(value) is not Written and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def when_html(moment: datetime | None, relative: bool = True) -> Markup:
    """A time, in UTC until the page's script puts it in the browser's zone (and says how
    long ago or ahead it is, when ``relative``); a dash for none."""
    return Markup(_when(moment, relative))


def status_html(value: str | None) -> Markup:
    """A run's status as a badge; a dash for none."""
    return Markup(_status(value))


def health_html(value: str, reason: str = "") -> Markup:
    """A schedule's health as a badge, why on hover."""
    return Markup(_health(value, reason))


def strip_html(marks: Sequence[Mark], glyphs: Mapping[str, str], strip_id: str = "") -> Markup:
    """A strip of marks: a span per mark, with its status's glyph (from ``glyphs``) and
    class, its time for the page's script and what hovering it says."""
    return Markup(_strip(marks, glyphs, strip_id))


# What the functions above write, as text already escaped: a row of the list writes
# several of them, and made into Markup each (a Python constructor) and escaped by
# markupsafe (a Python wrapper around its C escape), 600 texts a page cost the list
# a millisecond. Text is made Markup once, at the edge: by the functions above for the
# templates, by :func:`schedule_row_html` for a whole row.


def _when(moment: datetime | None, relative: bool = True) -> str:
    if moment is None:
        return _NONE
    at = moment.isoformat()
    flag = " data-relative" if relative else ""
    return f'<time datetime="{at}"{flag}>{at[:10]} {at[11:19]} UTC</time>'


def _status(value: str | None) -> str:
    if not value:
        return _NONE
    said = _text(value)
    return f'<span class="badge status-{said.lower()}">{said}</span>'


def _health(value: str, reason: str = "") -> str:
    said = _text(value)
    title = f' title="{_text(reason)}"' if reason else ""
    return f'<span class="badge health-{said}"{title}>{said}</span>'


def _strip(marks: Sequence[Mark], glyphs: Mapping[str, str], strip_id: str = "") -> str:
    """:func:`strip_html`'s text."""
    return _strip_text(
        [(mark.at.isoformat(), mark.status, mark.title) for mark in marks], glyphs, strip_id
    )


def _strip_text(
    marks: Sequence[tuple[str, str, str]], glyphs: Mapping[str, str], strip_id: str = ""
) -> str:
    """A strip of ``marks``, each given as its time (ISO 8601 text in UTC), status and
    title. The markup of each status is made once a strip (:func:`_tick`); only the time
    varies. Plain tuples, not :class:`Mark` objects: the list writes 2,000 marks a page,
    and an object a mark cost it a fifth of their time."""
    if not marks:
        return '<span class="none">no runs yet</span>'
    what = "occurrences" if strip_id else "runs"
    named = f' id="{_text(strip_id)}"' if strip_id else ""
    ticks: dict[tuple[str, str], tuple[str, str]] = {}
    good = 0
    parts = [""]
    for iso, status, title in marks:
        tick = ticks.get((status, title))
        if tick is None:
            tick = ticks[status, title] = _tick(status, title, glyphs.get(status))
        good += status == "SUCCESS"
        parts.append(f'{tick[0]} data-at="{iso}" title="{iso[:10]} {iso[11:19]} UTC: {tick[1]}')
    parts[0] = (
        f'<span class="strip"{named} role="img" aria-label="last {len(marks)} {what}:'
        f' {good} succeeded, {len(marks) - good} did not">'
    )
    parts.append("</span>")
    return "".join(parts)


@functools.lru_cache(maxsize=1024)
def _tick(status: str, title: str, glyph: str | None) -> tuple[str, str]:
    """The escaped markup of a mark before and after its time."""
    said = _text(title)
    kind = _text(status.lower())
    opening = f'<span class="tick status-{kind}" data-status="{said}"'
    return opening, f'{said}">{_text(glyph or status[:1])}</span>'


def schedule_row_html(
    schedule: Schedule,
    path: str,
    words: str,
    runs: Sequence[tuple[str, str]],
    rate: float | None,
    glyphs: Mapping[str, str],
    tick: bool,
) -> Written:
    """A row of the list of schedules (``_schedule_rows.html``): the schedule's name, with
    a box to tick it for the bulk actions when ``tick``, its labels and why it does not
    fire; its timer in ``words``; its next and last run; the strip of its last ``runs``
    (each its plan time, ISO 8601 text in UTC, and status, as read); its success
    ``rate``; its health."""
    name = _text(schedule.name)
    cells = [f'<tr data-schedule="{name}">\n<td>']
    if tick:
        cells.append(
            f'<input type="checkbox" name="names" value="{name}" form="bulk"'
            f' aria-label="tick {name}">\n'
        )
    cells.append(f'<a href="{_text(path)}">{name}</a>\n')
    cells.extend(f'<span class="chip">{_text(label)}</span>' for label in schedule.labels)
    if schedule.broken:
        cells.append(
            '\n<span class="badge health-broken">broken</span>'
            f' <span class="reason">{_text(broken_reason(schedule.note))}</span>'
        )
    elif schedule.health == _FINISHED:
        cells.append(
            '\n<span class="badge health-finished">finished</span>'
            f' <span class="reason">{_text(schedule.health_reason)}</span>'
        )
    elif not schedule.enabled:
        cells.append('\n<span class="badge health-paused">paused</span>')
        if schedule.note:
            cells.append(f' <span class="reason">{_text(schedule.note)}</span>')
    cells.append(f"</td>\n<td>{_text(words)}<br><code>{_text(schedule.timer)}</code></td>\n")
    following = _when(schedule.nextrun) if schedule.enabled else _NONE
    cells.append(f"<td>{following}</td>\n")
    if schedule.last_run_at:
        last = f"{_status(schedule.last_status)} {_when(schedule.last_run_at)}"
    else:
        last = '<span class="none">never</span>'
    strip = _strip_text([(at, status, status) for at, status in runs], glyphs)
    cells.append(f"<td>{last}</td>\n<td>{strip}</td>\n")
    cells.append(f"<td>{_NONE if rate is None else f'{rate * 100:.0f}%'}</td>\n")
    cells.append(f"<td>{_health(schedule.health, schedule.health_reason)}</td>\n</tr>")
    return Written("".join(cells))


def _text(value: Any) -> str:
    """A value a user wrote, escaped as markupsafe escapes it, and shown as the templates'
    ``finalize`` shows it (see :func:`shown`). A row writes eight or so: the common case,
    ASCII text with nothing to escape, takes two C calls."""
    text = value if type(value) is str else str(value)
    if not text.isascii():
        text = shown(text)
    if _SPECIAL.search(text) is None:
        return text
    return text.translate(_ESCAPES)


#: What HTML needs escaped in a text or an attribute, and as what (markupsafe's choice).
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})
_SPECIAL = re.compile("[&<>\"']")
_NONE = '<span class="none">-</span>'
_FINISHED = Health.FINISHED.value


def broken_reason(note: str | None) -> str:
    """Why a broken schedule broke: its note, less the word its badge already says."""
    return (note or "").removeprefix(BROKEN_NOTE)
