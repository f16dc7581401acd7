"""``bridge.task.BridgeTask``, the documented path of the task base class.

It lives in :mod:`bridge.celery.task`.
"""

from bridge.celery.task import BridgeTask

__all__ = ["BridgeTask"]
