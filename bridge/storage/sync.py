"""The statements that keep ``periodic_task`` in step with the app's ``beat_schedule``.

Beat hands over the checked definition of each entry; this module upserts
them in one transaction. Every statement is a compare-and-set, so several
beats starting at once converge on the same table. Rows created through the
API or the CLI are never touched. What a sync creates, changes or disables
goes into the audit log, in the same transaction: the config rows are read
before and after, and each one that differs gets an entry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, not_, select, update
from sqlalchemy.orm import Session, selectinload

from bridge.rules.audit import difference, snapshot
from bridge.rules.definition import Definition
from bridge.rules.edits import FRESH_STATE, MOVING_COLUMNS, TIMING_COLUMNS
from bridge.rules.kinds import Source
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, DatabaseError, is_conflict
from bridge.storage.models import PeriodicTask
from bridge.storage.sql import insert_skipping

#: Who the audit log says made a sync's changes.
SYNC_ACTOR = "beat_schedule sync"

#: The note on a config row whose entry left ``beat_schedule``.
REMOVED_NOTE = "disabled: removed from beat_schedule"


@dataclass
class SyncReport:
    """What a sync did."""

    #: Entries whose name a schedule created through the API or CLI has.
    left_alone: list[str] = field(default_factory=list)
    #: Entries whose definition changed.
    changed: list[str] = field(default_factory=list)
    #: Config rows disabled because their entry is gone.
    removed: int = 0


#: How many times one sync is tried when the database ends it as a conflict.
CONFLICT_ATTEMPTS = 5


class ConfigSync:
    """Upserts ``beat_schedule`` entries into one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def apply(
        self,
        entries: Mapping[str, tuple[Definition, datetime]],
        names: Collection[str],
        now: datetime,
    ) -> SyncReport:
        """Upsert ``entries`` (name → checked definition and first occurrence after now),
        and disable the config rows whose name is not among ``names`` (every entry of
        ``beat_schedule``, refused ones included, so that a refused entry keeps its row).

        Several beats starting together upsert the same rows: MySQL and MariaDB may end
        one of those transactions as a deadlock (their gap locks), which is tried again,
        up to :data:`CONFLICT_ATTEMPTS` times in all.
        """
        attempt = 1
        while True:
            try:
                return self._apply(entries, names, now)
            except DatabaseError as exc:
                if not is_conflict(exc) or attempt >= CONFLICT_ATTEMPTS:
                    raise
                attempt += 1

    def _apply(
        self,
        entries: Mapping[str, tuple[Definition, datetime]],
        names: Collection[str],
        now: datetime,
    ) -> SyncReport:
        report = SyncReport()
        with self.database.session() as session:
            before = _config_rows(session)
            owners = dict(
                session.execute(
                    select(PeriodicTask.name, PeriodicTask.source).where(
                        PeriodicTask.name.in_(list(entries))
                    )
                ).all()
            )
            for name, (definition, first) in entries.items():
                if owners.get(name, Source.CONFIG) != Source.CONFIG:
                    report.left_alone.append(name)
                elif _upsert(session, name, definition, first, now):
                    report.changed.append(name)
            removed = session.execute(
                update(PeriodicTask)
                .where(
                    PeriodicTask.source == Source.CONFIG.value,
                    PeriodicTask.enabled,
                    PeriodicTask.name.not_in(list(names)),
                )
                .values(enabled=False, note=REMOVED_NOTE, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            report.removed = removed.rowcount  # type: ignore[attr-defined]
            _log_changes(session, before, _config_rows(session), now)
        return report


def _config_rows(session: Session) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every config row's id and audited fields, by name, as the transaction sees them now."""
    rows = session.scalars(
        select(PeriodicTask)
        .where(PeriodicTask.source == Source.CONFIG.value)
        .options(selectinload(PeriodicTask.label_rows))
        .execution_options(populate_existing=True)
    )
    return {row.name: (row.id, snapshot(row, row.labels)) for row in rows}


def _log_changes(
    session: Session,
    before: Mapping[str, tuple[int, dict[str, Any]]],
    after: Mapping[str, tuple[int, dict[str, Any]]],
    now: datetime,
) -> None:
    """An audit entry for each config row the sync created or changed."""
    for name, (row_id, fields) in after.items():
        if name not in before:
            log(session, Change(SYNC_ACTOR, "create"), now, row_id, name, after=fields)
            continue
        old, new = difference(before[name][1], fields)
        if old or new:
            action = "pause" if new.get("enabled") is False else "edit"
            log(session, Change(SYNC_ACTOR, action), now, row_id, name, old, new)


def _same(values: Mapping[str, Any]) -> ColumnElement[bool]:
    """The row holds exactly these values (NULL matching NULL)."""
    return and_(
        *(getattr(PeriodicTask, key).is_not_distinct_from(value) for key, value in values.items())
    )


def _upsert(
    session: Session, name: str, definition: Definition, first: datetime, now: datetime
) -> bool:
    """Insert, retime, update or re-enable one entry's row, each as a compare-and-set;
    True if an existing row's definition changed."""
    columns = definition.columns()
    config_row = (PeriodicTask.name == name, PeriodicTask.source == Source.CONFIG.value)
    session.execute(
        insert_skipping(session, PeriodicTask, ["name"]).values(
            definition.new_row(
                name, anchor=now, first=first, enabled=True, source=Source.CONFIG, now=now
            )
        )
    )
    changes: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
        # A new timer, zone or bounds: a new first occurrence, counted from now.
        (
            {key: columns[key] for key in TIMING_COLUMNS if key in columns},
            {"anchor": now, "next_occurrence": first, "nextrun": first},
        ),
        # Anything else: the new values, the row keeps its place in time.
        ({key: v for key, v in columns.items() if key not in MOVING_COLUMNS}, {}),
    )
    changed = False
    for compared, moves in changes:
        result = session.execute(
            update(PeriodicTask)
            .where(*config_row, not_(_same(compared)))
            .values(**columns, **moves, **FRESH_STATE, enabled=True, note=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount:  # type: ignore[attr-defined]
            changed = True
            break
    session.execute(
        update(PeriodicTask)
        .where(*config_row, PeriodicTask.note == REMOVED_NOTE)
        .values(enabled=True, note=None, next_occurrence=first, nextrun=first, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return changed
