"""What every peer scheduler is given: N entries that are all due at one instant.

Each entry runs ``bench.beat_app.noop`` every hour and last ran one hour
before the due instant, so the due instant is its next run for every
scheduler alike (Celery's ``schedule.is_due`` counts from ``last_run_at``).
``bench/peers.py`` sets the environment:

* ``BURST_SIZE``: how many entries;
* ``BURST_DUE``: the due instant, in epoch seconds.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

#: How often each entry runs: far longer than any burst, so each is sent once.
EVERY = timedelta(hours=1)


def size() -> int:
    return int(os.environ["BURST_SIZE"])


def due() -> datetime:
    return datetime.fromtimestamp(float(os.environ["BURST_DUE"]), UTC)


def last_run_at() -> datetime:
    """One interval before the due instant: the run the entries have already had."""
    return due() - EVERY


def names() -> list[str]:
    return [f"burst-{i:06d}" for i in range(size())]
