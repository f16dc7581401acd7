"""A sync of the app's ``beat_schedule`` into ``periodic_task``, with its audit entries.

Beat hands over the checked definition of each entry; one transaction
upserts them (:mod:`bridge.storage.sync`) and disables the config rows whose
entry is gone. What the sync creates, changes or disables goes into the
audit log in the same transaction: the config rows are read before and
after, and each one that differs gets an entry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bridge.rules.audit import difference, snapshot
from bridge.rules.definition import Definition
from bridge.rules.kinds import Source
from bridge.storage import sync
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, DatabaseError, Transaction, is_conflict

#: Who the audit log says made a sync's changes.
SYNC_ACTOR = "beat_schedule sync"

#: How many times one sync is tried when the database ends it as a conflict.
CONFLICT_ATTEMPTS = 5


@dataclass
class SyncReport:
    """What a sync did."""

    #: Entries whose name a schedule created through the API or CLI has.
    left_alone: list[str] = field(default_factory=list)
    #: Entries whose definition changed.
    changed: list[str] = field(default_factory=list)
    #: Config rows disabled because their entry is gone.
    removed: int = 0


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
            before = _audited(session)
            owners = sync.sources_of(session, list(entries))
            for name, (definition, first) in entries.items():
                if owners.get(name, Source.CONFIG) != Source.CONFIG:
                    report.left_alone.append(name)
                elif sync.upsert(session, name, definition, first, now):
                    report.changed.append(name)
            report.removed = sync.disable_removed(session, names, now)
            _log_changes(session, before, _audited(session), now)
        return report


def _audited(session: Transaction) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every config row's id and audited fields, by name, as the transaction sees them now."""
    return {row.name: (row.id, snapshot(row, row.labels)) for row in sync.config_rows(session)}


def _log_changes(
    session: Transaction,
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
