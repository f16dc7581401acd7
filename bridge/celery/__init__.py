"""The Celery adapter: where the bridge meets Celery.

Celery drives the bridge through three entry points (the scheduler class,
the recorder's signal handlers, the task base class), and the bridge drives
Celery through one object (the broker); the rest converts Celery's schedules:

- :mod:`bridge.celery.scheduler`: ``celery beat -S bridge`` builds its
  :class:`~bridge.celery.scheduler.DatabaseScheduler`, which builds beat's
  parts (:mod:`bridge.beat`) and runs them from Celery's beat loop;
- :mod:`bridge.celery.recorder`: ``bridge.recorder.install(app)`` connects
  the worker signals to the run records (:mod:`bridge.service.records`) and
  starts the worker's heartbeat (:mod:`bridge.worker`);
- :mod:`bridge.celery.task`: ``BridgeTask``, the task base class whose start
  is a compare-and-set;
- :mod:`bridge.celery.broker`: :class:`~bridge.celery.broker.CeleryBroker`,
  the broker as beat, the workers and the services are handed it
  (:class:`bridge.service.ports.Broker`): publishing a run's message,
  revoking runs, sending alerts;
- :mod:`bridge.celery.schedules` and :mod:`bridge.celery.beat_schedule`:
  Celery's schedule objects as timer texts, and the app's ``beat_schedule``
  synced into the table.

Beat, the worker side, the units of work, storage and the rules import
neither Celery, kombu nor a broker client (an import contract says so): the
fire sequence, the watchdog and the units of work are the scheduler's own
logic, handed the broker by the entry point that builds them. Besides this
package, only the management side above it (the CLI is a Celery command;
``Bridge`` sends through a :class:`~bridge.celery.broker.CeleryBroker`), the
embedded broker's kombu transport (:mod:`bridge.folder_broker`) and RedBeat's
store in Redis (:mod:`bridge.redbeat_store`) import them. The documented
import paths ``bridge.scheduler``, ``bridge.recorder`` and ``bridge.task``
name what lives here.
"""
