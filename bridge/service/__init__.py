"""Units of work: the transactions in which a decision of the rules is applied to the store.

Each one opens a transaction (:meth:`bridge.storage.database.Database.session`),
locks and reads through the gateways of :mod:`bridge.storage`, builds a
row's state once, decides through :mod:`bridge.rules` and writes through
storage again. Storage runs statements and hands back values; it decides
nothing. The processes (beat, the workers) call a unit of work where a
decision is taken, and storage's gateways directly where none is (claiming
rows, heartbeats, releases). What they need of the broker, they are handed
(:mod:`bridge.service.ports`): nothing here imports Celery.

The Python API (:class:`bridge.manage.api.Bridge`) is a façade over the
services here that answer operators (:mod:`~bridge.service.schedules`,
:mod:`~bridge.service.readings`, :mod:`~bridge.service.forecasts`,
:mod:`~bridge.service.history`, :mod:`~bridge.service.manual`,
:mod:`~bridge.service.watch`, and the calendars, tokens and incidents):
each checks the values it is given through the rules before anything is
written, reads through storage or changes through a unit of work, and
returns the frozen views of
:mod:`bridge.service.views`.
"""
