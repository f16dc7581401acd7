"""The management side: the Python API, its read-only views, bulk import and export, the CLI.

What operators use to create, change, trigger and inspect schedules. It
reaches the database only through :mod:`bridge.storage` and the broker only
through :mod:`bridge.celery.broker`.
"""
