"""The clock: the one place the bridge asks what time it is.

The rules (:mod:`bridge.rules`) never read it; they are handed ``now``.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware in UTC: the only kind of time the bridge stores."""
    return datetime.now(UTC)
