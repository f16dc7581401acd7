"""The statements that keep ``periodic_task`` in step with the app's ``beat_schedule``.

Each runs in the transaction of a sync (:mod:`bridge.service.sync`). Every
statement is a compare-and-set, so several beats starting at once converge
on the same table. Rows created through the API or the CLI are never
touched.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, not_, select, update
from sqlalchemy.orm import Session, selectinload

from bridge.rules.definition import Definition
from bridge.rules.edits import FRESH_STATE, MOVING_COLUMNS, TIMING_COLUMNS
from bridge.rules.kinds import Source
from bridge.storage.models import PeriodicTask
from bridge.storage.sql import insert_skipping

#: The note on a config row whose entry left ``beat_schedule``.
REMOVED_NOTE = "disabled: removed from beat_schedule"


def config_rows(session: Session) -> list[PeriodicTask]:
    """Every config row, its labels loaded, as the transaction sees them now."""
    return list(
        session.scalars(
            select(PeriodicTask)
            .where(PeriodicTask.source == Source.CONFIG.value)
            .options(selectinload(PeriodicTask.label_rows))
            .execution_options(populate_existing=True)
        )
    )


def sources_of(session: Session, names: Collection[str]) -> dict[str, str]:
    """The source of each schedule of these names that exists (config, api, ...)."""
    return dict(
        session.execute(
            select(PeriodicTask.name, PeriodicTask.source).where(PeriodicTask.name.in_(list(names)))
        ).all()
    )


def disable_removed(session: Session, names: Collection[str], now: datetime) -> int:
    """Disable the enabled config rows whose name is not among ``names``; how many."""
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
    return int(removed.rowcount)  # type: ignore[attr-defined]


def _same(values: Mapping[str, Any]) -> ColumnElement[bool]:
    """The row holds exactly these values (NULL matching NULL)."""
    return and_(
        *(getattr(PeriodicTask, key).is_not_distinct_from(value) for key, value in values.items())
    )


def upsert(
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
