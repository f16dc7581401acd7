"""Celery's own ``PersistentScheduler`` for ``bench/peers.py``: the burst in ``beat_schedule``.

Beat merges these entries into its shelve file when it starts; the bench
gives it a file of its own (``beat -s``), so every run starts from the
``last_run_at`` written here.
"""

from __future__ import annotations

import burst_entries
from celery import Celery

from bench.beat_app import TASK, shared_settings

_last_run = burst_entries.last_run_at()

app = Celery("peers-persistent")
app.conf.update(
    shared_settings(),
    beat_scheduler="celery.beat:PersistentScheduler",
    beat_schedule={
        name: {"task": TASK, "schedule": burst_entries.EVERY, "last_run_at": _last_run}
        for name in burst_entries.names()
    },
)
