"""Runs an operator sends or stops by hand: a run now, a retry, a backfill, a cancel.

Each run is recorded before its message is published, as beat's are, and a
message that cannot be sent ends its record ``FAILURE``
(:mod:`bridge.service.sending`); a cancel records ``REVOKED`` with its reason
before the revoke is broadcast. Each leaves an audit entry. A manual run's
overlap is applied once, before anything is recorded: refused while a run
is open (``skip``), or the open runs revoked (``replace``). None of them
touches the schedule's row: its cursor, counters and breaker count
scheduled occurrences only.

The broker comes from the caller as a function that checks the app's broker
and hands it over (:class:`bridge.service.ports.Broker`), asked where a
refusal for a missing app or broker library belongs among the checks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from itertools import islice
from typing import Any

from bridge.clock import utcnow
from bridge.errors import RunSkipped, SendFailed, StateConflict, ValidationError
from bridge.rules.calendars import excluded_by
from bridge.rules.decisions import (
    Way,
    displaced,
    endable,
    first_at_or_after,
    manual_overlap,
    occurrences,
    overlap_way,
)
from bridge.rules.definition import check_note
from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus, Trigger
from bridge.rules.policy import Overlap, Policies, ReplaceWith
from bridge.rules.runs import Envelope, Payload, expires_at, new_run, run_id_for
from bridge.rules.timers import Timer, parse_timer
from bridge.rules.values import flag, required_instant, whole_number
from bridge.service import sending
from bridge.service.calendars import Calendars
from bridge.service.history import RETRIABLE, History
from bridge.service.ports import Broker
from bridge.service.readings import Readings
from bridge.service.views import Backfill, Run, Schedule
from bridge.storage.audit import Change
from bridge.storage.runs import Sent

#: Checks the app's broker and hands it over; raises when there is none to send with.
Sender = Callable[[], Broker]
#: The most occurrences one backfill sends: each is recorded and published while the
#: caller waits (a few milliseconds each), and a limit of billions kept a server's thread
#: and gigabytes of its memory for as long as the timer's occurrences were counted out.
BACKFILL_MAX = 10_000


class ManualRuns:
    """Runs sent, retried, backfilled and cancelled by hand (see the module docstring)."""

    def __init__(self, readings: Readings, history: History, calendars: Calendars) -> None:
        self.readings = readings
        self.store = readings.store
        self.history = history
        self.calendars = calendars

    def run(self, sender: Sender, name: str, overlap: str | None, actor: str) -> Run:
        """Send a run of ``name`` now (``trigger=manual``), as ``overlap`` allows."""
        broker = sender()
        mode = manual_overlap(overlap)
        schedule = self.readings.get(name)
        payload = _payload(schedule)
        # Random: no occurrence names a run sent now (a retry's id is its occurrence's).
        run_id = str(uuid.uuid4())
        self._make_way(broker, schedule, mode, "run", f"replaced by manual run {run_id}")
        now = utcnow()
        self.store.record_manual_run(
            new_run(
                schedule.id, schedule.task, now, Trigger.MANUAL, now, run_id, ends=payload.ends
            ),
            now,
            Change(actor, "run", None if overlap is None else f"overlap {mode.value}"),
            schedule.name,
        )
        self._send(broker, schedule, payload, run_id, now, Trigger.MANUAL, "run")
        return self.history.run(run_id)

    def cancel(
        self, sender: Sender, run_id: str, terminate: bool, note: str | None, actor: str
    ) -> Run:
        """End an open run ``REVOKED`` and revoke it on every worker; a run that has
        ended, or ends meanwhile, is refused."""
        flag("terminate", terminate)
        note = check_note(note)
        broker = sender()
        run = self.history.run(run_id)
        if RunStatus(run.status) not in NON_FINAL_STATUSES:
            raise StateConflict("run", run_id, f"a run that has not ended (it is {run.status})")
        reason = f"cancelled by {actor}" + (f": {note}" if note else "")
        if not sending.revoke(broker, self.store, [run_id], reason, terminate):
            ended = self.history.run(run_id)
            raise StateConflict("run", run_id, f"a run that has not ended (it is {ended.status})")
        if run.schedule is not None:
            change = Change(actor, "cancel" + (" (terminate)" if terminate else ""), note)
            self.store.note_action(run.schedule_id, run.schedule, change, utcnow(), run=run_id)
        return self.history.run(run_id)

    def retry(self, sender: Sender, run_id: str, actor: str) -> Run:
        """Send an ended run again as the next attempt of its occurrence; refused unless
        it ended one of :data:`~bridge.service.history.RETRIABLE` and is the latest."""
        broker = sender()
        run = self.history.run(run_id)
        if run.schedule is None or run.plan_time is None:
            raise ValidationError("run", run_id, "a run of a schedule")
        if RunStatus(run.status) not in RETRIABLE:
            expected = ", ".join(status.value for status in RETRIABLE)
            raise StateConflict("run", run_id, f"a run that ended {expected} (it is {run.status})")
        schedule = self.readings.get(run.schedule)
        attempt = run.attempt + 1
        retry_id = run_id_for(schedule.id, run.plan_time, attempt)
        now = utcnow()
        payload = _payload(schedule)
        record = new_run(
            schedule.id,
            schedule.task,
            run.plan_time,
            Trigger.MANUAL,
            now,
            retry_id,
            attempt,
            payload.ends,
        )
        if not self.store.record_if_new(record):
            raise StateConflict(
                "run", run_id, f"the latest attempt of its occurrence (run {retry_id} followed it)"
            )
        change = Change(actor, "retry")
        self.store.note_action(schedule.id, schedule.name, change, now, run=retry_id, of=run_id)
        self._send(broker, schedule, payload, retry_id, run.plan_time, Trigger.MANUAL, "retry")
        return self.history.run(retry_id)

    def backfill(
        self,
        sender: Sender,
        name: str,
        start: datetime | str,
        end: datetime | str,
        overlap: str,
        limit: int,
        actor: str,
    ) -> Backfill:
        """Record and send the occurrences of ``name``'s timer in [start, end] not recorded
        yet, none after now, none on a calendar it skips, at most ``limit`` of them."""
        broker = sender()
        now = utcnow()
        first, last = required_instant("from", start), required_instant("to", end)
        if last <= first:
            raise ValidationError("to", end, f"a time after from ({first.isoformat()})")
        if last > now:
            raise ValidationError(
                "to", end, "a time no later than now (later occurrences are beat's to send)"
            )
        limit = whole_number("limit", limit, high=BACKFILL_MAX)
        mode = manual_overlap(overlap)
        schedule = self.readings.get(name)
        timer = parse_timer(schedule.timer, schedule.timezone, schedule.anchor)
        if schedule.fixed_delay:
            raise ValidationError(
                "timer",
                schedule.timer,
                "a timer with fixed occurrences (a fixed-delay timer has none to backfill)",
            )
        plans = _occurrences(timer, first, last, limit, end)
        calendars = self.calendars.named(schedule.skip_calendars)
        on_calendars = {plan for plan in plans if excluded_by(calendars, plan) is not None}
        plans = [plan for plan in plans if plan not in on_calendars]
        payload = _payload(schedule)
        self._make_way(broker, schedule, mode, "backfill", "replaced by a backfill")
        sent: list[str] = []
        pruned = self.store.get(name).pruned_through
        for plan in plans:
            if pruned is not None and plan <= pruned:
                continue  # its record may have been pruned: it cannot be told from a new one
            record = new_run(
                schedule.id, schedule.task, plan, Trigger.BACKFILL, utcnow(), ends=payload.ends
            )
            if not self.store.record_if_new(record):
                continue
            self._send(broker, schedule, payload, record["id"], plan, Trigger.BACKFILL, "backfill")
            sent.append(record["id"])
        if sent:
            range_ = {"from": first.isoformat(), "to": last.isoformat(), "runs": len(sent)}
            change = Change(actor, "backfill")
            self.store.note_action(schedule.id, schedule.name, change, utcnow(), **range_)
        return Backfill(
            created=[Run.of(row, schedule.name) for row in self.store.runs(sent)],
            existing=len(plans) - len(sent),
            excluded=len(on_calendars),
        )

    def _make_way(
        self, broker: Broker, schedule: Schedule, overlap: Overlap, command: str, reason: str
    ) -> None:
        """Apply a manual run's overlap to the schedule's open runs: refuse, revoke or ignore."""
        open_runs = self.store.open_runs(schedule.id)
        way = overlap_way(overlap, open_runs)
        if way is Way.SKIP:
            blocking = open_runs[0]
            raise RunSkipped(command, schedule.name, blocking.id, blocking.status)
        if way is Way.REPLACE:
            replace_with = Policies.from_columns(schedule).replace_with
            ending = displaced(open_runs, replace_with)
            terminate = replace_with is ReplaceWith.TERMINATE
            sending.revoke(broker, self.store, ending, reason, terminate, endable(terminate))

    def _send(
        self,
        broker: Broker,
        schedule: Schedule,
        payload: Payload,
        run_id: str,
        plan_time: datetime,
        trigger: Trigger,
        command: str,
    ) -> None:
        """Publish a recorded run and mark it ``SENT``.

        A message that cannot be sent, whatever the reason, marks the record
        ``FAILURE`` instead, so that it does not stay ``PENDING`` and block
        the schedule's overlap check, and raises :class:`~bridge.errors.SendFailed`.
        """
        # A run sent by hand carries no expiry of the policy, only its options'.
        expires = expires_at(payload, utcnow(), None)
        try:
            sending.publish_or_fail(
                broker,
                self.store,
                payload,
                Envelope(run_id, schedule.id, schedule.name, plan_time, trigger, expires),
            )
        except sending.NotSent as exc:
            raise SendFailed(schedule.name, exc.reason, command) from exc
        self.store.mark_sent([Sent(schedule.id, run_id, expires)], utcnow())


def _payload(schedule: Schedule) -> Payload:
    return Payload.decode(
        schedule.task, schedule.args, schedule.kwargs, schedule.options, schedule.signature
    )


def _occurrences(
    timer: Timer, first: datetime, last: datetime, limit: int, given_end: Any
) -> list[datetime]:
    """The timer's occurrences in [first, last]; more than ``limit`` is refused before
    any is written, after looking at no more than ``limit + 1`` of them."""
    earliest = first_at_or_after(timer, first)
    found = [] if earliest is None else list(islice(occurrences(timer, earliest, last), limit + 1))
    if len(found) > limit:
        raise ValidationError(
            "to",
            given_end,
            f"a range of at most {limit} occurrences (it has more; raise --limit, up to "
            f"{BACKFILL_MAX}, or backfill it in parts)",
        )
    return found
