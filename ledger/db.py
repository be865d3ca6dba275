"""The ledger database: SQLite at $SWARM_HOME/ledger.db, or whatever SWARM_DB_URL names
(PostgreSQL), with its schema kept current by Alembic migrations."""

from __future__ import annotations

import fcntl
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from ledger.config import Settings, database_url
from ledger.errors import SwarmError
from ledger.reader import SCHEMA_HEAD, VERSION_TABLE, SqlAlchemyReader

if TYPE_CHECKING:  # alembic and sqlmodel load when a migration or a session needs them
    from alembic.config import Config
    from sqlmodel import Session

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK = 0x5357_524D  # PostgreSQL advisory lock: one migration at a time
CONNECT_TIMEOUT = 10
EXAMPLES = "sqlite:////path/to/ledger.db or postgresql://user@host:5432/swarm"


class DatabaseUnavailable(SwarmError):
    """The ledger database cannot be opened or stopped answering."""


def redact(url: str | URL) -> str:
    """A database URL fit to print: any password replaced by ***."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise SwarmError(
            f"SWARM_DB_URL {redact(url)!r} is not a database URL; set it like {EXAMPLES}."
        ) from exc
    backend = parsed.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    if backend not in ("sqlite", "postgresql"):
        raise SwarmError(
            f"SWARM_DB_URL {redact(parsed)!r} names a {backend} database; the ledger runs on SQLite or "
            f"PostgreSQL, so set it like {EXAMPLES}."
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 is the driver Swarm installs
    return parsed


def open_engine(url: str) -> Engine:
    """An engine for `url`, checked by connecting once; bad input becomes one clear sentence."""
    parsed = _parse(url)
    shown = redact(url)
    sqlite = parsed.get_backend_name() == "sqlite"
    try:
        if sqlite:
            engine = _sqlite_engine(parsed)
        else:
            engine = create_engine(
                parsed, connect_args={"connect_timeout": CONNECT_TIMEOUT}, pool_pre_ping=True
            )
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except NoSuchModuleError as exc:
        raise SwarmError(
            f"SWARM_DB_URL {shown!r} asks for a driver Swarm does not have; use {EXAMPLES}."
        ) from exc
    except (DBAPIError, OSError) as exc:
        fix = (
            "choose a writable file in SWARM_DB_URL (or SWARM_HOME)"
            if sqlite
            else "start it or point SWARM_DB_URL at a reachable database"
        )
        raise DatabaseUnavailable(
            f"The ledger database at {shown} cannot be opened ({_reason(exc)}); {fix}."
        ) from exc
    return engine


def _sqlite_engine(url: URL) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers (`show`) never wait for the indexer
        cursor.execute(
            "PRAGMA synchronous=NORMAL"
        )  # durable at checkpoints; a crash loses no committed range
        cursor.close()

    return engine


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return redact(first).rstrip(".")


def alembic_config(connection: Any = None) -> Config:
    """Alembic's configuration, built in code: the scripts ship inside the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("version_table", VERSION_TABLE)
    config.attributes["connection"] = connection
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Brings the schema to `revision` (default: the newest), keeping every row; idempotent.

    One process migrates at a time: PostgreSQL by an advisory lock, a SQLite file by a lock
    file beside it (two services started together on a fresh file would otherwise both
    create its tables). A database already at the newest schema is read, not migrated: Alembic's
    upgrade, a third of a second of every process that opens the ledger, is left unloaded."""
    if revision == "head":
        with engine.connect() as conn:  # the readers' own look at the version table
            if SqlAlchemyReader(conn).schema_revision() == SCHEMA_HEAD:
                return
    from alembic import command

    with _sqlite_migration_lock(engine), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        command.upgrade(alembic_config(conn), revision)


@contextmanager
def _sqlite_migration_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def open_ledger(url: str) -> Engine:
    """The ledger database at `url`, opened and migrated to the newest schema."""
    engine = open_engine(url)
    with database_errors(url):
        migrate(engine)
    return engine


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Turns a database that stops answering mid-way into one sentence naming it."""
    try:
        yield
    except DBAPIError as exc:
        if exc.connection_invalidated or isinstance(exc.orig, _unavailable_errors()):
            raise DatabaseUnavailable(
                f"The ledger database at {redact(url)} stopped answering ({_reason(exc)}); "
                "check that it is running, then run the command again."
            ) from exc
        raise


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    import sqlite3

    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg

        errors.append(psycopg.OperationalError)
    except ImportError:  # pragma: no cover - psycopg is a dependency
        pass
    return tuple(errors)


@contextmanager
def session(engine: Engine) -> Iterator[Session]:
    """A SQLModel session that commits on success and rolls back on error."""
    from sqlmodel import Session

    with Session(engine) as s:
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise


@contextmanager
def open_session(settings: Settings) -> Iterator[Session]:
    """A session on the configured ledger database (SWARM_DB_URL or $SWARM_HOME/ledger.db), migrated."""
    url = database_url(settings.home)
    engine = open_ledger(url)
    try:
        with database_errors(url), session(engine) as s:
            yield s
    finally:
        engine.dispose()


def forget_chain(engine: Engine, chain_id: int) -> None:
    """Deletes every row of chain `chain_id` from every ledger table — for a devnet started
    afresh under the same chain id, whose old rows would describe contracts that are gone.

    The tables are read from the database itself, so those the market and the oracle own
    (market/records.py, oracle/records.py) go too without the ledger importing either."""
    from sqlalchemy import MetaData

    with engine.begin() as connection:
        tables = MetaData()
        tables.reflect(connection)
        for table in reversed(tables.sorted_tables):
            if "chain_id" in table.c:
                connection.execute(table.delete().where(table.c.chain_id == chain_id))
