"""The worker side: execution records, the worker's heartbeat and ``BridgeTask``.

A worker's app calls :func:`bridge.worker.recorder.install` (documented as
``bridge.recorder.install``); the recorder turns Celery's task signals into
record writes that one thread per process writes in batches.
"""
