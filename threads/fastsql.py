"""INSERTs without the ORM's per-call SQL compilation, for the path to a run's first byte.

Django compiles each ``save()`` into SQL afresh (about 0.2 ms a statement on
these machines); the first byte of a run waits on four of them. This builds each
model's INSERT once and prepares values through the fields themselves, so types
(UUIDs, JSON, datetimes) are adapted exactly as ``save()`` would. No signals are
sent; nothing in this project listens to them.
"""

from __future__ import annotations

from functools import cache

from django.db import connection
from django.db.models import Field, Model


@cache
def _insert_statement(model: type[Model], vendor: str) -> tuple[str, tuple[Field, ...]]:
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key or not f.auto_created)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})", fields


def insert(*objects: Model) -> None:
    """Inserts new model instances (auto-increment ids are not read back)."""
    with connection.cursor() as cursor:
        for obj in objects:
            sql, fields = _insert_statement(type(obj), connection.vendor)
            values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
            cursor.execute(sql, values)
