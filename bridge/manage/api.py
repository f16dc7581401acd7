"""The typed Python API for managing schedules and reading their runs.

>>> from bridge import Bridge
>>> bridge = Bridge(app)
>>> bridge.add("report", task="workers.app.quick", timer="0 9 * * mon-fri",
...            timezone="Europe/Paris")

Every method checks its input completely before it writes, and raises
:class:`~bridge.errors.ValidationError` or :class:`~bridge.errors.ScheduleNotFound`.
The CLI is a thin layer over this class.

:class:`Bridge` is itself a façade over the services of :mod:`bridge.service`,
which check, read, change and return the views. It keeps what needs the
Celery app, which no service imports: the app's zone and registered tasks
(handed to the services that check a timer or a task), its configured
queues and their lengths, and the broker the runs sent by hand go through
(a :class:`~bridge.celery.broker.CeleryBroker`, handed to
:class:`~bridge.service.manual.ManualRuns` once the broker's library is
known to be there).
"""

from __future__ import annotations

import builtins
import getpass
import socket
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Unpack

from celery import Celery

from bridge.celery.broker import CeleryBroker, check_broker, queue_lengths
from bridge.clock import utcnow
from bridge.config import Settings
from bridge.errors import ValidationError
from bridge.rules import paging
from bridge.rules.calendars import Calendar
from bridge.rules.decisions import Forecast
from bridge.rules.health import State
from bridge.rules.policy import Overlap, PolicyFields
from bridge.rules.tokens import Role
from bridge.rules.values import flag, lookup_text, whole_number
from bridge.service import schema
from bridge.service.calendars import Calendars
from bridge.service.forecasts import MAX_FORECAST, NOTE_RUNNING_RUN, TIMELINE_FIRES, Forecasts
from bridge.service.history import History
from bridge.service.incidents import Incidents
from bridge.service.manual import ManualRuns
from bridge.service.ports import Broker
from bridge.service.readings import Readings
from bridge.service.schedules import Schedules
from bridge.service.tokens import Tokens
from bridge.service.views import (
    AuditRecord,
    Backfill,
    CalendarInfo,
    Gap,
    IncidentRecord,
    Instance,
    LabelRate,
    Page,
    Preview,
    Run,
    Schedule,
    SchedulerHealth,
    Stats,
    Status,
    Timeline,
    TimerGroup,
    Token,
    Worker,
    upcoming_json,
)
from bridge.service.watch import Watch
from bridge.storage.audit import Change
from bridge.storage.database import (
    Database,
    DatabaseError,
    database_for,
    error_reason,
    is_conflict,
)
from bridge.storage.overview import ENDED_COLUMNS, Overview
from bridge.storage.retention import Pruned
from bridge.storage.runs import RunsSeen
from bridge.version import __version__

#: The rows of a page when none is asked for.
PAGE_DEFAULT = 100
#: The states a list of schedules can be narrowed to (``ls --state``, the dashboard's
#: filter), and the filter of :meth:`Bridge.schedules` each one means.
STATE_FILTERS: dict[str, dict[str, bool]] = {
    "enabled": {"enabled": True},
    "paused": {"paused": True},
    "finished": {"finished": True},
    "broken": {"broken": True},
    "late": {"late": True},
    "failing": {"failing": True},
}


def default_actor(surface: str = "python") -> str:
    """Who changes schedules from this process, for the audit log: ``surface:user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "unknown"
    return f"{surface}:{user}@{socket.gethostname()}"


class Bridge:
    """Management of schedules, against the database the app's settings name."""

    def __init__(
        self,
        app: Celery | None = None,
        *,
        database_url: str | None = None,
        settings: Settings | None = None,
        actor: str | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or Settings.from_app(app)
        self.database: Database = database_for(database_url or self.settings.database_url)
        self._readings = Readings(self.database, self.settings)
        #: The schedules' gateway, through which the runs sent by hand are recorded.
        self.store = self._readings.store
        self.calendar_book = Calendars(self.database)
        self._schedules = Schedules(self.database, self._readings, self.calendar_book)
        self._forecasts = Forecasts(self.store, self.calendar_book)
        self._history = History(self.database, self.settings, self._readings)
        self._watch = Watch(self.database, self.settings, self.store, self._readings.health_store)
        self._incidents = Incidents(self.database)
        self._tokens = Tokens(self.database)
        self._manual = ManualRuns(self._readings, self._history, self.calendar_book)
        #: Who the audit log says made the changes of this object: ``cli:alice@host``, ...
        self.actor = actor or default_actor()

    def acting_as(self, actor: str) -> Bridge:
        """This bridge, with its changes logged as made by ``actor`` (a request's caller)."""
        other = object.__new__(Bridge)
        other.__dict__.update(self.__dict__, actor=actor)
        return other

    def _change(self, action: str, note: str | None = None) -> Change:
        return Change(self.actor, action, note)

    # -- schema -------------------------------------------------------------

    def migrate(self) -> tuple[str | None, str | None]:
        """Create or upgrade the bridge's tables; safe to repeat and to run concurrently.
        Returns the schema revision before (None: no tables) and after."""
        return schema.migrate(self.database)

    def check_schema(self) -> None:
        """Refuse (:class:`~bridge.storage.database.SchemaMismatch`, one line naming both
        revisions and what to run) when the store's schema is not one this release may
        run against: behind it, ahead of it, or missing."""
        self.database.require_schema(__version__)

    # -- changes --------------------------------------------------------------

    def add(
        self,
        name: str,
        *,
        task: str | None = None,
        timer: str,
        signature: Any = None,
        args: Any = (),
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        enabled: bool = True,
        anchor: datetime | None = None,
        allow_unknown_task: bool = False,
        labels: Sequence[str] | str = (),
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Create a schedule; its first run is the timer's first occurrence after now.

        ``policies`` are the scheduling policies (``overlap="allow"``,
        ``start=...``, ``max_failures=3``, ...; see :class:`~bridge.rules.policy.PolicyFields`);
        those left out take their defaults. The first run also respects
        ``start`` and ``end``: a combination with no occurrence to come is refused.

        ``signature`` sends a Celery canvas instead of ``task``: a signature with its
        options, a chain, a group or a chord (``chain(a.s(), b.s())``, or its JSON
        form), every task of which is checked as ``task`` is. One run covers it all.
        """
        return self._schedules.add(
            name,
            task=task,
            timer=timer,
            signature=signature,
            args=args,
            kwargs=kwargs,
            timezone=timezone,
            queue=queue,
            options=options,
            enabled=enabled,
            anchor=anchor,
            allow_unknown_task=allow_unknown_task,
            labels=labels,
            policies=policies,
            known_tasks=self.known_tasks,
            default_timezone=self.default_timezone,
            actor=self.actor,
        )

    def edit(
        self,
        name: str,
        *,
        task: str | None = None,
        timer: str | None = None,
        signature: Any = None,
        args: Any = None,
        kwargs: Any = None,
        timezone: str | None = None,
        queue: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        allow_unknown_task: bool = False,
        labels: Sequence[str] | str | None = None,
        **policies: Unpack[PolicyFields],
    ) -> Schedule:
        """Change the fields given; a field left out or given as None keeps its value.

        ``signature="none"`` makes a schedule that sends a canvas send its ``task``
        (given with it) alone again.

        A new timer, time zone, start or end moves the next run to the first
        occurrence after now that the new values allow; any other change
        leaves it. ``"none"`` clears an optional policy (``end="none"``). Values
        equal to the stored ones (or none given) write nothing: ``updated_at``
        stays as it was. ``labels`` replace the schedule's labels.
        """
        return self._schedules.edit(
            name,
            task=task,
            timer=timer,
            signature=signature,
            args=args,
            kwargs=kwargs,
            timezone=timezone,
            queue=queue,
            options=options,
            allow_unknown_task=allow_unknown_task,
            labels=labels,
            policies=policies,
            known_tasks=self.known_tasks,
            actor=self.actor,
        )

    def pause(self, name: str, note: str | None = None) -> Schedule:
        """Stop firing the schedule until it is resumed; ``note`` says why.

        A schedule that is not enabled (paused, broken or finished) takes a
        new note; without one, or with the note it has, pausing it again is
        refused and writes nothing.
        """
        return self._schedules.pause(name, note, self.actor)

    def resume(self, name: str, from_: str = "now") -> Schedule:
        """Fire the schedule again; clears the note, the broken flag, the breaker and retries.

        ``from_="now"`` restarts at the first occurrence after now (within the
        start/end bounds): what fell due while it was paused is not run.
        ``"catchup"`` restarts at the occurrence the schedule stopped at, so
        beat catches up the occurrences missed meanwhile as the schedule's
        catch-up policy says.
        """
        return self._schedules.resume(name, from_, self.actor)

    def pause_label(self, label: str, note: str | None = None) -> builtins.list[Schedule]:
        """Pause every enabled schedule carrying ``label``; the schedules paused.

        Each is paused as :meth:`pause` pauses it, with its own audit entry;
        those paused already are left as they are.
        """
        return self._schedules.pause_label(label, note, self.actor)

    def resume_label(self, label: str, from_: str = "now") -> builtins.list[Schedule]:
        """Resume every paused or broken schedule carrying ``label``; the schedules resumed.

        A finished schedule (no occurrence left) is left as it is.
        """
        return self._schedules.resume_label(label, from_, self.actor)

    def remove(self, name: str) -> None:
        """Delete the schedule and, by cascade, its runs."""
        self._schedules.remove(name, self.actor)

    def run(self, name: str, overlap: str | None = None) -> Run:
        """Send a run now (``trigger=manual``), whatever the timer says.

        ``overlap`` says what to do while a run of the schedule is open:
        ``allow`` (default) sends anyway, ``skip`` refuses with
        :class:`~bridge.errors.RunSkipped`, ``replace`` revokes the open runs
        first. The schedule's next run, remaining runs and breaker are not
        changed: they count scheduled occurrences only.
        """
        return self._manual.run(self._sender, name, overlap, self.actor)

    def cancel(self, run_id: str, *, terminate: bool = False, note: str | None = None) -> Run:
        """End an open run ``REVOKED`` and revoke its message on every worker.

        A run not yet started is discarded by the worker that receives it.
        One already executing is ended there with SIGTERM when ``terminate``
        (the prefork pool only); otherwise it carries on, and what it reports
        is not recorded: the run is final. ``note`` goes into the record's
        reason and the audit log. A run that has ended is refused.
        """
        return self._manual.cancel(self._sender, run_id, terminate, note, self.actor)

    def retry(self, run_id: str) -> Run:
        """Send a run that ended FAILURE, LOST or REVOKED again, as the next attempt of its
        occurrence (``trigger=manual``), with the schedule's current definition.

        Only the latest attempt of an occurrence can be retried, so a retry
        asked twice sends once. Like :meth:`run`, it leaves the schedule's
        cursor, counters and breaker alone.
        """
        return self._manual.retry(self._sender, run_id, self.actor)

    def retriable(self, runs: Sequence[Run]) -> set[str]:
        """The ids of those of ``runs`` that :meth:`retry` would send again: ended FAILURE,
        LOST or REVOKED, and still the latest attempt of their occurrence (a page that
        lists an attempt a retry replaced offers no retry of it, which would be refused)."""
        return self._history.retriable(runs)

    def backfill(
        self,
        name: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str = Overlap.ALLOW.value,
        limit: int = 100,
    ) -> Backfill:
        """Record and send the occurrences of the timer from ``start`` to ``end``, both included.

        Each run has ``trigger=backfill`` and the id a scheduled run of its
        occurrence has, so an occurrence already recorded (by beat or by an
        earlier backfill) is counted in ``existing`` and not sent again:
        repeating a backfill is safe. Nor is an occurrence at or before the
        schedule's ``pruned_through``, whose record retention may have
        deleted. ``end`` may not be later than now; later occurrences are
        beat's to send. A range of more than ``limit``
        occurrences is refused with nothing written. ``overlap`` is checked
        once, before the first run: ``allow`` (default), ``skip`` or
        ``replace``, as for :meth:`run`. The schedule's row (next run,
        counters, remaining runs, breaker) is not changed.
        """
        return self._manual.backfill(self._sender, name, start, end, overlap, limit, self.actor)

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Schedule:
        """The schedule called ``name``, with its health."""
        return self._readings.get(name)

    def named(self, names: Collection[str]) -> builtins.list[Schedule]:
        """The schedules called ``names`` that exist, by name, each with its health judged:
        one read for them all, for a page of them that another listing chose."""
        return self._readings.named(names)

    def list(self) -> builtins.list[Schedule]:
        """Every schedule, by name, with its health."""
        return self._readings.every()

    def health_of(self, row: Any, seen: RunsSeen, now: datetime) -> State:
        """The health of the schedule ``row`` (columns or a mapping) from ``seen``, its own
        limits falling back on the app's."""
        return self._readings.health_of(row, seen, now)

    def schedules(
        self,
        *,
        prefix: str | None = None,
        task: str | None = None,
        enabled: bool | None = None,
        paused: bool | None = None,
        broken: bool | None = None,
        failing: bool | None = None,
        label: str | None = None,
        late: bool | None = None,
        finished: bool | None = None,
        sort: str = "name",
        cursor: str | None = None,
        limit: int = PAGE_DEFAULT,
        now: datetime | None = None,
    ) -> Page[Schedule]:
        """One page of schedules, filtered, by name or by next run, and the next page's cursor.

        ``prefix`` keeps the names starting with it; ``late`` the enabled
        schedules due for longer than ``bridge_default_grace``; ``failing``
        the enabled ones whose latest occurrence failed; ``paused`` those
        someone paused, ``finished`` those beat disabled with nothing left to
        fire. ``sort="next"`` lists the enabled schedules that have a next
        run, soonest first. ``cursor`` is the ``next`` of the page before.
        """
        return self._readings.page(
            prefix=prefix,
            task=task,
            enabled=enabled,
            paused=paused,
            broken=broken,
            failing=failing,
            label=label,
            late=late,
            finished=finished,
            sort=sort,
            cursor=cursor,
            limit=limit,
            now=now,
        )

    @property
    def grace(self) -> timedelta:
        """How long a schedule may be due before it counts as late."""
        return self._watch.grace

    def runs(
        self,
        name: str | None = None,
        *,
        status: str | Sequence[str] | None = None,
        trigger: str | Sequence[str] | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        cursor: str | None = None,
        limit: int = PAGE_DEFAULT,
    ) -> Page[Run]:
        """One page of runs, newest occurrence first and its latest attempt first: of the
        schedule ``name``, or of every schedule; filtered by status, trigger and a range
        of plan times (``since`` included, ``until`` not). ``cursor`` is the ``next`` of
        the page before."""
        return self._history.runs(
            name,
            status=status,
            trigger=trigger,
            since=since,
            until=until,
            cursor=cursor,
            limit=limit,
        )

    def run_info(self, run_id: str) -> Run:
        """One run, with its error and traceback; :class:`~bridge.errors.RunNotFound` if none."""
        return self._history.run(run_id)

    def stats(
        self, name: str, window: str | float | timedelta = "1d", now: datetime | None = None
    ) -> Stats:
        """The schedule over the last ``window`` (``'1h'``, ``'7d'``, seconds): runs by status,
        success rate, occurrences skipped and missed, alerts, and the durations and start
        delays (p50, p95, max) of its latest runs.

        The counts come from the schedule's hourly tallies, which pruning does not
        touch: they cover whole hours, from the hour ``window`` ago falls in. The
        durations and delays come from the runs still recorded in the window.
        """
        return self._history.stats(name, window, now)

    def status(self, now: datetime | None = None) -> Status:
        """The beat instances and workers, the due rows nobody holds and the worst lateness."""
        return self._watch.status(now)

    def health(
        self, beat_timeout: float | None = None, now: datetime | None = None
    ) -> SchedulerHealth:
        """Whether a beat ticked within ``beat_timeout`` seconds (default: the lease, past
        which its rows are taken over anyway) and the schema is one this release runs
        against."""
        return self._watch.health(beat_timeout, now)

    # -- incidents, silence, retention ---------------------------------------------------

    def incidents(
        self, *, open_only: bool = False, cursor: str | None = None, limit: int = PAGE_DEFAULT
    ) -> Page[IncidentRecord]:
        """Incidents, newest first (``open_only``: those not closed)."""
        return self._incidents.page(open_only, cursor, limit)

    def acknowledge(self, incident_id: int) -> IncidentRecord:
        """Acknowledge an incident: its alert is not repeated (its recovery still goes). The
        audit log records it (``acknowledge``, naming the incident and its kind) in the
        incident's schedule's trail; acknowledging it again changes and logs nothing."""
        return self._incidents.acknowledge(incident_id, self._change("acknowledge"), utcnow())

    # -- named tokens and dashboard sessions (the HTTP server's) ----------------------------

    def create_token(self, name: str, role: str, expires: str | None = None) -> tuple[Token, str]:
        """Make a named token of ``role`` (``read`` or ``admin``) that works until
        ``expires`` (a duration such as ``90d``; None: until revoked). Returns it and its
        secret, which the store does not keep: this is the one time it can be shown. The
        audit log records it (``create token``), naming the token and its role."""
        return self._tokens.create(name, role, expires, self._change("create token"))

    def tokens(self) -> builtins.list[Token]:
        """Every named token, revoked and expired ones too, by name."""
        return self._tokens.every()

    def revoke_token(self, name: str) -> Token:
        """Stop the token ``name`` working, and end the dashboard sessions it began. The
        audit log records it (``revoke token``) unless the token was revoked already."""
        return self._tokens.revoke(name, self._change("revoke token"))

    def token_holder(self, secret: str) -> Token | None:
        """The named token whose secret is ``secret``, while it works (not revoked, not
        expired); None otherwise."""
        return self._tokens.holder(secret)

    def begin_session(self, role: Role, token: Token | None, lifetime: timedelta) -> str:
        """Record a dashboard session of ``role``, begun with the named ``token`` (None: a
        settings token), for ``lifetime`` or until the token expires. Returns the session's
        secret, for the browser's cookie; the store keeps its digest."""
        return self._tokens.begin_session(role, token, lifetime)

    def session(self, secret: str) -> tuple[Role, Token | None] | None:
        """The role of the dashboard session ``secret`` and its named token (None: a settings
        token's session), while the session and its token last; None once either ended."""
        return self._tokens.session(secret)

    def end_session(self, secret: str) -> None:
        """End a dashboard session (sign-out): its cookie no longer signs anyone in."""
        self._tokens.end_session(secret)

    def silence(self, name: str, for_: str | float | timedelta | None = None) -> Schedule:
        """Send no alert about the schedule for ``for_`` (a duration), or until
        :meth:`unsilence` when None. Its incidents are still recorded."""
        return self._schedules.silence(name, for_, self.actor)

    def unsilence(self, name: str) -> Schedule:
        """Send the schedule's alerts again."""
        return self._schedules.unsilence(name, self.actor)

    def prune(self, dry_run: bool = False) -> Pruned:
        """Prune every schedule's old final runs now, as beat's watchdog does over time
        (see :mod:`bridge.storage.retention`): every schedule's final runs are counted,
        a slice at a time, and those that hold runs to delete are pruned to their limits;
        with ``dry_run``, what would go is counted only."""
        return self._history.prune(dry_run)

    def health_counts(self, now: datetime | None = None) -> dict[str, int]:
        """How many schedules are in each health state (see
        :meth:`bridge.storage.health.HealthStore.counts` and
        :func:`bridge.rules.health.states_counted`)."""
        return self._watch.health_counts(now)

    def recent_statuses(
        self, schedule_ids: Sequence[int], count: int = 20
    ) -> dict[int, builtins.list[tuple[str, str]]]:
        """The plan times and statuses of each schedule's latest ``count`` runs, oldest
        first, each time ISO 8601 text in UTC to the second (``2026-01-31T09:00:00Z``): what
        the dashboard's list shows in its strips."""
        return self._history.recent_statuses(schedule_ids, count)

    def gaps(self, name: str, since: datetime, limit: int = 100) -> builtins.list[Gap]:
        """The hours since ``since`` in which the schedule skipped or missed occurrences, with
        how many of each, newest first (at most ``limit``): what a run's history does not
        show, from the hourly tallies."""
        return self._history.gaps(name, since, limit)

    def timeline(
        self, span: timedelta = timedelta(hours=24), now: datetime | None = None
    ) -> Timeline:
        """When the enabled schedules fire over the next ``span``, gathered by timer and zone.

        Schedules that share a timer, a zone and the calendars they skip fire
        together: each group is given with how many schedules it holds and its
        timer's occurrences from the soonest next run among them, less those on
        its calendars (an interval's phase is that schedule's; start and end
        bounds, jitter and open runs of each schedule are not applied). The
        :data:`~bridge.service.forecasts.TIMELINE_GROUPS` largest groups are given, until
        :data:`TIMELINE_FIRES` occurrences are worked out: the timer that spends
        the last of them is cut short (``more``), those after it are left out.
        """
        return self._forecasts.timeline(span, now)

    def label_rates(
        self, window: str | float | timedelta = "7d", now: datetime | None = None
    ) -> builtins.list[LabelRate]:
        """Each label's runs that ended over the last ``window`` (the hourly tallies of its
        schedules, from the hour ``window`` ago falls in), by status, with their success
        rate; by label, the first :data:`~bridge.service.history.LABELS_RATED` with any run."""
        return self._history.label_rates(window, now)

    def overview(self, now: datetime | None = None) -> Overview:
        """What the metrics show: the first ``bridge_metrics_max_schedules`` schedules by
        name with their counters, and the totals of every schedule."""
        return self._watch.overview(now)

    def audit(
        self, name: str | None = None, *, cursor: str | None = None, limit: int = PAGE_DEFAULT
    ) -> Page[AuditRecord]:
        """The audit log, newest first: every change to the schedule ``name`` (deleted or
        not), or to every schedule."""
        return self._history.audit(name, cursor, limit)

    def history(self, name: str, limit: int = 20) -> builtins.list[Run]:
        """The schedule's runs, newest first."""
        return self.runs(name, limit=whole_number("limit", limit, high=paging.PAGE_MAX)).items

    def forecast(self, name: str, count: int = 5, now: datetime | None = None) -> Forecast:
        """The next ``count`` runs beat will send for the schedule, as it will send them.

        The same rules beat applies (see :func:`bridge.rules.decisions.forecast`):
        start and end bounds, remaining runs, jitter (each run's window and
        its exact time), an owed retry or held occurrence, and what beat will
        catch up of occurrences already overdue. ``end`` says why no more
        follow: the schedule is paused, broken or finishes, waits for an open
        run to end, or has a fixed delay, whose later runs depend on when
        each run completes.
        """
        return self._forecasts.forecast(name, count, now)

    def preview(
        self, timer: str, timezone: str | None = None, count: int = 5, now: datetime | None = None
    ) -> Preview:
        """The first ``count`` occurrences after now of a timer not saved yet, read in
        ``timezone`` (the app's when None or empty), with the zone read in: what the
        dashboard's form shows while they are typed. Refused as :meth:`add` refuses them
        (``timer``, ``timezone``). An interval counts from now; a fixed delay's later runs
        depend on when each ends, so only its first is given."""
        return self._forecasts.preview(timer, timezone, count, now, self.default_timezone)

    def next_runs(
        self, name: str, count: int = 5, now: datetime | None = None
    ) -> builtins.list[datetime]:
        """When beat will send the schedule's next ``count`` runs (see :meth:`forecast`)."""
        return [run.fire_at for run in self.forecast(name, count, now).runs]

    # -- calendars ------------------------------------------------------------------------

    def add_calendar(
        self,
        name: str,
        *,
        dates: Sequence[str] | str | None = None,
        ranges: Sequence[str] | str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        replace: bool = False,
    ) -> CalendarInfo:
        """Make the calendar ``name`` of exactly one of ``dates`` (``YYYY-MM-DD``, whole
        days), ``ranges`` (``START/END``, dates or local times) or ``cron`` (the minutes a
        cron expression matches), read in ``timezone`` (the app's when None); with
        ``replace``, over the calendar of that name, whose schedules skip the new days
        from their next occurrence. See :mod:`bridge.rules.calendars`."""
        flag("replace", replace)
        calendar = self.build_calendar(
            name, dates=dates, ranges=ranges, cron=cron, timezone=timezone
        )
        self.save_calendar(calendar, replace)
        return self.calendar(calendar.name)

    def build_calendar(
        self,
        name: Any,
        *,
        dates: Any = None,
        ranges: Any = None,
        cron: Any = None,
        timezone: Any = None,
    ) -> Calendar:
        """The calendar :meth:`add_calendar` would make, checked; nothing is written."""
        return self.calendar_book.build(
            name,
            dates=dates,
            ranges=ranges,
            cron=cron,
            timezone=timezone,
            default_timezone=self.default_timezone,
        )

    def save_calendar(self, calendar: Calendar, replace: bool) -> None:
        """Write a calendar :meth:`build_calendar` checked (over the one of its name with
        ``replace``), audited."""
        self.calendar_book.save(calendar, replace, utcnow(), self._change("save calendar"))

    def calendars(self) -> builtins.list[CalendarInfo]:
        """Every calendar, by name, with the schedules that skip it; one changed with SQL
        into something unreadable is left out (``calendar`` names the problem, ``remove``
        removes it)."""
        return self.calendar_book.infos()

    def calendar(self, name: str) -> CalendarInfo:
        """The calendar ``name``; :class:`~bridge.errors.CalendarNotFound` if none."""
        return self.calendar_book.info(name)

    def remove_calendar(self, name: str) -> None:
        """Delete the calendar ``name``; refused (:class:`~bridge.errors.CalendarInUse`)
        while a schedule skips it."""
        change = self._change("remove calendar")
        self.calendar_book.remove(lookup_text("name", name), utcnow(), change)

    def calendar_names(self) -> set[str]:
        """The names of every calendar: what a schedule's ``skip_calendars`` may list."""
        return self.calendar_book.names()

    # -- the app's defaults ----------------------------------------------------------

    def default_timezone(self) -> str:
        """The zone of a schedule that names none: the app's ``timezone``, else UTC."""
        return (self.app.conf.timezone if self.app is not None else None) or "UTC"

    def known_tasks(self) -> Collection[str] | None:
        """The app's registered task names (None without an app: any name is taken)."""
        if self.app is None:
            return None
        self.app.loader.import_default_modules()
        return set(self.app.tasks.keys())

    def queues(self) -> builtins.list[str]:
        """The queues the schedules send to: the app's configured queues (its default
        among them) and those the schedules' options name. A read of every schedule's
        options that mention a queue: callers that ask often keep the answer a while."""
        configured = set(self.app.amqp.queues) if self.app is not None else set()
        return self._readings.queues(configured)

    def queue_lengths(self, queues: Collection[str] | None = None) -> dict[str, int | None]:
        """Messages waiting in each of ``queues`` (:meth:`queues` when None), by queue;
        None where the broker does not answer (see :func:`bridge.celery.broker.queue_lengths`).
        Empty without an app."""
        if self.app is None:
            return {}
        return queue_lengths(self.app, sorted(self.queues() if queues is None else queues))

    # -- helpers -------------------------------------------------------------------

    def _sender(self) -> Broker:
        """The broker to send with, its library known to be there before anything is
        written."""
        if self.app is None:
            raise ValidationError("app", None, "a Celery app to send the run with")
        check_broker(self.app)
        return CeleryBroker(self.app)


#: The API, and what the front ends (the CLI, the web server) need of the layers below it:
#: the views and the services' limits, the storage's errors and a metrics scrape's values.
#: They take those from here and import nothing of ``bridge.service`` or
#: ``bridge.storage`` (a contract in pyproject.toml).
__all__ = [
    "ENDED_COLUMNS",
    "MAX_FORECAST",
    "NOTE_RUNNING_RUN",
    "TIMELINE_FIRES",
    "AuditRecord",
    "Backfill",
    "Bridge",
    "CalendarInfo",
    "DatabaseError",
    "Gap",
    "Instance",
    "LabelRate",
    "Overview",
    "Page",
    "Preview",
    "Run",
    "RunsSeen",
    "Schedule",
    "Stats",
    "Status",
    "Timeline",
    "TimerGroup",
    "Token",
    "Worker",
    "error_reason",
    "is_conflict",
    "upcoming_json",
]
