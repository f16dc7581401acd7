"""An incident acknowledged by an operator, with its audit entry in the same transaction.

Acknowledging stops an incident's alert being repeated (its recovery still
goes), so it is a change of what the on-call hears, and the audit log says
who made it and when, as it does for every other operator's change. The
entry belongs to the incident's schedule, or to none for an incident of the
scheduler.
"""

from __future__ import annotations

from datetime import datetime

from bridge.rules.audit import NO_SCHEDULE
from bridge.storage import incidents
from bridge.storage.audit import Change, log
from bridge.storage.database import Database
from bridge.storage.models import Incident


class Acknowledgements:
    """Incidents acknowledged by operators, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def acknowledge(self, incident_id: int, change: Change, now: datetime) -> Incident | None:
        """Acknowledge an open incident: no more repeats. None if there is no such
        incident; one acknowledged already is left as it is, and logs nothing."""
        with self.database.session() as session:
            incident, acknowledged = incidents.acknowledge(session, incident_id, change.actor, now)
            if incident is not None and acknowledged:
                name = incident.schedule_name or NO_SCHEDULE
                after = {"incident": incident.id, "kind": incident.kind}
                log(session, change, now, incident.periodic_task_id, name, after=after)
            return incident
