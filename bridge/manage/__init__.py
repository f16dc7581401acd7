"""The management side: the Python API, bulk import and export, the CLI and the web server.

What operators use to create, change, trigger and inspect schedules. The
Python API (:class:`~bridge.manage.api.Bridge`) is a façade over the
services of :mod:`bridge.service`, which return the read-only views of
:mod:`bridge.service.views`; it reaches the broker only through
:mod:`bridge.celery.broker`, and the CLI and the web server reach the layers
below only through it.
"""
