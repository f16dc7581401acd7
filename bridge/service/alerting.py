"""Sending the alerts incidents owe to the user's alert task: one each, whoever sends.

Beat's watchdog sends every alert owed; the workers send those of the
scheduler's own incidents (no beat ticks), since no beat can. Each alert is
claimed for a short while (:data:`bridge.storage.incidents.CLAIM`), sent,
then marked sent: of several senders only the one holding the claim sends
it; one that cannot send gives the claim back, and one that dies holding it
leaves the alert to another once the claim lapses. So an alert is sent once,
and is never forgotten; a sender killed between sending and marking can
send it a second time, the one window left.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Celery

from bridge import broker
from bridge.clock import utcnow
from bridge.rules.alerts import alert_payload
from bridge.storage.incidents import IncidentStore

logger = logging.getLogger("bridge.alerts")

#: The most alerts one pass sends.
ALERTS_PER_PASS = 100


def send_alerts(
    app: Celery,
    incidents: IncidentStore,
    task: str,
    repeat: timedelta,
    scheduler_only: bool = False,
) -> int:
    """Send the alerts incidents owe to the alert ``task``; the number sent."""
    now = utcnow()
    sent = 0
    for incident in incidents.owed(now, repeat, ALERTS_PER_PASS, scheduler_only):
        event = incidents.claim(incident.id, now, repeat)
        if event is None:
            continue
        count = incident.alerts + (0 if event == "recovered" else 1)
        payload = {**alert_payload(incident, event, now), "alerts": count}
        try:
            broker.send_alert(app, task, payload)
        except Exception as exc:
            incidents.release(incident.id)
            logger.error(
                "bridge: could not send the %s alert of incident %d (%s); retrying",
                event,
                incident.id,
                exc,
            )
            continue
        incidents.sent(incident.id, event, now)
        logger.warning("bridge: alert %s: %s", event, payload["message"])
        sent += 1
    return sent
