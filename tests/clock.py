"""Instants the tests compute from the real clock rather than write down, so that no
test depends on the day it runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

#: How far ahead to look for a change of offset: every zone that still changes does so
#: within a year.
_SEARCH = timedelta(days=400)


def next_offset_change(zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after ``after`` at which ``zone``'s UTC offset changes."""
    step = timedelta(hours=1)
    offset = after.astimezone(zone).utcoffset()
    at = after
    while at - after < _SEARCH:
        following = at + step
        if following.astimezone(zone).utcoffset() != offset:
            low, high = at, following  # the change lies in (low, high]
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            return high.replace(microsecond=0)
        at = following
    raise ValueError(f"{zone.key} does not change its offset within {_SEARCH.days} days")
