"""Incidents read for operators, and acknowledged with an audit entry in the same transaction.

Acknowledging stops an incident's alert being repeated (its recovery still
goes), so it is a change of what the on-call hears, and the audit log says
who made it and when, as it does for every other operator's change. The
entry belongs to the incident's schedule, or to none for an incident of the
scheduler.
"""

from __future__ import annotations

from datetime import datetime

from bridge.errors import IncidentNotFound
from bridge.rules import paging
from bridge.rules.audit import NO_SCHEDULE
from bridge.rules.values import whole_number
from bridge.service.views import IncidentRecord, Page
from bridge.storage import incidents
from bridge.storage.audit import Change, log
from bridge.storage.database import Database
from bridge.storage.incidents import IncidentStore


class Incidents:
    """Incidents listed and acknowledged by operators, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = IncidentStore(database)

    def page(self, open_only: bool, cursor: str | None, limit: int) -> Page[IncidentRecord]:
        """Incidents, newest first (``open_only``: those not closed), a page at a time."""
        limit = whole_number("limit", limit, high=paging.PAGE_MAX)
        before = None if cursor is None else paging.decode(cursor, (int,))[0]
        found = [IncidentRecord.of(i) for i in self.store.page(open_only, before, limit + 1)]
        return Page(found[:limit], paging.following(found, limit, lambda i: (i.id,)))

    def acknowledge(self, incident_id: int, change: Change, now: datetime) -> IncidentRecord:
        """Acknowledge an open incident: no more repeats; :class:`IncidentNotFound` if there
        is no such incident. One acknowledged already is left as it is, and logs nothing."""
        number = whole_number("incident", incident_id)
        with self.database.session() as session:
            incident, acknowledged = incidents.acknowledge(session, number, change.actor, now)
            if incident is not None and acknowledged:
                name = incident.schedule_name or NO_SCHEDULE
                after = {"incident": incident.id, "kind": incident.kind}
                log(session, change, now, incident.periodic_task_id, name, after=after)
        if incident is None:
            raise IncidentNotFound(number)
        return IncidentRecord.of(incident)
