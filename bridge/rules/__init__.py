"""The rules: what a schedule is and what beat and the workers decide about it.

Timers and their occurrences, the scheduling policies, a schedule's
definition and its checks, the decisions of the fire sequence, and the
kinds of status and trigger. Pure: nothing here imports SQLAlchemy, Celery or
a driver, or reads the clock. Every function is handed the instants it
needs (``now`` included) and returns values or decisions, so each rule is
tested without I/O.
"""
