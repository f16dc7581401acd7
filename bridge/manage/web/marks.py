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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from markupsafe import Markup, escape

from bridge.rules.health import Health
from bridge.service.views import Schedule


class Mark(Protocol):
    """A mark of a strip: when, its status, what hovering it says."""

    @property
    def at(self) -> datetime: ...
    @property
    def status(self) -> str: ...
    @property
    def title(self) -> str: ...


def shown(value: Any) -> Any:
    """What a page shows of ``value``: a text holding a lone surrogate, which no page can be
    encoded with, as its escape; anything else as it is."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def when_html(moment: datetime | None, relative: bool = True) -> Markup:
    """A time, in UTC until the page's script puts it in the browser's zone (and says how
    long ago or ahead it is, when ``relative``); a dash for none."""
    if moment is None:
        return Markup('<span class="none">-</span>')
    at = moment.isoformat()
    flag = " data-relative" if relative else ""
    return Markup(f'<time datetime="{at}"{flag}>{at[:10]} {at[11:19]} UTC</time>')


def status_html(value: str | None) -> Markup:
    """A run's status as a badge; a dash for none."""
    if not value:
        return Markup('<span class="none">-</span>')
    said = escape(shown(value))
    return Markup(f'<span class="badge status-{said.lower()}">{said}</span>')


def health_html(value: str, reason: str = "") -> Markup:
    """A schedule's health as a badge, why on hover."""
    said = escape(shown(value))
    title = f' title="{escape(shown(reason))}"' if reason else ""
    return Markup(f'<span class="badge health-{said}"{title}>{said}</span>')


def strip_html(marks: Sequence[Mark], glyphs: Mapping[str, str], strip_id: str = "") -> Markup:
    """A strip of marks: a span per mark, with its status's glyph (from ``glyphs``) and
    class, its time for the page's script and what hovering it says. The markup of each
    status is made once (:func:`_tick`); only the time varies."""
    if not marks:
        return Markup('<span class="none">no runs yet</span>')
    good = sum(mark.status == "SUCCESS" for mark in marks)
    what = "occurrences" if strip_id else "runs"
    named = f' id="{escape(strip_id)}"' if strip_id else ""
    parts = [
        f'<span class="strip"{named} role="img" aria-label="last {len(marks)} {what}:'
        f' {good} succeeded, {len(marks) - good} did not">'
    ]
    for mark in marks:
        opening, closing = _tick(mark.status, mark.title, glyphs.get(mark.status))
        at = mark.at.isoformat()
        parts.append(f'{opening} data-at="{at}" title="{at[:10]} {at[11:19]} UTC: {closing}')
    parts.append("</span>")
    return Markup("".join(parts))


@functools.lru_cache(maxsize=1024)
def _tick(status: str, title: str, glyph: str | None) -> tuple[str, str]:
    """The escaped markup of a mark before and after its time."""
    said = escape(shown(title))
    kind = escape(shown(status).lower())
    opening = f'<span class="tick status-{kind}" data-status="{said}"'
    return opening, f'{said}">{escape(shown(glyph or status[:1]))}</span>'


def schedule_row_html(
    schedule: Schedule,
    path: str,
    words: str,
    strip: Sequence[Mark],
    rate: float | None,
    glyphs: Mapping[str, str],
    tick: bool,
) -> Markup:
    """A row of the list of schedules (``_schedule_rows.html``): the schedule's name, with
    a box to tick it for the bulk actions when ``tick``, its labels and why it does not
    fire; its timer in ``words``; its next and last run; the ``strip`` of its last runs;
    its success ``rate``; its health."""
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
            f' <span class="reason">{_text(schedule.note)}</span>'
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
    following = when_html(schedule.nextrun) if schedule.enabled else _NONE
    cells.append(f"<td>{following}</td>\n")
    if schedule.last_run_at:
        last = f"{status_html(schedule.last_status)} {when_html(schedule.last_run_at)}"
    else:
        last = '<span class="none">never</span>'
    cells.append(f"<td>{last}</td>\n<td>{strip_html(strip, glyphs)}</td>\n")
    cells.append(f"<td>{_NONE if rate is None else f'{rate * 100:.0f}%'}</td>\n")
    cells.append(f"<td>{health_html(schedule.health, schedule.health_reason)}</td>\n</tr>")
    return Markup("".join(cells))


def _text(value: Any) -> Markup:
    """A value a user wrote, escaped, as the templates write one (see :func:`shown`)."""
    return escape(shown(value))


_NONE = '<span class="none">-</span>'
_FINISHED = Health.FINISHED.value
