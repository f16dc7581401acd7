"""The beat side: the Celery scheduler class and the fire sequence it runs.

``celery beat -S bridge`` builds :class:`bridge.beat.scheduler.DatabaseScheduler`,
which claims due rows, fires them in phases (:mod:`bridge.beat.fire`), keeps
house (:mod:`bridge.beat.housekeeping`) and syncs the app's ``beat_schedule``
(:mod:`bridge.beat.sync`).
"""
