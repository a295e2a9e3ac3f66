"""INSERTs without the ORM's per-call SQL compilation, for the hot paths.

Django compiles each ``save()`` into SQL afresh (about 0.2 ms a statement on
these machines) and builds a model instance per row of a ``bulk_create`` (about
6 µs). A run's first byte waits on a few inserts, and its event log writes one
row per event, so both build each statement once and prepare values through the
fields themselves: types (UUIDs, JSON, datetimes) are adapted exactly as
``save()`` would. No signals are sent; nothing in this project listens to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Model


@cache
def _statement(model: type[Model], names: tuple[str, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(model._meta.get_field(name).column)) for name in names)  # type: ignore[union-attr]
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


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """``value`` as the database takes it for the field ``name``."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)  # type: ignore[union-attr]


def insert_rows(model: type[Model], names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> None:
    """Inserts rows of values already in database form (see ``db_value``) in one executemany."""
    with connection.cursor() as cursor:
        cursor.executemany(_statement(model, names, connection.vendor), rows)
