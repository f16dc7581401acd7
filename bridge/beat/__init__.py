"""The beat side: the fire sequence and what runs beside it, with no Celery in them.

``celery beat -S bridge`` builds :class:`bridge.celery.scheduler.DatabaseScheduler`
(the Celery adapter), which claims the due rows at each tick, builds these
parts, hands them the broker (:class:`bridge.service.ports.Broker`) and runs
them: the fire sequence that fires a claimed batch in phases
(:mod:`bridge.beat.fire`), housekeeping
(:mod:`bridge.beat.housekeeping`), the watchdog (:mod:`bridge.beat.watchdog`),
the outage guard and the schema watch.
"""
