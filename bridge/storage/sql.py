"""The few statement shapes that differ between PostgreSQL and SQLite.

Every module of :mod:`bridge.storage` builds its statements with these, so
each dialect trick is written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, TableValuedAlias, any_, bindparam, func, literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bridge.storage.models import UTCDateTime


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def insert_or_skip(session: Session, table: Any) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` of the session's dialect, which can take ``ON CONFLICT DO ...``."""
    if is_postgres(session):
        return postgresql.insert(table)
    return sqlite.insert(table)


def one_of(
    column: Any, values: Iterable[Any] = (), *, postgres: bool, name: str | None = None
) -> ColumnElement[bool]:
    """``column IN (values)``, written ``column = ANY(:array)`` on PostgreSQL.

    An ``IN`` list binds one parameter per value, and psycopg parses a
    statement of over 50 parameters anew at each execution (it caches small
    ones only): about 10 ms for a list of 500, several times per batch. One
    array parameter keeps the statement the same for any number of values,
    so the driver and the server prepare it once.

    With ``name``, the values are bound when the statement is executed
    (``{name: [...]}``), for a statement built once and run many times;
    otherwise ``values`` are bound now.
    """
    if postgres:
        array = ARRAY(column.type)
        parameter = bindparam(name, type_=array) if name else literal(list(values), array)
        return column == any_(parameter)  # type: ignore[no-any-return]
    if name:
        return column.in_(bindparam(name, expanding=True))  # type: ignore[no-any-return]
    return column.in_(list(values))  # type: ignore[no-any-return]


def among(session: Session, column: Any, values: Iterable[Any]) -> ColumnElement[bool]:
    """:func:`one_of` for the session's dialect, the values bound now."""
    return one_of(column, values, postgres=is_postgres(session))


def unnested(name: str, columns: Mapping[str, tuple[Any, Sequence[Any]]]) -> TableValuedAlias:
    """Rows bound as one array per column, for PostgreSQL: ``unnest(:a, :b) AS name(a, b)``.

    ``columns`` gives each column's name, its SQL type and its values, all
    of one length. For the reason given in :func:`one_of`, a statement over
    a batch binds its rows so rather than as one parameter per value: the
    statement stays the same whatever the number of rows.
    """
    arrays = [literal(list(values), ARRAY(kind)) for kind, values in columns.values()]
    return func.unnest(*arrays).table_valued(*columns).render_derived(name=name)


def before(column: Any, now: datetime, seconds: Any, *, postgres: bool) -> ColumnElement[bool]:
    """``column < now - seconds``, where ``seconds`` is a number or a numeric expression (a
    column): what "due for longer than its grace" is in SQL, on either database.

    SQLite keeps times as text, so it compares their Julian days.
    """
    if postgres:
        interval = func.make_interval(0, 0, 0, 0, 0, 0, seconds)
        return column < literal(now, UTCDateTime()) - interval  # type: ignore[no-any-return]
    day = 86400.0
    moment = func.julianday(literal(now, UTCDateTime()))
    return func.julianday(column) < moment - seconds / day  # type: ignore[no-any-return]
