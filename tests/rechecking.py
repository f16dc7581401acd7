"""A beat scheduler that asks about the store's schema every second (tests only).

``celery beat -S tests.rechecking:RecheckingScheduler`` is the bridge's
scheduler with :data:`bridge.beat.schema.CHECK_INTERVAL` cut from a minute
to a second, so that a test sees a running beat meet a schema changed under
it without waiting a minute. The production scheduler carries no such hook.
"""

from __future__ import annotations

import bridge.beat.schema
from bridge.celery.scheduler import DatabaseScheduler

bridge.beat.schema.CHECK_INTERVAL = 1.0


class RecheckingScheduler(DatabaseScheduler):
    """The bridge's scheduler, checking the schema every second."""
