"""The bridge's tables as Django sees them: read by the admin, never written through Django.

Every model is unmanaged: ``celery -A PROJ bridge migrate`` owns the schema, and every
change goes through :class:`bridge.Bridge` (see :mod:`bridge.contrib.django.admin`), which
validates it, moves ``nextrun``, writes the audit log and wakes beat. A model holds only
the columns the admin shows.
"""

from __future__ import annotations

from django.db import models


class Schedule(models.Model):
    name = models.CharField(max_length=200, unique=True)
    task = models.CharField(max_length=200)
    timer = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64)
    args = models.TextField()
    kwargs = models.TextField()
    options = models.TextField()
    description = models.TextField(null=True, blank=True)
    enabled = models.BooleanField()
    broken = models.BooleanField()
    note = models.TextField(null=True, blank=True)
    overlap = models.CharField(max_length=16)
    nextrun = models.DateTimeField(null=True)
    last_run_at = models.DateTimeField(null=True)
    last_status = models.CharField(max_length=16, null=True)
    failure_streak = models.IntegerField()
    total_run_count = models.IntegerField()
    source = models.CharField(max_length=16)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "periodic_task"
        ordering = ("name",)

    def __str__(self) -> str:
        return str(self.name)


class Label(models.Model):
    """A label of a schedule. The table's key is the pair; Django is told the schedule
    alone, which only the label filter's subquery reads."""

    schedule = models.ForeignKey(
        Schedule, on_delete=models.DO_NOTHING, primary_key=True, db_column="periodic_task_id"
    )
    label = models.CharField(max_length=64)

    class Meta:
        managed = False
        db_table = "schedule_label"


class Run(models.Model):
    id = models.CharField(max_length=36, primary_key=True)
    schedule = models.ForeignKey(
        Schedule,
        on_delete=models.DO_NOTHING,
        null=True,
        db_column="periodic_task_id",
        db_constraint=False,
        related_name="runs",
    )
    task = models.CharField(max_length=200)
    plan_time = models.DateTimeField(null=True)
    attempt = models.IntegerField()
    trigger = models.CharField(max_length=16)
    status = models.CharField(max_length=16)
    queued_at = models.DateTimeField(null=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    runtime = models.FloatField(null=True)
    worker = models.CharField(max_length=255, null=True)
    result = models.TextField(null=True)
    error = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "task_execution"
        ordering = ("-queued_at",)

    def __str__(self) -> str:
        return str(self.id)


class Incident(models.Model):
    kind = models.CharField(max_length=16)
    schedule_name = models.CharField(max_length=200, null=True)
    message = models.TextField()
    since = models.DateTimeField(null=True)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True)
    acknowledged_at = models.DateTimeField(null=True)
    alerts = models.IntegerField()

    class Meta:
        managed = False
        db_table = "incident"
        ordering = ("-opened_at",)

    def __str__(self) -> str:
        return f"{self.kind} of {self.schedule_name or 'the scheduler'}"


class AuditEntry(models.Model):
    at = models.DateTimeField()
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=32)
    schedule_name = models.CharField(max_length=200)
    before = models.TextField(null=True)
    after = models.TextField(null=True)
    note = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "audit_log"
        ordering = ("-at",)
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.action} {self.schedule_name} by {self.actor}"
