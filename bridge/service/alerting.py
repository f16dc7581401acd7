"""Sending the alerts incidents owe to the user's alert task and alert URLs: one each,
whoever sends.

Beat's watchdog sends every alert owed; the workers send those of the
scheduler's own incidents (no beat ticks), since no beat can. Each alert is
claimed for a short while (:data:`bridge.storage.incidents.CLAIM`), sent,
then marked sent: of several senders only the one holding the claim sends
it; one that cannot send holds it back for a while (below), and one that dies
holding it leaves the alert to another once the claim lapses. So an alert is sent once,
and is never forgotten; a sender killed between sending and marking can
send it a second time, the one window left.

The alert URLs (``bridge_alert_urls``, :mod:`bridge.notify`) and the alert
task are each a target of the alert. When one refuses, the others have it at
once; the incident keeps which have it (``alert_sent_to``, for this very
alert) and says which refused (``alert_error``), and the alert is tried again
for the rest after a backoff that grows with the attempts
(:func:`bridge.rules.alerts.retry_after`), until :data:`ATTEMPTS` tries, when
the refusing ones are given up on and the alert counts as sent. So every
target gets each alert once, and one that is down holds up no other; the
watchdog runs apart from beat's fires, which it never holds up.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from bridge.clock import utcnow
from bridge.config import Settings
from bridge.notify import Notifier, alert_urls
from bridge.rules.alerts import alert_payload, retry_after, title
from bridge.service.ports import Broker
from bridge.storage.incidents import IncidentStore

logger = logging.getLogger("bridge.alerts")

#: The most alerts one pass sends.
ALERTS_PER_PASS = 100


def notifier_of(settings: Settings) -> Notifier | None:
    """The notifier of the app's alert URLs (None: none are set); refused in one line
    naming ``bridge_alert_urls`` when Apprise is missing or cannot read one."""
    urls = alert_urls(settings.alert_urls)
    return Notifier(urls) if urls else None


def send_alerts(
    broker: Broker,
    incidents: IncidentStore,
    task: str,
    repeat: timedelta,
    scheduler_only: bool = False,
    notifier: Notifier | None = None,
) -> int:
    """Send the alerts incidents owe to the alert ``task`` (if any) and the URLs of
    ``notifier`` (if any); the number sent to all of them."""
    if not task and notifier is None:
        return 0  # nothing to send with here (a worker without the alerts extra)
    now = utcnow()
    sent = 0
    for incident in incidents.owed(now, repeat, ALERTS_PER_PASS, scheduler_only):
        event = incidents.claim(incident.id, now, repeat)
        if event is None:
            continue
        count = incident.alerts + (0 if event == "recovered" else 1)
        payload = {**alert_payload(incident, event, now), "alerts": count}
        # The targets that have this very alert already, from an earlier try.
        key = f"{event}#{count}"
        done = delivered(incident.alert_sent_to, key)
        failed: list[str] = []
        if notifier is not None:
            urls = {int(target) for target in done if target.isdigit()}
            delivery = notifier.notify(title(payload), payload["message"], urls)
            done |= {str(index) for index in delivery.delivered}
            failed += delivery.failed
        if task and TASK not in done:
            try:
                broker.send_alert(task, payload)
                done.add(TASK)
            except Exception as exc:
                logger.error("bridge: the alert task refused an alert (%s)", type(exc).__name__)
                failed.append("the alert task")
        if failed:
            error = f"{', '.join(failed)} refused the {event} alert"
            attempts = incident.alert_attempts + 1
            if attempts < ATTEMPTS:
                until = now + retry_after(attempts)
                incidents.defer(incident.id, until, error, delivered_text(key, done))
                logger.error(
                    "bridge: incident %d: %s (attempt %d); trying again later",
                    incident.id,
                    error,
                    attempts,
                )
                continue
            # Given up on: the targets that have it are not held back by one that never will.
            incidents.sent(incident.id, event, now, f"{error}; gave up after {attempts} attempts")
            logger.error("bridge: incident %d: %s; gave up after %d", incident.id, error, attempts)
            continue
        incidents.sent(incident.id, event, now)
        logger.warning("bridge: alert %s: %s", event, payload["message"])
        sent += 1
    return sent


#: What ``incident.alert_sent_to`` names the alert task by, beside the URLs' positions.
TASK = "task"
#: The tries at one alert before the targets that refuse it are given up on: about half
#: an hour of the backoff.
ATTEMPTS = 12


def delivered(sent_to: str | None, key: str) -> set[str]:
    """The targets ``incident.alert_sent_to`` says have the alert ``key`` (none when it
    names another alert: each alert goes to every target)."""
    if not sent_to or not sent_to.startswith(f"{key}:"):
        return set()
    return {target for target in sent_to.removeprefix(f"{key}:").split(",") if target}


def delivered_text(key: str, done: set[str]) -> str:
    """``incident.alert_sent_to`` for the targets ``done`` that have the alert ``key``."""
    return f"{key}:{','.join(sorted(done))}"
