"""The bridge in the Django admin: schedules to list, filter, search, add, edit, pause,
resume, run now and remove; runs to read and cancel; incidents to acknowledge; the audit log.

Django reads the tables; every change goes through :class:`bridge.Bridge`, as the CLI's and
the HTTP API's do: the same checks (a refused value is the form field's error, nothing is
written), the next run moved, the audit log naming ``django:USERNAME``, beat woken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from celery import current_app
from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from bridge.contrib.django.conf import database_url
from bridge.contrib.django.models import AuditEntry, Incident, Label, Run, Schedule
from bridge.errors import BridgeError, ValidationError
from bridge.manage.api import Bridge
from bridge.manage.fields import POLICY_HELP
from bridge.manage.forms import POLICY_DEFAULTS, policy_fields, policy_values
from bridge.rules.paging import PAGE_MAX
from bridge.rules.policy import POLICY_NAMES
from bridge.rules.values import json_or_text

#: The most schedules the health filter lists: the names of the schedules in a state are
#: read through the Bridge a page at a time, and a request stops after this many.
HEALTH_FILTER_MAX = 10 * PAGE_MAX


@functools.cache
def _shared() -> Bridge:
    return Bridge(current_app, database_url=database_url())


def _bridge(request: HttpRequest) -> Bridge:
    """The Bridge whose changes the audit log gives to ``django:USERNAME``."""
    return _shared().acting_as(f"django:{request.user.get_username()}")


def _names_where(bridge: Bridge, **flag: bool) -> list[str]:
    """The names of the schedules the Bridge lists under ``flag``, up to the cap."""
    names: list[str] = []
    cursor = None
    while len(names) < HEALTH_FILTER_MAX:
        page = bridge.schedules(cursor=cursor, limit=PAGE_MAX, **flag)  # type: ignore[arg-type]
        names += [schedule.name for schedule in page.items]
        cursor = page.next
        if cursor is None:
            break
    return names


class HealthFilter(admin.SimpleListFilter):
    """The states of health the Bridge's own listing filters on, as ``bridge ls`` does."""

    title = "health"
    parameter_name = "health"
    STATES = ("late", "failing", "broken", "paused", "finished")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in self.STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        state = self.value()
        if state not in self.STATES:
            return queryset
        return queryset.filter(name__in=_names_where(_bridge(request), **{state: True}))


class LabelFilter(admin.SimpleListFilter):
    title = "label"
    parameter_name = "label"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        labels = Label.objects.values_list("label", flat=True).distinct().order_by("label")
        return [(label, label) for label in labels[:200]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        label = self.value()
        if not label:
            return queryset
        return queryset.filter(id__in=Label.objects.filter(label=label).values("schedule_id"))


def _policy_field(name: str) -> forms.Field:
    """A policy's form field: a choice of its values when it has a few (overlap, replace
    with, catch-up, on overrun), else text as the CLI takes it; its help says what each
    does."""
    metavar, help_text = POLICY_HELP[name]
    label = name.replace("_", " ")
    if metavar.islower():
        choices = [(choice, choice) for choice in metavar.split("|")]
        # Not required: a form posted without it (by a script) gives a new schedule the
        # policy's default, as an empty text field does.
        return forms.ChoiceField(
            choices=choices,
            initial=POLICY_DEFAULTS[name],
            required=False,
            label=label,
            help_text=help_text,
        )
    return forms.CharField(required=False, label=label, help_text=f"{metavar}. {help_text}")


class ScheduleForm(forms.ModelForm):
    """A schedule's definition and policies, handed to :meth:`Bridge.add` or
    :meth:`Bridge.edit` when the form is cleaned: what the Bridge refuses becomes the error
    of the field it names."""

    labels = forms.CharField(required=False, help_text="Comma-separated.")
    queue = forms.CharField(required=False, help_text="The queue its runs go to.")

    #: Set by :meth:`ScheduleAdmin.get_form` for the request: the Bridge, and the schedule
    #: edited as the Bridge reads it (None: one is added).
    bridge: Bridge
    judged: Any = None
    saved: Any = None

    class Meta:
        model = Schedule
        fields = ("name", "task", "timer", "timezone", "args", "kwargs")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.judged is not None:
            self.initial.update(
                labels=", ".join(self.judged.labels),
                queue=_queue_of(self.judged.options),
                **policy_values(self.judged),
            )

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if self.errors:
            return data
        values = {
            "task": data["task"],
            "timer": data["timer"],
            "timezone": data["timezone"] or None,
            "args": data["args"] or "[]",
            "kwargs": data["kwargs"] or "{}",
            "queue": data.get("queue") or None,
            "labels": [part.strip() for part in data.get("labels", "").split(",") if part.strip()],
            **policy_fields(
                {name: data.get(name) or "" for name in POLICY_NAMES},
                editing=self.instance.pk is not None,
            ),
        }
        try:
            if self.instance.pk is None:
                self.saved = self.bridge.add(data["name"], **values)
            else:
                self.saved = self.bridge.edit(self.instance.name, **values)
        except ValidationError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, str(exc))
        except BridgeError as exc:
            self.add_error(None, str(exc))
        return data

    def validate_unique(self) -> None:
        """The Bridge says whether the name is taken, in the words the CLI uses."""

    def _post_clean(self) -> None:
        """The Bridge validates; Django's model checks would ask for the columns it fills."""


# Declared after the class, one per policy: the forms ModelAdmin makes from it take them.
ScheduleForm.declared_fields.update({name: _policy_field(name) for name in POLICY_NAMES})
ScheduleForm.base_fields.update(ScheduleForm.declared_fields)


def _each(
    request: HttpRequest,
    queryset: QuerySet[Any],
    key: str,
    act: Callable[[Bridge, str], object],
    done: str,
) -> None:
    """``act`` on the ``key`` of each row selected, through the request user's Bridge,
    telling the user what was done and what the Bridge refused."""
    bridge = _bridge(request)
    acted = []
    for value in queryset.values_list(key, flat=True):
        try:
            acted.append(str(act(bridge, str(value))))
        except BridgeError as exc:
            messages.error(request, f"{value}: {exc}")
    if acted:
        messages.success(request, f"{done}: {', '.join(acted)}")


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "task",
        "timer",
        "enabled",
        "health",
        "nextrun",
        "last_status",
        "last_run_at",
    )
    list_filter = ("enabled", HealthFilter, LabelFilter, "task")
    search_fields = ("name", "task", "description")
    actions = ("pause", "resume", "run_now")
    list_per_page = 100

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name", "next_runs") if obj is not None else ()

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The definition, then the policies, each with a sentence saying what it does."""
        definition: tuple[str, ...] = ("name", "task", "timer", "timezone", "args", "kwargs")
        definition += ("queue", "labels") if obj is None else ("queue", "labels", "next_runs")
        return ((None, {"fields": definition}), ("Policies", {"fields": POLICY_NAMES}))

    @admin.display(description="next runs")
    def next_runs(self, obj: Any) -> str:
        """The next five runs beat will send, in UTC, as ``bridge next`` forecasts them."""
        outlook = _shared().forecast(obj.name, 5)
        times = [f"{run.fire_at:%Y-%m-%d %H:%M:%S} UTC" for run in outlook.runs]
        if outlook.end is not None:
            times.append(f"then no more: {outlook.end}" if times else outlook.end)
        return "; ".join(times)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.bridge = _bridge(request)
        form.judged = None if obj is None else form.bridge.get(obj.name)
        return form

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Written already, by the Bridge, as the form was cleaned."""
        obj.pk = form.saved.id

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """The labels went with the schedule."""

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        _bridge(request).remove(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        bridge = _bridge(request)
        for name in queryset.values_list("name", flat=True):
            bridge.remove(name)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's schedules, each given its health, judged by the Bridge in one read."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)
        judged = {s.name: s for s in _bridge(request).named([obj.name for obj in page])}
        for obj in page:
            obj.judged = judged.get(obj.name)
        return changelist

    @admin.display(description="health")
    def health(self, obj: Any) -> str:
        judged = getattr(obj, "judged", None)
        return "-" if judged is None else str(judged.health)

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(request, queryset, "name", lambda bridge, name: bridge.pause(name).name, "paused")

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(request, queryset, "name", lambda bridge, name: bridge.resume(name).name, "resumed")

    @admin.action(description="Run the selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(
            request,
            queryset,
            "name",
            lambda bridge, name: f"{name} ({bridge.run(name).id})",
            "sent",
        )


def _queue_of(options: str) -> str:
    decoded = json_or_text(options)
    return str(decoded.get("queue") or "") if isinstance(decoded, dict) else ""


class ReadOnly(admin.ModelAdmin):
    """Rows the bridge writes itself: shown, never added, edited or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnly):
    list_display = (
        "id",
        "schedule",
        "task",
        "status",
        "trigger",
        "plan_time",
        "queued_at",
        "finished_at",
        "worker",
    )
    list_filter = ("status", "trigger")
    search_fields = ("id", "task", "schedule__name")
    list_select_related = ("schedule",)
    actions = ("cancel",)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("bridge.change_run"))

    @admin.action(description="Cancel the selected runs", permissions=["cancel"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(request, queryset, "id", lambda bridge, run_id: bridge.cancel(run_id).id, "cancelled")


@admin.register(Incident)
class IncidentAdmin(ReadOnly):
    list_display = ("id", "kind", "schedule_name", "opened_at", "closed_at", "acknowledged_at")
    list_filter = ("kind",)
    search_fields = ("schedule_name", "message")
    actions = ("acknowledge",)

    def has_acknowledge_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("bridge.change_incident"))

    @admin.action(description="Acknowledge the selected incidents", permissions=["acknowledge"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(
            request, queryset, "id", lambda bridge, i: bridge.acknowledge(int(i)).id, "acknowledged"
        )


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnly):
    list_display = ("at", "actor", "action", "schedule_name", "note")
    list_filter = ("action",)
    search_fields = ("schedule_name", "actor")
