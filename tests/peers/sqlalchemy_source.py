"""A sqlalchemy-celery-beat store made by sqlalchemy-celery-beat's own code, for the import tests.

Run in the peers' virtualenv with ``SOURCE_DATABASE_URL`` and ``SOURCE_SCHEMA``:
``python sqlalchemy_source.py`` creates its tables in that schema and writes
the schedules below through its models.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

from sqlalchemy_celery_beat.models import (
    CrontabSchedule,
    IntervalSchedule,
    Period,
    PeriodicTask,
    SolarSchedule,
)
from sqlalchemy_celery_beat.session import SessionManager

NOW = datetime.now(UTC).replace(microsecond=0)
TASK = "workers.app.quick"


def seed() -> None:
    manager = SessionManager()
    engine, make_session = manager.create_session(
        os.environ["SOURCE_DATABASE_URL"], schema=os.environ["SOURCE_SCHEMA"]
    )
    manager.prepare_models(engine, schema=os.environ["SOURCE_SCHEMA"])
    with make_session() as session:
        every_4s = IntervalSchedule(every=4, period=Period.SECONDS)
        weekdays = CrontabSchedule(
            minute="0",
            hour="9",
            day_of_week="1-5",
            day_of_month="*",
            month_of_year="*",
            timezone="America/New_York",
        )
        noon = SolarSchedule(event="solar_noon", latitude=-33.8688, longitude=151.2093)
        session.add_all([every_4s, weekdays, noon])
        session.flush()
        session.add_all(
            [
                PeriodicTask(
                    name="every-4s",
                    task=TASK,
                    schedule_model=every_4s,
                    kwargs=json.dumps({"x": 4, "y": 4}),
                    last_run_at=NOW - timedelta(seconds=3),
                    total_run_count=2,
                    description="from sqlalchemy",
                ),
                PeriodicTask(name="ny-mornings", task=TASK, schedule_model=weekdays, priority=7),
                PeriodicTask(name="sydney-noon", task=TASK, schedule_model=noon, enabled=False),
            ]
        )
        session.commit()


if __name__ == "__main__":
    seed()
