"""``bridge.scheduler:DatabaseScheduler``, the documented path of the beat scheduler class.

It lives in :mod:`bridge.beat.scheduler`; ``celery beat -S bridge`` finds it
through the ``celery.beat_schedulers`` entry point.
"""

from bridge.beat.scheduler import DatabaseScheduler

__all__ = ["DatabaseScheduler"]
