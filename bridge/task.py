"""``bridge.task.BridgeTask``, the documented path of the task base class.

It lives in :mod:`bridge.worker.task`.
"""

from bridge.worker.task import BridgeTask

__all__ = ["BridgeTask"]
