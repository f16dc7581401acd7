"""What the schema is on MySQL and MariaDB, where their defaults differ from the store's needs.

Registered once, for the ``mysql`` dialect only (MariaDB through PyMySQL is
that dialect too), when the migrations' environment imports this module:

* a timestamp is ``DATETIME(6)``: plain ``DATETIME`` drops the microseconds
  that order runs and tell one fire from the next;
* a float is ``DOUBLE``: MySQL's ``FLOAT`` is single precision, and a sum of
  runtimes would lose seconds;
* a text is ``LONGTEXT``: ``TEXT`` holds 64 KiB, less than a task's
  traceback or result may be;
* every table is InnoDB (row locks, ``SKIP LOCKED``, foreign keys) in
  ``utf8mb4`` with the binary collation, so that names compare as they do on
  PostgreSQL: ``Job`` and ``job`` are two schedules, and a prefix is matched
  case by case.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import DateTime, Float, Text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateTable

from bridge.storage.sql import BINARY

#: The options of every table the migrations create.
TABLE_OPTIONS = f"ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={BINARY}"


@compiles(DateTime, "mysql")
def _datetime(_type: DateTime, _compiler: Any, **_kw: Any) -> str:
    return "DATETIME(6)"


@compiles(Float, "mysql")
def _float(_type: Float[Any], _compiler: Any, **_kw: Any) -> str:
    return "DOUBLE"


@compiles(Text, "mysql")
def _text(_type: Text, _compiler: Any, **_kw: Any) -> str:
    return "LONGTEXT"


@compiles(CreateTable, "mysql")
def _create_table(create: CreateTable, compiler: Any, **kw: Any) -> str:
    return f"{compiler.visit_create_table(create, **kw).rstrip()} {TABLE_OPTIONS}"
