"""The hot paths' statements, without the ORM's per-call SQL compilation, and sent together.

Django compiles each ``save()`` into SQL afresh (about 0.2 ms a statement on
these machines) and builds a model instance per row of a ``bulk_create`` (about
6 µs). A run's first byte waits on a few inserts, and its event log writes a
frame per flush for every run at once, so both build each statement once and prepare values through the
fields themselves: types (UUIDs, JSON, datetimes) are adapted exactly as
``save()`` would. No signals are sent; nothing in this project listens to them.
On PostgreSQL the statements of one write go to the server as one query (``execute``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Model


def _column(model: type[Model], name: str) -> str:
    """The quoted column of the field ``name``."""
    return connection.ops.quote_name(str(model._meta.get_field(name).column))  # type: ignore[union-attr]


@cache
def _statement(model: type[Model], names: tuple[str, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(_column(model, name) for name in names)
    marks = ", ".join(["%s"] * len(names))
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"


@cache
def insertable(model: type[Model]) -> tuple[str, ...]:
    """The fields an INSERT of ``model`` names, in the order its values go."""
    return tuple(f.name for f in model._meta.concrete_fields if not (f.primary_key and f.auto_created))


# One statement and its parameters, for ``execute``.
Statement = tuple[str, list[Any]]


def insert_statement(obj: Model) -> Statement:
    """The INSERT of a new model instance (an auto-increment id is not read back)."""
    model = type(obj)
    names = insertable(model)
    fields = [model._meta.get_field(name) for name in names]
    values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]  # type: ignore[union-attr]
    return _statement(model, names, connection.vendor), values


def insert(*objects: Model) -> None:
    """Inserts new model instances (auto-increment ids are not read back), in one round trip."""
    execute(*(insert_statement(obj) for obj in objects))


def execute(*statements: Statement) -> list[tuple[Any, ...]]:
    """Runs the statements in order and returns the rows of the last (none if it returns none).

    On PostgreSQL, with the client-side binding Django uses by default, they go as one query of
    several statements: one round trip to the server, not one each. On these machines a round
    trip costs 0.3 to 2 ms while the server's work on a row is a tenth of that, and the process
    has one database thread: a hundred runs starting at once queued their statements there for
    seconds (bench/stream.py --concurrent on PostgreSQL). A statement that fails stops the ones
    after it and raises, as it would alone; inside a transaction nothing of the failed one is kept
    once the caller rolls back. Elsewhere (SQLite, in process) they run one by one."""
    if not statements:
        return []
    with connection.cursor() as cursor:
        if len(statements) > 1 and _one_query(cursor):
            cursor.execute("; ".join(sql for sql, _ in statements), [v for _, values in statements for v in values])
            while cursor.nextset():
                pass  # to the last statement's result
        else:
            for sql, values in statements:
                cursor.execute(sql, values)
        return list(cursor.fetchall()) if cursor.description is not None else []


def _one_query(cursor: Any) -> bool:
    """Whether the driver sends several statements as one query: psycopg's client-side binding
    cursor does (a server-side binding one prepares each statement alone)."""
    if connection.vendor != "postgresql":
        return False
    import psycopg  # imported already: the connection is psycopg's

    return isinstance(cursor.cursor, psycopg.ClientCursor)


@cache
def _update_statement(model: type[Model], setting: tuple[str, ...], adding: tuple[str, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    assignments = [f"{_column(model, name)} = %s" for name in setting]
    assignments += [f"{_column(model, name)} = {_column(model, name)} + %s" for name in adding]
    key = quote(str(model._meta.pk.column))
    return f"UPDATE {quote(model._meta.db_table)} SET {', '.join(assignments)} WHERE {key} = %s"


def update_statement(
    model: type[Model], pk: Any, *, setting: dict[str, Any], adding: Mapping[str, int | float]
) -> Statement:
    """``UPDATE`` of one row by primary key: ``setting`` its fields to values (prepared as ``save()``
    prepares them) and ``adding`` to its counters in the database, so two writers adding at once
    both count."""
    names = tuple(setting)
    statement = _update_statement(model, names, tuple(adding), connection.vendor)
    values = [db_value(model, name, setting[name]) for name in names]
    values += list(adding.values())
    values.append(db_value(model, str(model._meta.pk.name), pk))
    return statement, values


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """``value`` as the database takes it for the field ``name``."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)  # type: ignore[union-attr]


def exists_statement(model: type[Model], **equal: Any) -> Statement:
    """A query whose one row says that a row has each field ``name`` equal to the value given for
    it (no row: none has)."""
    where = tuple((name, False) for name in equal)
    values = [db_value(model, name, value) for name, value in equal.items()]
    return _select_statement(model, (), where, (), connection.vendor), values


def exists(model: type[Model], **equal: Any) -> bool:
    """Whether a row has each field ``name`` equal to the value given for it: the ORM's
    ``filter(...).exists()`` without its compilation, which cost 185 µs of the database
    thread's time (holding the GIL) where the statement costs 15 µs."""
    return bool(execute(exists_statement(model, **equal)))


@cache
def _select_statement(
    model: type[Model],
    names: tuple[str, ...],
    where: tuple[tuple[str, bool], ...],
    order_by: tuple[str, ...],
    vendor: str,
) -> str:
    """SELECT of the fields ``names`` (none: ``1``) of the first row whose fields ``where`` are each
    ``= %s``, or ``IS NULL`` where marked so."""
    columns = ", ".join(_column(model, name) for name in names) or "1"
    conditions = " AND ".join(f"{_column(model, name)} {'IS NULL' if null else '= %s'}" for name, null in where)
    order = f" ORDER BY {', '.join(_column(model, name) for name in order_by)}" if order_by else ""
    table = connection.ops.quote_name(model._meta.db_table)
    return f"SELECT {columns} FROM {table}{f' WHERE {conditions}' if conditions else ''}{order} LIMIT 1"


def _first_row(
    model: type[Model], names: tuple[str, ...], order_by: tuple[str, ...], equal: dict[str, Any]
) -> tuple[Any, ...] | None:
    where = tuple((name, value is None) for name, value in equal.items())
    statement = _select_statement(model, names, where, order_by, connection.vendor)
    values = [db_value(model, name, value) for name, value in equal.items() if value is not None]
    rows = execute((statement, values))
    return rows[0] if rows else None


def _from_db(model: type[Model], fields: Sequence[Any], row: tuple[Any, ...]) -> list[Any]:
    """``row``'s values as the ORM reads them: each through the backend's and the field's converters,
    in that order (as ``SQLCompiler.apply_converters`` does: a JSON text parsed, a SQLite 0 made
    False, a decimal's places kept)."""
    values = list(row)
    for i, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        for converter in converters:
            values[i] = converter(values[i], column, connection)
    return values


def first[M: Model](model: type[M], *, order_by: tuple[str, ...] = (), **equal: Any) -> M | None:
    """The first row (by the fields ``order_by``; any, without) whose fields equal the values given
    (None: IS NULL), as an instance of ``model``: the ORM's ``filter(...).first()`` without its
    compilation, which cost 0.57 ms of the database thread's time a lookup of an agent (holding the
    GIL) where this costs 0.15 ms, the fields' converters included. No ``order_by`` is for a lookup
    that finds one row."""
    fields = model._meta.concrete_fields
    row = _first_row(model, tuple(field.name for field in fields), order_by, equal)
    if row is None:
        return None
    return model.from_db(connection.alias, [field.attname for field in fields], _from_db(model, fields, row))


def first_values(
    model: type[Model], names: tuple[str, ...], *, order_by: tuple[str, ...] = (), **equal: Any
) -> tuple[Any, ...] | None:
    """The fields ``names`` of the row ``first`` finds (a foreign key's as its id), or None."""
    row = _first_row(model, names, order_by, equal)
    if row is None:
        return None
    return tuple(_from_db(model, [model._meta.get_field(name) for name in names], row))


# Rows per multi-row INSERT on SQLite, largest first: a chunk goes in as statements of these
# sizes (1,234 rows: one of 1,024, then 128, 64, 16 and 2), so a dozen statements at most are
# compiled and cached whatever the chunk's length. Each statement lets go of the GIL while SQLite
# works and must take it back from the busy event loop afterwards, which can take a whole switch
# interval: with hundred-row statements the event log of a hundred busy runs fell seconds behind
# (bench/stream.py --concurrent).
ROW_LADDER = tuple(2**n for n in range(10, -1, -1))


@cache
def _rows_statement(model: type[Model], names: tuple[str, ...], vendor: str, count: int) -> str:
    """An INSERT of ``count`` rows at once, with the driver's own ``?`` placeholders."""
    head, _, marks = _statement(model, names, vendor).rpartition(" VALUES ")
    return f"{head} VALUES {', '.join([marks.replace('%s', '?')] * count)}"


@cache
def _ladder(columns: int, variable_limit: int) -> tuple[int, ...]:
    """ROW_LADDER within SQLite's limit on bound parameters (32,766 since SQLite 3.32, 999 before)."""
    most = max(1, variable_limit // columns)
    return tuple(dict.fromkeys(min(size, most) for size in ROW_LADDER))


def insert_rows(model: type[Model], names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> None:
    """Inserts rows of values already in database form (see ``db_value``) in as few statements
    as it can: multi-row INSERTs (ROW_LADDER) on SQLite, else executemany (pipelined by psycopg)."""
    with connection.cursor() as cursor:
        if connection.vendor != "sqlite":
            cursor.executemany(_statement(model, names, connection.vendor), rows)
            return
        # Not executemany: SQLite steps it once per row and Python's sqlite3 lets go of the
        # GIL and takes it back at each step, so the event loop and this thread traded it
        # per event.
        # The driver's cursor is called past Django's, whose rewriting of %s into ? took a
        # regular expression over the whole statement; its errors are still Django's.
        raw = cursor.cursor
        limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        with connection.wrap_database_errors:
            start, left = 0, len(rows)
            for size in _ladder(len(names), limit):
                while left >= size:
                    part = rows[start : start + size]
                    statement = _rows_statement(model, names, connection.vendor, size)
                    sqlite3.Cursor.execute(raw, statement, [value for row in part for value in row])
                    start, left = start + size, left - size
