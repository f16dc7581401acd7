"""``bridge.recorder.install(app)``, the documented way to record runs on the workers.

The recorder lives in :mod:`bridge.celery.recorder`.
"""

from bridge.celery.recorder import Recorder, install

__all__ = ["Recorder", "install"]
