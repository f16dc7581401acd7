"""Which repeats of one trouble a log tells: the first, then one a window, with a count.

During a database outage every request the server answers 503 has the same
cause; a line for each would bury the log under one sentence (a dashboard
refreshing itself and a monitor's probes send several a second). The first
of a kind is told at once, and then at most one a ``window``, saying how
many went untold since the last line, so that the log still shows the
outage's start, that it goes on, and how much it refused.

Kept in memory by whoever holds it, for at most ``kinds`` kinds: past that,
the kind told longest ago is forgotten first. Not safe to share between
threads without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Told:
    at: float
    untold: int = 0


class Repeats:
    """The repeats of each kind of trouble to tell, at most one a ``window`` seconds."""

    def __init__(self, window: float = 60.0, kinds: int = 100) -> None:
        self.window = window
        self.kinds = kinds
        self._told: dict[str, _Told] = {}

    def tell(self, kind: str, now: float) -> int | None:
        """Whether to tell this repeat of ``kind`` at ``now`` (monotonic seconds): None to
        keep it quiet, else how many repeats went untold since the last one told."""
        told = self._told.get(kind)
        if told is not None and now - told.at < self.window:
            told.untold += 1
            return None
        untold = 0 if told is None else told.untold
        self._told.pop(kind, None)  # the newest last: the oldest is forgotten first
        self._told[kind] = _Told(now)
        while len(self._told) > self.kinds:
            del self._told[next(iter(self._told))]
        return untold
