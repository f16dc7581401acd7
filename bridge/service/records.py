"""The workers' unit of work: a batch of status changes recorded, and the runs that ended
settled on their schedules.

A worker's recorder gathers the changes its task's signals report
(:class:`bridge.rules.records.Change`) and hands each batch to
:meth:`Recording.write`: the runs are locked, the rules merge the batch into
each run's new values and say which runs ended
(:class:`bridge.rules.records.Effects`), and those ends are settled in the
same transaction: a run that ends may owe a retry, trip the breaker, free a
held occurrence or start a fixed delay.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from bridge.rules.decisions import Thresholds
from bridge.rules.kinds import RunStatus
from bridge.rules.records import Change, Effects
from bridge.service.settlement import SHOWN_COLUMNS, settle_run
from bridge.storage import records
from bridge.storage.counts import show_end
from bridge.storage.database import Database, Transaction
from bridge.storage.rows import locked_rows, snapshot, write_changed


class Recording:
    """Run records written for the workers of one database."""

    def __init__(self, database: Database, thresholds: Thresholds) -> None:
        self.database = database
        #: The app's alert thresholds, which settling a run's end applies.
        self.thresholds = thresholds

    def write(self, changes: Sequence[Change]) -> None:
        """Write a batch of changes in one transaction, then answer those waited for.

        The runs are locked first, then the schedules of the runs that
        changed, each in id order, so that batches of several workers and
        beat's own writes (a run, then its schedule) never wait on each other
        in a circle.
        """
        with self.database.session() as session:
            created = {c.run_id: c.external_record() for c in changes if c.external_task}
            records.insert_external(session, list(created.values()))
            locked = records.lock_runs(session, [change.run_id for change in changes])
            effects = Effects.of(changes, locked)
            records.update_runs(session, effects.values)
            _apply_to_schedules(session, effects, self.thresholds)
        for reply, value in effects.replies:
            reply.give(value)


def _apply_to_schedules(session: Transaction, effects: Effects, thresholds: Thresholds) -> None:
    """Show each changed run's status on its schedule, and settle the runs that ended.

    Either way the schedule rows are locked in one pass, in id order.
    """
    schedule_of = {
        run_id: effects.runs[run_id].periodic_task_id
        for run_id in effects.values
        if effects.runs[run_id].periodic_task_id is not None
    }
    if not schedule_of:
        return
    if not effects.ended:
        # Nothing to settle: only the rows whose latest run changed are touched.
        by_status: dict[RunStatus, list[str]] = defaultdict(list)
        for run_id in schedule_of:
            by_status[effects.status[run_id]].append(run_id)
        for status, run_ids in by_status.items():
            ids = {schedule_of[run_id] for run_id in run_ids}
            records.show_status(session, list(ids), run_ids, status)
        return
    schedules = locked_rows(session, list(schedule_of.values()))
    before = snapshot(schedules, SHOWN_COLUMNS)
    for run_id, schedule_id in schedule_of.items():
        row = schedules.get(schedule_id)
        if row is not None:
            show_end(row, run_id, effects.status[run_id].value)
    for run_id in effects.ended:
        row = schedules.get(schedule_of.get(run_id, -1))
        if row is not None:
            # What the outcome does to the schedule: a retry, the breaker,
            # a fixed delay's next run, a held run's start.
            ended_at = effects.values[run_id]["updated_at"]
            settle_run(session, row, run_id, effects.outcome(run_id), ended_at, thresholds)
    write_changed(session, schedules, before, SHOWN_COLUMNS)
