"""What every kind of timer shares: the questions it answers, and how it refuses.

:class:`Timer` is the interface the scheduler asks of every timer,
:class:`TimerSyntaxError` what an unreadable timer text raises, and
:func:`require_aware` the refusal of an instant without an offset. The
timers of :mod:`bridge.rules.timers` (cron, intervals, one-shots) and of
:mod:`bridge.rules.solar` build on this module; ``parse_timer`` hands
``solar ...`` texts to :mod:`bridge.rules.solar`, which therefore cannot
import :mod:`bridge.rules.timers` back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from zoneinfo import ZoneInfo

from bridge.errors import BridgeError

TIMER_EXPECTED = (
    "a 5-field cron expression, '@hourly'..'@yearly', "
    "'every <n><s|m|h|d>...' (optionally followed by 'after completion') "
    "or 'at <ISO-8601 time>'"
)


class TimerSyntaxError(BridgeError, ValueError):
    """A timer text could not be read; ``expected`` says what would have been."""

    def __init__(self, text: str, problem: str, expected: str = TIMER_EXPECTED) -> None:
        self.text = text
        self.problem = problem
        self.expected = expected
        super().__init__(f"{problem} in {text!r}; expected {expected}")


def require_aware(name: str, moment: datetime) -> datetime:
    """Refuse naive datetimes: which instant they mean would be a guess."""
    if moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {moment!r}")
    return moment


class Timer(ABC):
    """When a schedule's occurrences are; build one with :func:`bridge.rules.timers.parse_timer`.

    ``text`` is the normalised timer text (what should be stored) and
    ``zone`` the IANA zone it is read in.
    """

    text: str
    zone: ZoneInfo

    @property
    def is_one_shot(self) -> bool:
        """Whether the timer has a single occurrence."""
        return False

    @property
    def fixed_delay(self) -> bool:
        """Whether each occurrence counts from the end of the previous run."""
        return False

    @abstractmethod
    def next_after(self, after: datetime) -> datetime | None:
        """The first occurrence strictly after ``after``, or None if there is none."""

    @abstractmethod
    def latest_at_or_before(self, at: datetime) -> datetime | None:
        """The most recent occurrence at or before ``at``, or None if there is none.

        Takes the same time however far ``at`` lies from the occurrences, so
        that catching up after a long downtime costs nothing extra.
        """
