"""``bridge.recorder.install(app)``, the documented way to record runs on the workers.

The recorder lives in :mod:`bridge.worker.recorder`.
"""

from bridge.worker.recorder import Recorder, install

__all__ = ["Recorder", "install"]
