"""Named calendars: built from operators' values, read for the decisions and for
operators, written and removed with their audit entry.

A change writes its audit entry in the same transaction; the entry belongs to
no schedule (:data:`~bridge.rules.audit.NO_SCHEDULE`) and says what the
calendar held. Removing one checks, in the transaction that deletes it, that
no schedule names it: beat takes a schedule whose calendar is gone out of
rotation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from bridge.errors import CalendarInUse, DuplicateCalendar, ValidationError
from bridge.rules.audit import NO_SCHEDULE
from bridge.rules.calendars import (
    Calendar,
    CalendarKind,
    calendars_named,
    names_of,
    names_text,
    require_known,
)
from bridge.rules.definition import check_timezone, stored_timezone
from bridge.rules.timers import load_zone
from bridge.rules.values import lookup_text
from bridge.service.views import CalendarInfo
from bridge.storage import calendars
from bridge.storage.audit import Change, log
from bridge.storage.calendars import CalendarStore
from bridge.storage.database import Database, Transaction, UniqueViolation
from bridge.storage.models import StoredCalendar


def read(row: StoredCalendar) -> Calendar:
    """The calendar a stored row holds, checked as when it was written; one changed with
    SQL into something else is refused as :class:`ValidationError`, naming the column."""
    try:
        entries = json.loads(row.entries)
    except (ValueError, TypeError):
        raise ValidationError("entries", row.entries, "a JSON list, as bridge writes it") from None
    try:
        zone = load_zone(stored_timezone(row.timezone))
    except ValueError:
        raise ValidationError("timezone", row.timezone, "a zone this machine knows") from None
    return Calendar.build(row.name, row.kind, entries, zone)


def skipped_by(named: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The schedules that skip each calendar, from their ``skip_calendars`` lists."""
    found: dict[str, list[str]] = {}
    for schedule, listed in named:
        for calendar in names_of(listed):
            found.setdefault(calendar, []).append(schedule)
    return found


class Calendars:
    """Named calendars read and changed, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = CalendarStore(database)

    def book(self) -> dict[str, Calendar]:
        """Every calendar, read, by name: what beat and the forecast decide with. One that
        cannot be read (written with SQL) is left out, so that only the schedules that skip
        it are refused, naming it, rather than every schedule's fire."""
        found = {}
        for row in self.store.every():
            try:
                found[row.name] = read(row)
            except ValidationError:
                continue
        return found

    def book_for(self, skip_lists: Iterable[str | None]) -> dict[str, Calendar]:
        """:meth:`book`, read only when one of ``skip_lists`` (schedules'
        ``skip_calendars`` columns) names a calendar: most batches, timelines and
        forecasts name none, and read nothing."""
        return self.book() if any(skip_lists) else {}

    def users(self) -> dict[str, list[str]]:
        """The schedules that skip each calendar, by name."""
        return skipped_by(self.store.naming())

    def names(self) -> set[str]:
        """The names of every calendar: what a schedule's ``skip_calendars`` may list."""
        return self.store.names()

    def named(self, names: Sequence[str]) -> tuple[Calendar, ...]:
        """The calendars ``names`` (a schedule's ``skip_calendars``), read; refused naming
        ``skip_calendars`` for one that is gone."""
        return calendars_named(names, self.book_for([names_text(tuple(names))]))

    def infos(self) -> list[CalendarInfo]:
        """Every calendar, by name, with the schedules that skip it; one changed with SQL
        into something unreadable is left out (:meth:`info` names the problem)."""
        users = self.users()
        found = []
        for row in self.store.every():
            try:
                found.append(_info(row, users.get(row.name, [])))
            except ValidationError:
                continue
        return found

    def info(self, name: str) -> CalendarInfo:
        """The calendar ``name`` with the schedules that skip it; :class:`CalendarNotFound`
        if none."""
        row = self.store.get(lookup_text("name", name))
        return _info(row, self.users().get(row.name, []))

    def build(
        self,
        name: Any,
        *,
        dates: Any,
        ranges: Any,
        cron: Any,
        timezone: Any,
        default_timezone: Callable[[], str],
    ) -> Calendar:
        """The calendar of exactly one of ``dates``, ``ranges`` or ``cron``, read in
        ``timezone`` (``default_timezone()``, the app's, when None), checked; nothing is
        written."""
        given = [
            (kind, value)
            for kind, value in (
                (CalendarKind.DATES, dates),
                (CalendarKind.RANGES, ranges),
                (CalendarKind.CRON, cron),
            )
            if value is not None
        ]
        if len(given) != 1:
            kinds = [kind.value for kind, _ in given]
            raise ValidationError(
                kinds[-1] if kinds else "dates",
                " and ".join(kinds) or None,
                "exactly one of dates, ranges or cron",
            )
        ((kind, entries),) = given
        zone = check_timezone(default_timezone() if timezone is None else timezone)
        return Calendar.build(name, kind, entries, load_zone(zone))

    def save(
        self, calendar: Calendar, replace: bool, now: datetime, change: Change
    ) -> StoredCalendar:
        """Store ``calendar``, over the one of its name when ``replace`` (the schedules
        that skip it read it at their next occurrence); :class:`DuplicateCalendar` if the
        name is taken and ``replace`` is false."""
        shown = calendar.to_json()
        values = {
            "kind": calendar.kind.value,
            "entries": list(calendar.entries),
            "timezone": calendar.zone.key,
        }
        try:
            with self.database.session() as session:
                row = calendars.save(session, calendar.name, values, now, replace)
                log(session, change, now, None, NO_SCHEDULE, after=shown)
        except UniqueViolation:
            # Another caller made it between the read and the insert.
            raise DuplicateCalendar(calendar.name) from None
        return row

    def remove(self, name: str, now: datetime, change: Change) -> None:
        """Delete the calendar ``name``; :class:`CalendarNotFound` if none,
        :class:`CalendarInUse` while a schedule skips it."""
        with self.database.session() as session:
            # Locked first: a schedule written meanwhile to skip it holds it (see
            # :func:`hold_skipped`), so it is either seen here or refused there.
            row = calendars.by_name(session, name, lock=True)
            users = skipped_by(calendars.naming(session, name)).get(name, [])
            if users:
                raise CalendarInUse(name, users)
            try:
                before = read(row).to_json()
            except ValidationError:  # changed with SQL: removed all the same
                before = {"name": row.name, "kind": row.kind, "unreadable": True}
            session.delete(row)
            log(session, change, now, None, NO_SCHEDULE, before=before)


def _info(row: StoredCalendar, schedules: Sequence[str]) -> CalendarInfo:
    """The view of a stored calendar, read, with the schedules that skip it."""
    return CalendarInfo(read(row), row.created_at, row.updated_at, tuple(schedules))


def hold_skipped(session: Transaction, skip_calendars: str | None) -> None:
    """In the transaction that writes a schedule's ``skip_calendars``: hold the calendars it
    names until it commits, and refuse (naming ``skip_calendars``) one that is gone, so that
    a calendar removed at the same moment is never left named by a schedule."""
    names = names_of(skip_calendars)
    if names:
        require_known(names, calendars.held_names(session, names))
