"""``bridge import --from``: schedules moved in from django-celery-beat, sqlalchemy-celery-beat
and RedBeat, with their state, and proven to fire when they fired there.

Each source entry becomes a *candidate*: the bridge definition it converts to
(task, timer, zone, arguments, options, policies), the state it carries over
(the last run, the run count, one-offs already done, the description), and
the Celery schedule object the source would fire it by. The next ten fire
times are computed both ways, by that object's own ``remaining_estimate``
(:func:`bridge.celery.schedules.fire_times`) and by the bridge's timer from the
cursor the import gives the row; an entry whose times differ, or whose
definition the bridge cannot hold exactly, is refused with the reason,
unless ``approximate`` is given, and then imported and named in the report.

The cursor is where the source stands: the first occurrence after its last
run (so that nothing fires twice, nor is skipped, at the switch-over), the
source's own first run for an entry that never ran, nothing for a one-off
that has run. Writing goes through the batches of the JSON Lines import
(:class:`bridge.storage.bulk.ScheduleImport`), upserting by name; importing
again is idempotent, and moves a schedule's cursor only forwards, when the
source has run since.

One module per kind of store: :mod:`.tables` converts the rows of
django-celery-beat's and sqlalchemy-celery-beat's tables (which
:mod:`bridge.storage.sources` reads), :mod:`.redbeat` RedBeat's entries
(which :mod:`bridge.redbeat_store` reads); :mod:`.candidates` holds what
both become and the comparison, :mod:`.changes` what an import writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from zoneinfo import ZoneInfo

from celery import Celery

from bridge.clock import utcnow
from bridge.errors import ValidationError
from bridge.manage.api import Bridge
from bridge.manage.importers.candidates import Candidate, Context, SourceReport
from bridge.manage.importers.changes import READ, plan
from bridge.manage.importers.redbeat import redbeat_candidates
from bridge.manage.importers.tables import sql_candidates
from bridge.redbeat_store import REDBEAT_PREFIX, disable_entries, read_entries
from bridge.rules.definition import check_name
from bridge.storage.bulk import Changes, RowValues, ScheduleImport
from bridge.storage.sources import LAYOUTS, SourceTables

#: The schedulers ``--from`` reads.
SOURCES = (*LAYOUTS, "redbeat")


def import_from(
    bridge: Bridge,
    source: str,
    url: str,
    *,
    schema: str | None = None,
    prefix: str = REDBEAT_PREFIX,
    source_timezone: str = "UTC",
    approximate: bool = False,
    disable_source: bool = False,
    paused: bool = False,
    allow_unknown_task: bool = False,
    dry_run: bool = False,
) -> SourceReport:
    """Import every schedule of ``source`` at ``url``; see the module docstring."""
    if source not in SOURCES:
        raise ValidationError("from", source, f"one of {', '.join(SOURCES)}")
    app = bridge.app if bridge.app is not None else Celery("bridge-import", set_as_current=False)
    beat_schedule = app.conf.beat_schedule or {}
    context = Context(
        app=app,
        now=utcnow(),
        zone=bridge.default_timezone(),
        naive_zone=ZoneInfo(source_timezone),
        known_tasks=None if allow_unknown_task else bridge.known_tasks(),
        code_owned=frozenset([*beat_schedule, "celery.backend_cleanup"]),
        approximate=approximate,
    )
    tables: SourceTables | None = None
    if source == "redbeat":
        entries, statics = read_entries(url, prefix)
        context = replace(context, code_owned=statics)
        candidates = redbeat_candidates(entries, statics, context)
    else:
        tables = SourceTables(source, url, schema)
        try:
            candidates = sql_candidates(tables.rows(), context)
        except BaseException:
            tables.close()
            raise
    report = SourceReport(candidates)
    try:
        for candidate in candidates:
            if candidate.refusal is None:
                try:
                    check_name(candidate.name)
                except ValidationError as exc:
                    candidate.refusal = str(exc)
        accepted = [c for c in candidates if c.refusal is None]
        if accepted:
            writer = ScheduleImport(bridge.database, READ, False)

            def planned(rows: Mapping[str, RowValues]) -> Changes:
                return plan(
                    accepted, context.now, bridge.actor, source, disable_source, paused, rows
                )

            writer.batch([c.name for c in accepted], planned, write=not dry_run)
        report.written = not dry_run
        if disable_source and not dry_run:
            taken = [c.key for c in accepted if c.source_enabled]
            report.disabled = len(taken)
            if source == "redbeat":
                disable_entries(url, taken)
            elif tables is not None:
                tables.disable(taken, context.now)
    finally:
        if tables is not None:
            tables.close()
    return report


__all__ = ["REDBEAT_PREFIX", "SOURCES", "Candidate", "SourceReport", "import_from"]
