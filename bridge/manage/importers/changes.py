"""What an import from another scheduler writes: each accepted candidate planned as a
new schedule, an update of the schedule of its name, or nothing.

The plan goes through the batches of the JSON Lines import
(:class:`bridge.storage.bulk.ScheduleImport`), upserting by name, with an audit
entry for each schedule created or changed. Importing again is idempotent,
and moves a schedule's cursor only forwards, when the source has run since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bridge.manage.bulk import COMPARED_COLUMNS, READ_COLUMNS, audit_entry
from bridge.manage.importers.candidates import Candidate
from bridge.rules.audit import AUDITED_COLUMNS
from bridge.rules.definition import check_labels
from bridge.rules.edits import FRESH_STATE, retimes
from bridge.rules.kinds import Source
from bridge.storage.bulk import Changes, RowValues

#: The columns an import reads of an existing row: those of the JSON Lines import, and
#: the state an import carries over.
READ = (
    *READ_COLUMNS,
    *("last_run_at", "total_run_count", "description", "source", "note", "next_occurrence"),
)


def _label(source: str) -> tuple[str, ...]:
    return check_labels([f"from:{source}"])


def plan(
    candidates: Sequence[Candidate],
    now: datetime,
    actor: str,
    source: str,
    take_over: bool,
    paused: bool,
    rows: Mapping[str, RowValues],
) -> Changes:
    """The batch's changes: a create for each candidate whose name has no row in
    ``rows``, an update for each row that differs from its candidate.

    ``take_over`` (the source is being disabled) enables the schedules the source
    has enabled, existing ones included; otherwise ``paused`` creates every
    schedule paused.
    """
    changes = Changes()
    labels = _label(source)
    for candidate in candidates:
        definition = candidate.definition
        assert definition is not None and candidate.anchor is not None
        row = rows.get(candidate.name)
        enabled = candidate.enabled and not (paused and not take_over)
        if row is None:
            candidate.action = "create"
            values = definition.new_row(
                candidate.name,
                anchor=candidate.anchor,
                first=candidate.cursor,  # type: ignore[arg-type]
                enabled=enabled,
                source=Source.CONFIG if candidate.code_owned else Source.API,
                now=now,
            )
            values.update(
                last_run_at=candidate.last_run_at,
                total_run_count=candidate.total_run_count,
                description=candidate.description,
                note=candidate.note if not enabled else None,
            )
            if candidate.remaining is not None:
                values["remaining"] = candidate.remaining
            if not enabled and candidate.note is None:
                values["note"] = f"imported paused from {source}"
            changes.creates.append({**values, "labels": labels})
            shown = {**dict.fromkeys(AUDITED_COLUMNS), **values}  # what it does not set is unset
            changes.audit.append(
                audit_entry(actor, "create", now, candidate.name, None, shown, labels)
            )
            continue
        update = _changes(candidate, row, now, take_over)
        if update is None:
            candidate.action = "unchanged"
            continue
        candidate.action = "update"
        changes.updates.append({"row_id": row["id"], **update})
        changed = {**row, **update}
        changes.audit.append(
            audit_entry(actor, "edit", now, candidate.name, row, changed, row["labels"])
        )
    return changes


def _changes(
    candidate: Candidate, row: RowValues, now: datetime, take_over: bool
) -> dict[str, Any] | None:
    """What brings an existing row to the candidate: its definition, and its cursor
    moved forward when the source ran since (never back: nothing fires twice).

    An import never pauses a schedule that exists: a source row may be disabled
    because an earlier import took it over. A take-over enables it.
    """
    assert candidate.definition is not None
    columns = candidate.definition.columns()
    wanted = {**columns, "anchor": candidate.anchor}
    update: dict[str, Any] = {
        key: columns[key] for key in COMPARED_COLUMNS if key in columns and row[key] != columns[key]
    }
    if row["description"] != candidate.description:
        update["description"] = candidate.description
    newer = candidate.last_run_at is not None and (
        row["last_run_at"] is None or candidate.last_run_at > row["last_run_at"]
    )
    resume = take_over and candidate.enabled and not row["enabled"]
    if newer or retimes(row, {k: v for k, v in wanted.items() if k != "anchor"}) or resume:
        cursor = candidate.cursor
        if not newer and row["last_run_at"] is not None and candidate.timer is not None:
            # The bridge ran it since: count from its own last run.
            following = candidate.timer.next_after(row["last_run_at"])
            cursor = following if cursor is None or following is None else max(cursor, following)
        if row["next_occurrence"] != cursor:
            update.update(next_occurrence=cursor, nextrun=cursor)
        if newer:
            update.update(
                last_run_at=candidate.last_run_at,
                total_run_count=max(candidate.total_run_count, row["total_run_count"]),
                anchor=candidate.anchor,
            )
    if resume:
        update.update(FRESH_STATE, enabled=True, note=None)
    if not update:
        return None
    update["updated_at"] = now
    return update
