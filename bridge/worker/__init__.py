"""The worker side's own parts: the queue of record writes and the heartbeat.

A worker's app calls ``bridge.recorder.install`` (:mod:`bridge.celery.recorder`,
the Celery adapter), which turns Celery's task signals into record writes
that one thread per process writes in batches (:mod:`bridge.worker.backlog`)
and starts the worker's heartbeat and its watch on beat
(:mod:`bridge.worker.heartbeat`).
"""
