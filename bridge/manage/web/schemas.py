"""The bodies the HTTP API takes, described for its OpenAPI document.

The fields are typed for the document only: each accepts any JSON value
and hands it to :class:`~bridge.manage.api.Bridge`, which checks it with
the same rules as the CLI, so that a bad value is refused in the same
words everywhere (``remaining: got -1, expected a whole number from 1 to
2147483647 or 'none'``). A field the body does not know is refused too.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from bridge.manage.fields import CALENDAR_HELP, DEFINITION_HELP, POLICY_HELP
from bridge.rules.policy import POLICY_NAMES


def loose(schema: dict[str, Any], description: str) -> Any:
    """A field that takes any JSON value but documents ``schema``."""
    return Annotated[Any, WithJsonSchema({**schema, "description": description})]


TEXT = {"type": "string"}
FLAG = {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
JSON_LIST = {"anyOf": [{"type": "array"}, {"type": "string"}]}
JSON_OBJECT = {"anyOf": [{"type": "object"}, {"type": "string"}]}
LABELS = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]}
POLICY = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "number"}]}

#: The definition fields, as ``add`` takes them.
_DEFINITION: dict[str, dict[str, Any]] = {
    "task": TEXT,
    "timer": TEXT,
    "signature": JSON_OBJECT,
    "args": JSON_LIST,
    "kwargs": JSON_OBJECT,
    "timezone": TEXT,
    "queue": TEXT,
    "options": JSON_OBJECT,
    "labels": LABELS,
    "allow_unknown_task": FLAG,
}


class Body(BaseModel):
    """A request body: a JSON object whose unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")

    def given(self) -> dict[str, Any]:
        """The fields the client sent (left-out ones take their defaults in the API)."""
        return {key: getattr(self, key) for key in self.model_fields_set}


def _fields(names: dict[str, dict[str, Any]], required: tuple[str, ...] = ()) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, schema in names.items():
        help_text = DEFINITION_HELP.get(name) or POLICY_HELP[name][1]
        fields[name] = (loose(schema, help_text), ... if name in required else None)
    return fields


_POLICIES: dict[str, dict[str, Any]] = dict.fromkeys(POLICY_NAMES, POLICY)
_POLICIES["start"] = _POLICIES["end"] = {"anyOf": [TIME, {"const": "none"}]}
_POLICIES["skip_calendars"] = LABELS

#: ``POST /schedules``: the fields of ``bridge add``.
ScheduleCreate: type[Body] = create_model(
    "ScheduleCreate",
    __base__=Body,
    **_fields(
        {"name": TEXT, **_DEFINITION, "enabled": FLAG, "anchor": TIME, **_POLICIES},
        # The task, or a signature that names it.
        required=("name", "timer"),
    ),
)
#: ``PATCH /schedules/{name}``: the fields of ``bridge edit``; those left out keep their value.
ScheduleEdit: type[Body] = create_model(
    "ScheduleEdit", __base__=Body, **_fields({**_DEFINITION, **_POLICIES})
)


class Pause(Body):
    note: Annotated[Any, WithJsonSchema({**TEXT, "description": "Why it is paused."})] = None


class Resume(Body):
    from_: Annotated[
        Any,
        WithJsonSchema(
            {
                "enum": ["now", "catchup"],
                "description": "now: from the next occurrence after now; catchup: from where "
                "it stopped, catching up as its catch-up policy says.",
            }
        ),
    ] = Field(default="now", alias="from")


class ManualRun(Body):
    overlap: Annotated[
        Any,
        WithJsonSchema(
            {
                "enum": ["allow", "skip", "replace"],
                "description": "While a run is open: send anyway (allow), refuse (skip) or "
                "revoke the open runs first (replace). Default: allow.",
            }
        ),
    ] = None


class Backfill(Body):
    from_: Annotated[Any, WithJsonSchema({**TIME, "description": "First instant (included)."})] = (
        Field(alias="from")
    )
    to: Annotated[Any, WithJsonSchema({**TIME, "description": "Last instant (included)."})]
    overlap: Annotated[
        Any,
        WithJsonSchema({"enum": ["allow", "skip", "replace"], "description": "Default: allow."}),
    ] = "allow"
    limit: Annotated[
        Any,
        WithJsonSchema({"type": "integer", "description": "Refuse a range with more runs."}),
    ] = 100


class Cancel(Body):
    terminate: Annotated[
        Any,
        WithJsonSchema(
            {
                **FLAG,
                "description": "End the run with SIGTERM where it already executes (prefork).",
            }
        ),
    ] = False
    note: Annotated[Any, WithJsonSchema({**TEXT, "description": "Why it is cancelled."})] = None


class Silence(Body):
    for_: Annotated[
        Any,
        WithJsonSchema(
            {**TEXT, "description": "How long, such as 2h (left out: until unsilenced)."}
        ),
    ] = Field(default=None, alias="for")


class Prune(Body):
    dry_run: Annotated[
        Any, WithJsonSchema({**FLAG, "description": "Count what would go; remove nothing."})
    ] = False


class CalendarCreate(Body):
    """``POST /calendars``: the fields of ``bridge calendar add``."""

    name: Annotated[Any, WithJsonSchema({**TEXT, "description": CALENDAR_HELP["name"]})]
    dates: Annotated[Any, WithJsonSchema({**LABELS, "description": CALENDAR_HELP["dates"]})] = None
    ranges: Annotated[Any, WithJsonSchema({**LABELS, "description": CALENDAR_HELP["ranges"]})] = (
        None
    )
    cron: Annotated[Any, WithJsonSchema({**TEXT, "description": CALENDAR_HELP["cron"]})] = None
    timezone: Annotated[Any, WithJsonSchema({**TEXT, "description": CALENDAR_HELP["timezone"]})] = (
        None
    )
    replace: Annotated[Any, WithJsonSchema({**FLAG, "description": CALENDAR_HELP["replace"]})] = (
        False
    )
