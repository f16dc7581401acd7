"""The few statement shapes that differ between PostgreSQL, SQLite and MySQL.

Every module of :mod:`bridge.storage` builds its statements with these, so
each dialect trick is written once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from sqlalchemy import (
    ARRAY,
    Boolean,
    ColumnElement,
    DateTime,
    Delete,
    Executable,
    Float,
    Insert,
    Integer,
    String,
    Subquery,
    TableValuedAlias,
    Text,
    Update,
    and_,
    any_,
    bindparam,
    column,
    func,
    inspect,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.selectable import Join

from bridge.storage.models import UTCDateTime


def is_postgres(session: Session) -> bool:
    return dialect_of(session) == "postgresql"


def is_mysql(session: Session) -> bool:
    """MySQL or MariaDB (one dialect)."""
    return dialect_of(session) == "mysql"


def insert_of(dialect: str, table: Any) -> Any:
    """An ``INSERT`` of the dialect's own kind, which takes its conflict clause: ``ON
    CONFLICT`` on PostgreSQL and SQLite, ``ON DUPLICATE KEY`` on MySQL."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "mysql":
        return mysql.insert(table)
    return sqlite.insert(table)


def insert_or_skip(session: Session, table: Any) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` of PostgreSQL or SQLite, which can take ``ON CONFLICT DO ...``; on
    MySQL use :func:`insert_skipping` or :func:`upsert`."""
    return insert_of("postgresql" if is_postgres(session) else "sqlite", table)  # type: ignore[no-any-return]


def insert_skipping(session: Session, table: Any, key: Sequence[Any] | None = None) -> Insert:
    """:func:`insert_skipping_on` the session's dialect."""
    return insert_skipping_on(dialect_of(session), table, key)


def insert_skipping_on(dialect: str, table: Any, key: Sequence[Any] | None = None) -> Insert:
    """An ``INSERT`` that leaves as it is a row whose unique ``key`` (any, if None) is taken:
    ``ON CONFLICT DO NOTHING``, or on MySQL, whose ``ON DUPLICATE KEY`` answers any
    unique key, an update that sets the primary key to itself (``INSERT IGNORE``
    would also let bad values through as warnings)."""
    statement = insert_of(dialect, table)
    if dialect != "mysql":
        return statement.on_conflict_do_nothing(index_elements=key)  # type: ignore[no-any-return]
    primary: Any = inspect(table).primary_key[0]
    return statement.on_duplicate_key_update({primary.name: primary})  # type: ignore[no-any-return]


def upsert(
    session: Session,
    table: Any,
    rows: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    key: Sequence[Any],
    updates: Callable[[Any], Mapping[str, Any]],
) -> Insert:
    """An ``INSERT`` of ``rows`` that updates the row already holding a row's ``key``
    instead (see :func:`upserting`)."""
    dialect = dialect_of(session)
    return upserting(dialect, insert_of(dialect, table).values(rows), key, updates)


def upserting(
    dialect: str, statement: Any, key: Sequence[Any], updates: Callable[[Any], Mapping[str, Any]]
) -> Insert:
    """``statement``, an ``INSERT`` of :func:`insert_of` the dialect, made to update the row
    already holding a row's ``key`` instead, with ``updates(proposed)``: ``proposed``
    names the values the ``INSERT`` proposed (PostgreSQL's ``excluded``, MySQL's
    ``VALUES()``)."""
    if dialect == "mysql":
        return statement.on_duplicate_key_update(dict(updates(statement.inserted)))  # type: ignore[no-any-return]
    return statement.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=key, set_=updates(statement.excluded)
    )


def changed_rows(
    session: Session, statement: Update | Delete, key: Any, *columns: Any, by_key: bool = False
) -> Sequence[Any]:
    """Run ``statement`` and return ``columns`` of the rows it changed (after an ``UPDATE``,
    before a ``DELETE``), by ``RETURNING``.

    MySQL has no ``RETURNING`` (MariaDB has it on ``INSERT`` and ``DELETE`` only):
    there the rows the statement's ``WHERE`` finds are locked and their ``key``
    (the primary key) read first, and the statement then changes those rows
    alone, by ``key``, in the same transaction. ``by_key``: the statement picks
    its rows from a list of keys, and they are locked through the primary key,
    in key order. Left to itself the server may read them through another index
    (one that covers the key, or one of a status the statement also checks),
    locking the rows it reads there beyond the list, in another order, and
    deadlocking with a writer that locks them by key.
    """
    if not is_mysql(session):
        returning = statement.returning(*columns)
        return session.execute(returning.execution_options(synchronize_session=False)).all()
    where = statement.whereclause if statement.whereclause is not None else text("1 = 1")
    table = key.expression.table
    locking = select(key).where(where).with_for_update()
    if by_key:
        locking = locking.with_hint(table, "FORCE INDEX (PRIMARY)", "mysql").order_by(key)
    keys = session.scalars(locking).all()
    if not keys:
        return []
    chosen = statement.where(key.in_(keys)).execution_options(synchronize_session=False)
    if by_key and isinstance(chosen, Update):  # MySQL takes no hint on a DELETE
        chosen = chosen.with_hint("FORCE INDEX (PRIMARY)", table, "mysql")
    read = select(*columns).where(key.in_(keys))
    if isinstance(statement, Delete):
        gone = session.execute(read).all()
        session.execute(chosen)
        return gone
    session.execute(chosen)
    return session.execute(read).all()


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


def plain_rows(
    session: Session, statement: Executable, bound: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows ``statement`` reads (or returns), each a dict of its columns, read on the
    session's connection: a page of 100 rows as ORM objects, or through the ORM's
    handling of a statement, cost more of the server's CPU than the database spent on it."""
    result = session.connection().execute(statement, bound)
    keys = tuple(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]


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
    return _unnest(name, columns, arrays)


def unnest_bound(name: str, columns: Mapping[str, Any]) -> TableValuedAlias:
    """:func:`unnested` for a statement built once: ``columns`` gives each column's name
    and SQL type; the statement's caller binds each column's values, a list, with
    :func:`unnest_values`."""
    arrays = [bindparam(f"{name}_{column}", type_=ARRAY(kind)) for column, kind in columns.items()]
    return _unnest(name, columns, arrays)


def unnest_values(name: str, columns: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
    """The parameters of the rows :func:`unnest_bound` named ``name``: each column's
    values under a key of their own (a parameter named as a column an ``UPDATE`` or
    ``INSERT`` writes would be taken for that column's new value)."""
    return {f"{name}_{column}": values for column, values in columns.items()}


def _unnest(name: str, columns: Iterable[str], arrays: Sequence[Any]) -> TableValuedAlias:
    return func.unnest(*arrays).table_valued(*columns).render_derived(name=name)


def json_rows(name: str, columns: Mapping[str, Any]) -> Subquery:
    """Rows bound as one JSON text, for MySQL and MariaDB: ``JSON_TABLE(:name, '$[*]'
    COLUMNS (...)) AS name``, each row an object of its columns' values under their
    names (``columns`` gives each name and SQL type); bind them with :func:`json_values`.

    PyMySQL runs an ``executemany`` of an ``UPDATE`` as one statement per row, a
    round trip each: a batch of 500 rows cost beat 500 waits on the server. One
    JSON text carries the batch in one statement, as :func:`unnest_bound` does on
    PostgreSQL. A string column is in the tables' character set but not their
    binary collation: compare it with :data:`BINARY` applied
    (``.collate(BINARY)``), which keeps the table's index.
    A value the server cannot convert is an error (``ERROR ON ERROR``), not a
    NULL written in its place.
    """
    defined = ", ".join(
        f"{key} {_json_table_type(kind)} PATH '$.{key}' ERROR ON ERROR"
        for key, kind in columns.items()
    )
    rows = text(
        f"SELECT {', '.join(columns)} FROM JSON_TABLE(:{name}, '$[*]' COLUMNS ({defined}))"
        f" AS {name}_json"
    ).columns(*(column(key, kind) for key, kind in columns.items()))
    return rows.subquery(name)


def update_from_rows(
    table: Any, rows: Subquery, key: ColumnElement[bool], *where: ColumnElement[bool]
) -> Update:
    """An ``UPDATE`` of the rows of ``table`` whose primary ``key`` matches a row of
    ``rows`` (a :func:`json_rows` batch), and which meet ``where``; give its values
    keyed by ``table``'s columns (a name would be taken for one of ``rows``).

    The batch is read first and ``table`` through its primary key (``rows
    STRAIGHT_JOIN table FORCE INDEX (PRIMARY)``). Left to choose, MariaDB read a
    table of a few dozen rows first and looked each up in the batch: the update
    then locked every row of the table, rows beyond the batch and out of key
    order, and deadlocked with the workers and the API writing other rows.
    ``where`` goes in the join's condition: SQLAlchemy would write the values
    twice for a ``WHERE`` naming the joined table.
    """
    return update(_StraightJoin(rows, table, and_(key, *where)))


class _StraightJoin(Join):
    """An inner join that MySQL and MariaDB read in its written order."""

    inherit_cache = True


@compiles(_StraightJoin, "mysql")
def _straight_join(join: _StraightJoin, compiler: SQLCompiler, **kw: Any) -> str:
    assert join.onclause is not None, "update_from_rows always joins on the key"
    kw.pop("asfrom", None)
    left = compiler.process(join.left, asfrom=True, **kw)
    right = compiler.process(join.right, asfrom=True, **kw)
    on = compiler.process(join.onclause, **kw)
    return f"{left} STRAIGHT_JOIN {right} FORCE INDEX (PRIMARY) ON {on}"


#: The collation of every table on MySQL and MariaDB (``bridge.storage.mysql``), in which
#: names compare as on PostgreSQL.
BINARY = "utf8mb4_bin"


def json_values(name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> dict[str, str]:
    """The parameter of :func:`json_rows` named ``name``: the rows, each its values of
    ``columns`` in that order, as one JSON text of objects.

    A NULL is left out of its row, not written as JSON ``null``, which MySQL
    before 8.0.21 stores as the text ``'null'`` in a text column: a missing
    value is NULL on every server. Times go in naive UTC, as the tables hold
    them; text as it is, not escaped to ASCII, which would split a character
    outside the BMP into two halves MariaDB's ``JSON_TABLE`` reads as nothing.
    ``name`` must be no other parameter's of the statement.
    """
    objects = [
        {key: value for key, value in zip(columns, row, strict=True) if value is not None}
        for row in rows
    ]
    return {name: json.dumps(objects, ensure_ascii=False, default=_json_value)}


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given; the bridge stores aware UTC times")
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} {value!r} has no JSON form for a JSON_TABLE row")


def _json_table_type(kind: Any) -> str:
    """The SQL type of a ``JSON_TABLE`` column holding values of the SQLAlchemy type ``kind``."""
    if isinstance(kind, DateTime) or isinstance(getattr(kind, "impl", None), DateTime):
        return "DATETIME(6)"
    if isinstance(kind, Boolean):
        return "TINYINT"
    if isinstance(kind, Integer):
        return "BIGINT"
    if isinstance(kind, Float):
        return "DOUBLE"
    # In the tables' character set: a column's own would be the database's default,
    # latin1 on many an older server, which cannot hold the text nor take BINARY.
    if isinstance(kind, String) and not isinstance(kind, Text) and kind.length:
        return f"VARCHAR({kind.length}) CHARACTER SET utf8mb4"
    if isinstance(kind, String):
        return "LONGTEXT CHARACTER SET utf8mb4"
    raise TypeError(f"no JSON_TABLE column type for {kind!r}")


def dialect_of(session: Session) -> str:
    """The name of the session's dialect: ``postgresql``, ``sqlite`` or ``mysql``."""
    return session.get_bind().dialect.name


def before(column: Any, now: datetime, seconds: Any, *, dialect: str) -> ColumnElement[bool]:
    """``column < now - seconds``, where ``seconds`` is a number or a numeric expression (a
    column): what "due for longer than its grace" is in SQL, on either database.

    SQLite keeps times as text, so it compares their Julian days; MySQL counts the
    microseconds from the column to ``now``.
    """
    if dialect == "postgresql":
        interval = func.make_interval(0, 0, 0, 0, 0, 0, seconds)
        return column < literal(now, UTCDateTime()) - interval  # type: ignore[no-any-return]
    if dialect == "mysql":
        elapsed = func.timestampdiff(text("MICROSECOND"), column, literal(now, UTCDateTime()))
        return elapsed > seconds * 1_000_000  # type: ignore[no-any-return]
    day = 86400.0
    moment = func.julianday(literal(now, UTCDateTime()))
    return func.julianday(column) < moment - seconds / day  # type: ignore[no-any-return]
