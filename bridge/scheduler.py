"""``bridge.scheduler:DatabaseScheduler``, the documented path of the beat scheduler class.

It lives in :mod:`bridge.celery.scheduler`; ``celery beat -S bridge`` finds it
through the ``celery.beat_schedulers`` entry point.
"""

from bridge.celery.scheduler import DatabaseScheduler

__all__ = ["DatabaseScheduler"]
