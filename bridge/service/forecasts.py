"""What beat will send: a schedule's next runs, a timer's first occurrences, the day ahead.

A forecast applies the rules beat applies (:func:`bridge.rules.decisions.forecast`)
to the schedule's row and the calendars it skips, read here; nothing is
written. A preview reads nothing: it is what the dashboard's form shows of a
timer not saved yet. A timeline gathers the enabled schedules by timer and
zone and works out their fires within a budget, so that a store of many
schedules firing every second still draws in one request.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from bridge.clock import utcnow
from bridge.errors import ValidationError
from bridge.rules.calendars import excluded_by, names_of
from bridge.rules.decisions import FINISHED_NOTES, Forecast, forecast
from bridge.rules.definition import check_timer, check_timezone, stored_timezone
from bridge.rules.fire import state_of
from bridge.rules.values import lookup_text, whole_number
from bridge.rules.words import timer_words
from bridge.service.calendars import Calendars
from bridge.service.views import Preview, Timeline, TimerGroup
from bridge.storage.schedules import ScheduleStore

#: The most runs :meth:`Forecasts.forecast` (``bridge next``) looks ahead.
MAX_FORECAST = 1000
#: Why a fixed-delay schedule whose run is under way has no next run yet.
NOTE_RUNNING_RUN = "after the running run completes"
#: Why a schedule whose owed work waits for an open run has no next run yet.
NOTE_OPEN_RUN = "when its open run ends"
#: The timers (with their zones) :meth:`Forecasts.timeline` draws at most: those most
#: schedules share. Schedules under others are counted as left out.
TIMELINE_GROUPS = 200
#: The fires :meth:`Forecasts.timeline` works out at most, across its timers: a day of a
#: timer firing every second is 86,400. Timers beyond are left out.
TIMELINE_FIRES = 200_000


class Forecasts:
    """The runs to come, read from the schedules and calendars of one store."""

    def __init__(self, store: ScheduleStore, calendars: Calendars) -> None:
        self.store = store
        self.calendars = calendars

    def forecast(self, name: str, count: int, now: datetime | None) -> Forecast:
        """The next ``count`` runs beat will send for the schedule, as it will send them
        (see :meth:`bridge.manage.api.Bridge.forecast`)."""
        count = whole_number("count", count, high=MAX_FORECAST)
        row = self.store.get(lookup_text("name", name))
        if not row.enabled:
            return Forecast([], _disabled_note(row.note, row.broken))
        state = state_of(row, self.calendars.book_for([row.skip_calendars]))
        if row.nextrun is None:
            waiting = NOTE_RUNNING_RUN if state.fixed_delay else NOTE_OPEN_RUN
            return Forecast([], waiting)
        return forecast(state, row.nextrun, now or utcnow(), count)

    def preview(
        self,
        timer: str,
        timezone: str | None,
        count: int,
        now: datetime | None,
        default_timezone: Callable[[], str],
    ) -> Preview:
        """The first ``count`` occurrences after now of a timer not saved yet (see
        :meth:`bridge.manage.api.Bridge.preview`)."""
        now = now or utcnow()
        count = whole_number("count", count, low=1, high=MAX_FORECAST)
        zone = check_timezone(timezone or default_timezone())
        timer_ = check_timer(timer, zone, now)
        found: list[datetime] = []
        at = timer_.next_after(now)  # as add's first occurrence: strictly after now
        while at is not None and len(found) < count:
            found.append(at)
            at = None if timer_.fixed_delay else timer_.next_after(at)
        return Preview(zone, found)

    def timeline(self, span: timedelta, now: datetime | None) -> Timeline:
        """When the enabled schedules fire over the next ``span``, gathered by timer and
        zone, within :data:`TIMELINE_GROUPS` and :data:`TIMELINE_FIRES` (see
        :meth:`bridge.manage.api.Bridge.timeline`)."""
        since = now or utcnow()
        until = since + span
        groups: list[TimerGroup] = []
        left_out, budget = 0, TIMELINE_FIRES
        rows = self.store.timer_groups(until, TIMELINE_GROUPS + 1)
        book = self.calendars.book_for(row.skip_calendars for row in rows)
        for row in rows:
            # A calendar gone or unreadable is left out of a picture rather than refused.
            calendars = [book[name] for name in names_of(row.skip_calendars) if name in book]
            zone = stored_timezone(row.timezone)
            try:
                timer = check_timer(row.timer, zone, row.soonest)
            except ValidationError:
                timer = None
            if timer is None or len(groups) == TIMELINE_GROUPS or budget <= 0:
                left_out += row.schedules
                continue
            fires: list[datetime] = []
            looked = 0
            at: datetime | None = row.soonest
            if row.soonest < since:  # overdue: beat fires it now, its timer on from there
                fires.append(since)
                at = timer.next_after(since)
            while at is not None and at < until and looked < budget:
                looked += 1
                if excluded_by(calendars, at) is None:
                    fires.append(at)
                at = None if timer.fixed_delay else timer.next_after(at)
            budget -= max(looked, len(fires))
            more = at is not None and at < until
            groups.append(
                TimerGroup(
                    row.timer, zone, timer_words(timer), row.schedules, row.first_name, fires, more
                )
            )
        return Timeline(since, until, groups, left_out)


def _disabled_note(note: str | None, broken: bool) -> str:
    """Why a disabled schedule has no run to come: its own note, said as paused unless
    it finished or broke."""
    if broken or note in FINISHED_NOTES:
        return note or "broken"
    return f"paused: {note}" if note else "paused"
