"""The tables of the bridge.

``periodic_task`` (schedules) and ``task_execution`` (runs) are the
project's contract: their names and the meaning of their columns are fixed
(see ``docs/design.md``). ``schedule_label`` holds each schedule's labels,
``audit_log`` every change made to a schedule by an operator or a sync
and every named token made or revoked,
``beat_instance`` and ``worker_instance`` the heartbeats of beat
instances and of workers, ``schema_release`` the oldest release that
may run against the store, ``api_token`` the named tokens of the HTTP
server and ``dashboard_session`` the dashboard's sessions. The Alembic
revisions under ``migrations/`` create exactly what is declared here.

MySQL and MariaDB have no partial index: there the indexes declared with a
``WHERE`` are left out (``ddl_if``), but for ``ix_incident_open``, whose
uniqueness the store relies on, which revision 0008 builds on a generated
column instead (see :class:`Incident`), and ``ix_periodic_task_trouble``,
which revision 0015 builds on a generated column ``troubled`` that the
model leaves out too (read by ``bridge.storage.health`` alone). Their column types are the ones
:mod:`bridge.storage.mysql` gives.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from bridge.rules.kinds import NON_FINAL_STATUSES, RunStatus, Source

#: The runs that have not ended, as SQL: the predicate of ``ix_task_execution_open``, which
#: a query must repeat as it is, with its values written out, for the index to serve it
#: (PostgreSQL cannot prove a bound parameter matches; SQLite compares the text).
OPEN_RUNS = "status IN ({})".format(
    ", ".join(f"'{status.value}'" for status in RunStatus if status in NON_FINAL_STATUSES)
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones, so the value
    is stored as naive UTC text in one fixed format, which keeps string
    comparison in ``WHERE nextrun <= :now`` correct. MySQL's ``DATETIME`` has
    no time zone either: it holds the naive UTC time.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given; the bridge stores aware UTC times")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is UTC:  # PostgreSQL's, read in UTC
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _partial_indexes(
    ddl: Any,
    target: Any,
    bind: Any,
    tables: Any = None,
    state: Any = None,
    *,
    dialect: Dialect,
    compiler: Any = None,
    checkfirst: bool = False,
) -> bool:
    """Whether the database takes an index with a ``WHERE`` (MySQL and MariaDB do not)."""
    return dialect.name != "mysql"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PeriodicTask(Base):
    """One schedule."""

    __tablename__ = "periodic_task"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    task: Mapped[str] = mapped_column(String(200))
    #: JSON text; kept as text so that a malformed value written straight into
    #: the table reaches the scheduler as a bad row rather than a driver error.
    args: Mapped[str] = mapped_column(Text, default="[]")
    kwargs: Mapped[str] = mapped_column(Text, default="{}")
    options: Mapped[str] = mapped_column(Text, default="{}")
    #: A Celery canvas in Celery's JSON form, sent instead of ``task`` alone (0021).
    signature: Mapped[str | None] = mapped_column(Text, nullable=True)
    timer: Mapped[str] = mapped_column(String(200))
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    #: Origin of an interval timer's grid (``anchor + k * interval``).
    anchor: Mapped[datetime] = mapped_column(UTCDateTime)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    nextrun: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Id of the beat instance holding the mark (lease), and when it took it.
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    marked: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    #: The first occurrence of the timer not yet handled; ``nextrun`` is when
    #: beat next acts on the row, which jitter, a retry or a held run can move.
    next_occurrence: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    # Policies (see bridge.rules.policy.Policies, which reads and writes these).
    overlap: Mapped[str] = mapped_column(String(16), default="skip")
    catchup: Mapped[str] = mapped_column(String(16), default="latest")
    catchup_window: Mapped[float | None] = mapped_column(Float, nullable=True)
    jitter: Mapped[float] = mapped_column(Float, default=0.0)
    start_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    end_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    remaining: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_failures: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_attempts: Mapped[int] = mapped_column(Integer, default=1)
    backoff: Mapped[str | None] = mapped_column(String(200), nullable=True)
    expires: Mapped[str] = mapped_column(String(32), default="next")
    #: The watchdog's limits (seconds; None: the app's default) and what it does on overrun.
    grace: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_runtime: Mapped[float | None] = mapped_column(Float, nullable=True)
    on_overrun: Mapped[str] = mapped_column(String(16), default="none")
    #: How overlap ``replace`` ends the open runs: ``terminate`` or ``revoke``.
    replace_with: Mapped[str] = mapped_column(String(16), default="terminate")
    #: Failures in a row before it is failing, successes in a row before it recovers;
    #: NULL: the app's ``bridge_default_alert_after`` and ``bridge_default_recover_after``.
    alert_after: Mapped[int | None] = mapped_column(Integer, nullable=True)
    recover_after: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: Retention of its final runs (None: the app's default; 0: no limit).
    keep_runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    keep_days: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: No alert is sent for the schedule until then (the far future: until unsilenced).
    silenced_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: The names of the calendars its occurrences are not sent on, separated by commas.
    skip_calendars: Mapped[str | None] = mapped_column(Text, nullable=True)

    # Policy state.
    #: The occurrence held by overlap ``buffer_one`` until the running run ends.
    held: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: The next attempt owed to a failed occurrence: its plan time, number and due time.
    retry_plan: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    retry_attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Consecutive failed scheduled occurrences, for the breaker.
    failure_streak: Mapped[int] = mapped_column(Integer, default=0)
    #: Since when it is failing (its ``alert_after``-th failure in a row), and the
    #: successes in a row since; NULL and 0 while it is not failing.
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    success_streak: Mapped[int] = mapped_column(Integer, default=0)

    source: Mapped[str] = mapped_column(String(16), default=Source.API.value)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: What the schedule is for, in words (an import keeps the source's description).
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    broken: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    last_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    total_run_count: Mapped[int] = mapped_column(Integer, default=0)
    skipped_count: Mapped[int] = mapped_column(Integer, default=0)
    missed_count: Mapped[int] = mapped_column(Integer, default=0)
    #: Occurrences not sent because they fell on one of its calendars.
    excluded_count: Mapped[int] = mapped_column(Integer, default=0)
    #: Runs whose message expired before a worker started them.
    expired_count: Mapped[int] = mapped_column(Integer, default=0)
    #: Runs ended, by final status, whatever their trigger: kept on the row so that
    #: the counts and the metrics read one row, and outlive pruned records.
    success_count: Mapped[int] = mapped_column(Integer, default=0)
    failure_count: Mapped[int] = mapped_column(Integer, default=0)
    revoked_count: Mapped[int] = mapped_column(Integer, default=0)
    lost_count: Mapped[int] = mapped_column(Integer, default=0)
    #: Seconds the ended runs ran in all (those with a runtime).
    runtime_total: Mapped[float] = mapped_column(Float, default=0.0)
    #: When a run of the schedule last ended SUCCESS, and FAILURE or LOST.
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_failure_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Alerts sent about the schedule (openings and repeats).
    alert_count: Mapped[int] = mapped_column(Integer, default=0)
    #: The latest occurrence whose runs retention may have deleted: a backfill does
    #: not send an occurrence up to it again, since its record may be gone.
    pruned_through: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    #: The schedule's labels. Never loaded on its own (beat has no use for them): the
    #: management side asks for them with the rows it reads.
    label_rows: Mapped[list[ScheduleLabel]] = relationship(
        lazy="raise",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="ScheduleLabel.label",
    )

    __table_args__ = (
        # The due query: enabled rows ordered by nextrun.
        Index("ix_periodic_task_due", "enabled", "nextrun"),
        # Names by prefix on PostgreSQL, whatever the database's collation (LIKE 'p%'
        # uses the name's own index only under the C collation).
        Index(
            "ix_periodic_task_name_pattern",
            "name",
            postgresql_ops={"name": "varchar_pattern_ops"},
        ).ddl_if(dialect="postgresql"),
        # The few schedules in trouble the watchdog looks at: failing or broken.
        Index(
            "ix_periodic_task_trouble",
            "id",
            postgresql_where=text("failing_since IS NOT NULL OR broken"),
            sqlite_where=text("failing_since IS NOT NULL OR broken"),
        ).ddl_if(callable_=_partial_indexes),
    )

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels, sorted (their rows must have been loaded with the schedule)."""
        return tuple(row.label for row in self.label_rows)

    @labels.setter
    def labels(self, labels: tuple[str, ...]) -> None:
        kept = {row.label: row for row in self.label_rows}
        self.label_rows = [kept.get(label) or ScheduleLabel(label=label) for label in labels]


class TaskExecution(Base):
    """One run: an occurrence of a schedule, a manual trigger, or an opted-in foreign task."""

    __tablename__ = "task_execution"

    #: The Celery task id of the run.
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    periodic_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("periodic_task.id", ondelete="CASCADE"), nullable=True
    )
    task: Mapped[str] = mapped_column(String(200))
    plan_time: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    trigger: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: When the run's message expires (None: never), set when it is sent. A run
    #: still ``SENT`` past it was dropped by the broker or will be by the worker.
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: When the status last changed; what staleness is measured from.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    runtime: Mapped[float | None] = mapped_column(Float, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    traceback: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The OpenTelemetry trace of the run, from beat's span ``bridge.fire`` (32 hex
    #: digits; None: not traced).
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: Of a run of a canvas, how many of the tasks that end it have yet to succeed
    #: (None: a run of one task) (0021).
    canvas_left: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (
        # One record per occurrence, whoever writes it. On PostgreSQL migration 0022 makes
        # its index carry the status (INCLUDE), so that the dashboard's strips are read from
        # the index alone. Not said here: SQLAlchemy 2.0.30, the oldest allowed, refuses it.
        UniqueConstraint("periodic_task_id", "plan_time", "attempt"),
        # The non-final check and the history listing.
        Index("ix_task_execution_schedule_status", "periodic_task_id", "status"),
        # Each schedule's open runs alone, read by beat for every row it fires (0010).
        Index(
            "ix_task_execution_open",
            "periodic_task_id",
            "updated_at",
            postgresql_where=text(OPEN_RUNS),
            sqlite_where=text(OPEN_RUNS),
        ).ddl_if(callable_=_partial_indexes),
        # The sweep for runs that went silent, whichever schedule they belong to.
        Index("ix_task_execution_status_updated", "status", "updated_at"),
        # Runs of every schedule, newest first, a page at a time.
        Index("ix_task_execution_plan_time_id", "plan_time", "id"),
    )


class ScheduleLabel(Base):
    """One label of a schedule (``team:billing``, ``nightly``): what operators filter by."""

    __tablename__ = "schedule_label"

    periodic_task_id: Mapped[int] = mapped_column(
        ForeignKey("periodic_task.id", ondelete="CASCADE"), primary_key=True
    )
    label: Mapped[str] = mapped_column(String(64), primary_key=True)

    __table_args__ = (
        # The schedules carrying a label.
        Index("ix_schedule_label_label", "label", "periodic_task_id"),
    )


class AuditEntry(Base):
    """One change to a schedule: who made it, when, and its fields before and after; or a
    named token made or revoked (``schedule_name`` empty, the token's name and role in
    ``after``).

    Kept without a foreign key, so that the entry of a deleted schedule stays.
    """

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Who or what made the change: ``cli:alice@host``, ``http:admin@10.0.0.7``, ...
    actor: Mapped[str] = mapped_column(String(255))
    #: ``create``, ``edit``, ``pause``, ``resume``, ``delete``, ``run``, ``cancel``, ...
    action: Mapped[str] = mapped_column(String(32))
    schedule_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    schedule_name: Mapped[str] = mapped_column(String(200))
    #: JSON objects of the fields that changed, as they were and as they became.
    before: Mapped[str | None] = mapped_column(Text, nullable=True)
    after: Mapped[str | None] = mapped_column(Text, nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (
        # A schedule's trail, newest first.
        Index("ix_audit_log_schedule_name_id", "schedule_name", "id"),
    )


class ScheduleTally(Base):
    """A schedule's counts for one hour: runs ended by status, occurrences skipped and
    missed, alerts. What statistics over a window read, and what survives pruning."""

    __tablename__ = "schedule_tally"

    periodic_task_id: Mapped[int] = mapped_column(
        ForeignKey("periodic_task.id", ondelete="CASCADE"), primary_key=True
    )
    #: The start of the hour, in UTC.
    hour: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    success: Mapped[int] = mapped_column(Integer, default=0)
    failure: Mapped[int] = mapped_column(Integer, default=0)
    revoked: Mapped[int] = mapped_column(Integer, default=0)
    lost: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    missed: Mapped[int] = mapped_column(Integer, default=0)
    alerts: Mapped[int] = mapped_column(Integer, default=0)
    #: Seconds the runs that ended in the hour ran.
    runtime: Mapped[float] = mapped_column(Float, default=0.0)


class Incident(Base):
    """Something wrong with a schedule (or with the scheduler): opened, alerted, closed.

    At most one open incident per kind and subject (a partial unique index), so
    that several beats that see the same trouble open it once and alert once.
    On MySQL and MariaDB the index is unique on the kind and a generated column
    ``open_subject``, the subject while the incident is open and NULL once it
    is closed (NULLs never collide), which the model leaves out: it is only
    read by the index.
    """

    __tablename__ = "incident"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: ``late``, ``overrun``, ``failing``, ``broken``, ``missed`` or ``no_beat``.
    kind: Mapped[str] = mapped_column(String(16))
    #: ``schedule:<id>``, or ``scheduler`` for an incident of no one schedule.
    subject: Mapped[str] = mapped_column(String(64))
    #: The schedule; NULL once it is deleted (its incidents stay, closed, for their
    #: recoveries and their history).
    periodic_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("periodic_task.id", ondelete="SET NULL"), nullable=True
    )
    schedule_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: When the trouble began, and when the incident was opened and closed.
    since: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    acknowledged_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
    #: When its alert was last sent (None: not yet), how many were, and when its
    #: recovery was sent.
    alerted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    alerts: Mapped[int] = mapped_column(Integer, default=0)
    recovery_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Until when a beat or worker that is sending the alert owed holds it.
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Tries in a row at its owed alert that an alert URL refused, and why the last one
    #: failed (the URL's service, never the URL); 0 and NULL once the alert went out.
    alert_attempts: Mapped[int] = mapped_column(Integer, default=0)
    alert_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The alert URLs (their positions, separated by commas) that have the owed alert
    #: already, while another refuses it: they are not sent it again.
    alert_sent_to: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: What the alert says: a sentence, and the runs concerned (JSON).
    message: Mapped[str] = mapped_column(Text, default="")
    runs: Mapped[str] = mapped_column(Text, default="[]")

    __table_args__ = (
        Index(
            "ix_incident_open",
            "kind",
            "subject",
            unique=True,
            postgresql_where=text("closed_at IS NULL"),
            sqlite_where=text("closed_at IS NULL"),
        ).ddl_if(callable_=_partial_indexes),
        # The incidents that still owe an alert or a recovery.
        Index("ix_incident_closed_at", "closed_at"),
    )


class BeatInstance(Base):
    """A running beat instance: its heartbeat, so operators can see who is ticking."""

    __tablename__ = "beat_instance"

    #: The instance id beat writes into ``periodic_task.worker``.
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: The start of its latest tick.
    last_tick: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Runs it has sent since it started.
    sent: Mapped[int] = mapped_column(Integer, default=0)
    #: When it stopped cleanly (None while it runs, or after it died): the row stays, so
    #: that when the last beat ticked is known after every beat has gone.
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class WorkerInstance(Base):
    """A running Celery worker's heartbeat: how beat tells a dead worker's runs from long ones."""

    __tablename__ = "worker_instance"

    #: The worker's node name, as recorded in ``task_execution.worker``.
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    pid: Mapped[int] = mapped_column(Integer)
    #: When this incarnation started: a run last touched before it belongs to a dead one.
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)


class SchemaRelease(Base):
    """The oldest release of the bridge whose processes may run against this store.

    One row, written by the migrations: a migration that an older release
    cannot work beside raises it, one that only adds leaves it. Every process
    reads it as it starts (:mod:`bridge.rules.releases`).
    """

    __tablename__ = "schema_release"

    #: Always 1: the table holds one row.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    oldest_release: Mapped[str] = mapped_column(String(32))


class StoredCalendar(Base):
    """A named calendar (:class:`bridge.rules.calendars.Calendar`): the days, ranges or
    cron-described minutes on which the schedules that skip it send nothing. Schedules
    name it in ``periodic_task.skip_calendars``; ``calendar rm`` refuses one in use."""

    __tablename__ = "calendar"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    #: ``dates``, ``ranges`` or ``cron``.
    kind: Mapped[str] = mapped_column(String(8))
    #: A JSON list of its dates or ranges, or of its one cron expression, as written.
    entries: Mapped[str] = mapped_column(Text)
    #: The IANA zone its days and times are read in.
    timezone: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiToken(Base):
    """A named token of the HTTP server: its name, its role, and the digest of its secret
    (the secret itself is shown once, when it is made, and kept nowhere)."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: What the audit log names the caller by (``http:NAME``); never reused.
    name: Mapped[str] = mapped_column(String(64), unique=True)
    #: ``read`` or ``admin``.
    role: Mapped[str] = mapped_column(String(8))
    #: SHA-256 of the secret, in hex: what a request's token is looked up by.
    secret_digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: Who made it (``cli:alice@host``).
    created_by: Mapped[str] = mapped_column(String(255))
    #: When it stops working (None: never), and when it was revoked.
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: When a request last carried it, to the minute.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class DashboardSession(Base):
    """A signed-in browser: which token began it, until when. Signing out deletes the row,
    and a session of a token revoked or expired is refused, so either ends it at once."""

    __tablename__ = "dashboard_session"

    #: SHA-256 of the session's secret, which only the browser's cookie holds.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: The named token it was begun with; None for a settings token.
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_token.id", ondelete="CASCADE"), nullable=True
    )
    #: ``read`` or ``admin``.
    role: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


def as_dict(row: Base) -> dict[str, Any]:
    """The column values of a row, for display and JSON output."""
    return {column.key: getattr(row, column.key) for column in row.__table__.columns}
