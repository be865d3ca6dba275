"""The ledger database opened for reading only, neither created nor migrated, and without
loading SQLAlchemy for the default SQLite file: what `swarm provider status` needs to
answer at once. PostgreSQL (and any unusual SQLite URL) is read through SQLAlchemy.

A reader runs plain SQL with named parameters (`:chain`) and returns rows as tuples."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ledger.config import Settings, database_url


def version_table(owner: str) -> str:
    """The table holding the schema revision of `owner`'s tables (ledger.db.Schema); not Alembic's
    `alembic_version`, since the database may hold other applications' schemas too."""
    return f"{owner}_schema_version"


VERSION_TABLE = version_table("ledger")
SCHEMA_HEAD = "0002"  # the ledger's newest revision (a test holds it to the scripts in migrations/)


class Reader(Protocol):
    def one(self, sql: str, **params: Any) -> tuple | None: ...

    def schema_revision(self) -> str | None: ...


class SqliteReader:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def one(self, sql: str, **params: Any) -> tuple | None:
        return self.connection.execute(sql, params).fetchone()

    def schema_revision(self) -> str | None:
        if self.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name",
                    name=VERSION_TABLE) is None:
            return None  # nothing was ever migrated here
        row = self.one(f"SELECT version_num FROM {VERSION_TABLE}")
        return None if row is None else row[0]


class SqlAlchemyReader:
    """Over a SQLAlchemy Connection or Session."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def one(self, sql: str, **params: Any) -> tuple | None:
        from sqlalchemy import text

        row = self.connection.execute(text(sql), params).fetchone()
        return None if row is None else tuple(row)

    def schema_revision(self) -> str | None:
        from sqlalchemy import inspect

        if not inspect(self.connection).has_table(VERSION_TABLE):
            return None  # nothing was ever migrated here
        row = self.one(f"SELECT version_num FROM {VERSION_TABLE}")
        return None if row is None else row[0]


@contextmanager
def read_ledger(settings: Settings) -> Iterator[Reader | None]:
    """A reader of the configured ledger database; None when it does not exist yet or its
    schema is not this code's (`swarm ledger sync` creates and migrates it)."""
    url = database_url(settings.home)
    path = _plain_sqlite_file(url)
    if path is not None:
        if not path.exists():
            yield None
            return
        connection = sqlite3.connect(path, timeout=30)
        try:
            reader = SqliteReader(connection)
            yield reader if reader.schema_revision() == SCHEMA_HEAD else None
        finally:
            connection.close()
        return
    from ledger.db import database_errors, open_engine  # SQLAlchemy: the SQLite file above is read without it

    engine = open_engine(url)
    try:
        with database_errors(url), engine.connect() as sql_connection:
            sql_reader = SqlAlchemyReader(sql_connection)
            yield sql_reader if sql_reader.schema_revision() == SCHEMA_HEAD else None
    finally:
        engine.dispose()


def _plain_sqlite_file(url: str) -> Path | None:
    """The file of a `sqlite:///path` URL with no driver, options or in-memory name; else None."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    database = url[len(prefix):]
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()
