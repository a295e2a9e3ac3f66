"""INSERTs without the ORM's per-call SQL compilation, for the hot paths.

Django compiles each ``save()`` into SQL afresh (about 0.2 ms a statement on
these machines) and builds a model instance per row of a ``bulk_create`` (about
6 µs). A run's first byte waits on a few inserts, and its event log writes a
frame per flush for every run at once, so both build each statement once and prepare values through the
fields themselves: types (UUIDs, JSON, datetimes) are adapted exactly as
``save()`` would. No signals are sent; nothing in this project listens to them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
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
def _insertable(model: type[Model]) -> tuple[str, ...]:
    return tuple(f.name for f in model._meta.concrete_fields if not (f.primary_key and f.auto_created))


def insert(*objects: Model) -> None:
    """Inserts new model instances (auto-increment ids are not read back)."""
    with connection.cursor() as cursor:
        for obj in objects:
            model = type(obj)
            names = _insertable(model)
            fields = [model._meta.get_field(name) for name in names]
            values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]  # type: ignore[union-attr]
            cursor.execute(_statement(model, names, connection.vendor), values)


@cache
def _update_statement(model: type[Model], setting: tuple[str, ...], adding: tuple[str, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    assignments = [f"{_column(model, name)} = %s" for name in setting]
    assignments += [f"{_column(model, name)} = {_column(model, name)} + %s" for name in adding]
    key = quote(str(model._meta.pk.column))
    return f"UPDATE {quote(model._meta.db_table)} SET {', '.join(assignments)} WHERE {key} = %s"


def update(model: type[Model], pk: Any, *, setting: dict[str, Any], adding: dict[str, int]) -> int:
    """``UPDATE`` of one row by primary key: ``setting`` its fields to values (prepared as ``save()``
    prepares them) and ``adding`` to its counters in the database, so two writers adding at once
    both count. Returns the number of rows updated."""
    names = tuple(setting)
    statement = _update_statement(model, names, tuple(adding), connection.vendor)
    values = [db_value(model, name, setting[name]) for name in names]
    values += list(adding.values())
    values.append(db_value(model, str(model._meta.pk.name), pk))
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
        return int(cursor.rowcount)


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """``value`` as the database takes it for the field ``name``."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)  # type: ignore[union-attr]


@cache
def _exists_statement(model: type[Model], names: tuple[str, ...], vendor: str) -> str:
    where = " AND ".join(f"{_column(model, name)} = %s" for name in names)
    return f"SELECT 1 FROM {connection.ops.quote_name(model._meta.db_table)} WHERE {where} LIMIT 1"


def exists(model: type[Model], **equal: Any) -> bool:
    """Whether a row has each field ``name`` equal to the value given for it: the ORM's
    ``filter(...).exists()`` without its compilation, which cost 185 µs of the database
    thread's time (holding the GIL) where the statement costs 15 µs."""
    names = tuple(equal)
    values = [db_value(model, name, value) for name, value in equal.items()]
    with connection.cursor() as cursor:
        cursor.execute(_exists_statement(model, names, connection.vendor), values)
        return cursor.fetchone() is not None


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
