"""Solar timers: ``solar <event> <latitude> <longitude>``, fired at the sun's events.

The events are Celery's, computed the way ``celery.schedules.solar`` computes
them, with the same astronomy library (`ephem`_, the ``solar`` extra), the
same observer (sea level, no atmospheric pressure, the event's horizon) and
the same search: the first event strictly after a given instant, skipping the
days on which it does not happen (astronomical dusk in a northern summer,
sunrise in a polar night) for up to a year. So a schedule moved from Celery's
``solar`` fires at the same instants, to the microsecond.

Like every timer, the arithmetic is pure: it is handed instants and never
reads the clock.

.. _ephem: https://rhodesmill.org/pyephem/
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from bridge.rules.timer_base import Timer, TimerSyntaxError, require_aware

#: Each event: the horizon ephem is given, the search it runs, and whether the
#: centre of the sun (rather than its upper edge) must cross that horizon.
EVENTS: dict[str, tuple[str, str, bool]] = {
    "dawn_astronomical": ("-18", "rising", True),
    "dawn_nautical": ("-12", "rising", True),
    "dawn_civil": ("-6", "rising", True),
    "sunrise": ("-0:34", "rising", False),
    "solar_noon": ("0", "transit", False),
    "sunset": ("-0:34", "setting", False),
    "dusk_civil": ("-6", "setting", True),
    "dusk_nautical": ("-12", "setting", True),
    "dusk_astronomical": ("-18", "setting", True),
}
SOLAR_EXPECTED = (
    "'solar <event> <latitude> <longitude>' with an event among "
    f"{', '.join(EVENTS)}, a latitude from -90 to 90 and a longitude from -180 to 180 "
    "(decimal degrees, north and east positive)"
)
#: How many days a search skips, at most, when the event does not happen (as Celery).
SEARCH_DAYS = 366


def _ephem() -> Any:
    try:
        import ephem
    except ImportError:  # pragma: no cover - the test environment has it
        return None
    return ephem


def has_ephem() -> bool:
    """Whether solar timers can be computed here (the ``solar`` extra is installed)."""
    return _ephem() is not None


def _degrees(text: str, word: str, low: int, high: int, whole: str) -> str:
    """A coordinate as stored: plain decimal degrees without trailing zeros."""
    try:
        value = Decimal(word)
    except InvalidOperation:
        raise TimerSyntaxError(whole, f"{text} {word!r} is not a number", SOLAR_EXPECTED) from None
    if not value.is_finite() or not low <= value <= high:
        raise TimerSyntaxError(whole, f"{text} {word} is outside {low}-{high}", SOLAR_EXPECTED)
    shown = format(value.normalize(), "f")
    return "0" if shown in {"-0", "0"} else shown


def parse_solar(text: str, argument: str, zone: ZoneInfo) -> SolarTimer:
    """Read the words after ``solar``: an event, a latitude and a longitude."""
    words = argument.lower().replace(",", " ").split()
    if len(words) != 3:
        raise TimerSyntaxError(
            text,
            f"a solar timer has 3 words after 'solar', this one has {len(words)}",
            SOLAR_EXPECTED,
        )
    event, latitude, longitude = words
    if event not in EVENTS:
        raise TimerSyntaxError(text, f"unknown solar event {event!r}", SOLAR_EXPECTED)
    lat = _degrees("latitude", latitude, -90, 90, text)
    lon = _degrees("longitude", longitude, -180, 180, text)
    if not has_ephem():
        raise TimerSyntaxError(
            text,
            "solar timers need the ephem library: install celery-periodic-bridge[solar]",
            SOLAR_EXPECTED,
        )
    return SolarTimer(text=f"solar {event} {lat} {lon}", zone=zone, event=event, lat=lat, lon=lon)


@dataclass(frozen=True)
class SolarTimer(Timer):
    """Each time ``event`` happens for an observer at ``lat``, ``lon`` (decimal degrees).

    The zone plays no part: the sun's events are instants. Days on which the
    event does not happen are skipped; a place where it does not happen for a
    whole year has no next occurrence.
    """

    text: str
    zone: ZoneInfo
    event: str
    lat: str
    lon: str

    def next_after(self, after: datetime) -> datetime | None:
        return self._search(require_aware("after", after), forward=True)

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        return self._search(require_aware("at", at), forward=False)

    def _search(self, moment: datetime, forward: bool) -> datetime | None:
        ephem = _ephem()
        horizon, kind, use_center = EVENTS[self.event]
        observer = ephem.Observer()
        observer.lat = self.lat
        observer.lon = self.lon
        observer.elev = 0
        observer.horizon = horizon
        observer.pressure = 0
        sun = ephem.Sun()
        options = {"use_center": True} if use_center else {}
        find = getattr(observer, f"{'next' if forward else 'previous'}_{kind}")
        skip = observer.next_antitransit if forward else observer.previous_antitransit
        start = ephem.Date(moment.astimezone(UTC).replace(tzinfo=None))
        for _ in range(SEARCH_DAYS):
            try:
                found = find(sun, start=start, **options)
            except ephem.CircumpolarError:
                start = skip(sun, start=start)
                continue
            instant: datetime = found.datetime().replace(tzinfo=UTC)
            if (instant > moment) if forward else (instant <= moment):
                return instant
            # The float days of ephem put an event a hair's breadth from where it was
            # asked for; look again from just past it.
            start = ephem.Date(found + (1 if forward else -1) * ephem.second)
        return None
