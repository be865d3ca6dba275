"""The ledger database: SQLite at $SWARM_HOME/ledger.db, or whatever SWARM_DB_URL names
(PostgreSQL), with its schema kept current by Alembic migrations.

Each package that owns tables in it owns their migrations (`Schema`): a line of revisions in its
own `migrations/versions`, recorded in a version table of its own. The ledger runs every line
through one environment (ledger/migrations/env.py) and knows its own only; a process hands it the
lines of the tables it reads (`open_ledger(url, MARKET, ORACLE)`)."""

from __future__ import annotations

import fcntl
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import MetaData, create_engine, event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from ledger.config import Settings, database_url
from ledger.errors import SwarmError
from ledger.reader import SCHEMA_HEAD, version_table

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


@dataclass(frozen=True)
class Schema:
    """One owner's tables in the ledger database, and the line of Alembic revisions that builds
    them, recorded in a version table of its own (`version_table(owner)`). The ledger owns its
    indexer's tables (`LEDGER`); the market (`market.migrations.MARKET`) and the oracle
    (`oracle.migrations.ORACLE`) hand theirs to `migrate`, so the ledger imports neither.

    `head` is the line's newest revision (a test holds it to the scripts), read to open a current
    database without loading Alembic; `models` loads the owner's models' metadata, which only a
    comparison with the database (`drift`) needs."""

    owner: str
    versions: Path
    head: str
    models: Callable[[], MetaData]

    @property
    def version_table(self) -> str:
        return version_table(self.owner)


def _ledger_models() -> MetaData:
    from ledger.indexer.models import metadata

    return metadata


LEDGER = Schema("ledger", MIGRATIONS / "versions", SCHEMA_HEAD, _ledger_models)

# Before each owner kept its own line, one line of revisions, 0001 to 0011 recorded in this table,
# built every table; the ledger's line, the market's and the oracle's keep those revisions under
# their numbers. The table is left as that line left it, for each owner to start from.
SINGLE_LINE_TABLE = "ledger_alembic_version"
SINGLE_LINE = tuple(f"{n:04d}" for n in range(1, 12))


def alembic_config(schema: Schema, connection: Any = None, compare: bool = False) -> Config:
    """Alembic's configuration for `schema`'s line, built in code: the scripts ship inside the
    packages, and one environment (ledger/migrations/env.py) runs every owner's. `compare` gives
    it the owner's models, for `alembic check` or `revision --autogenerate` run through it."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")  # a directory whose path has a space stays one
    config.set_main_option("version_locations", str(schema.versions))
    config.set_main_option("version_table", schema.version_table)
    config.attributes["connection"] = connection
    config.attributes["metadata"] = schema.models() if compare else None
    return config


def migrate(engine: Engine, *owners: Schema) -> None:
    """Brings the ledger's tables and each of `owners`' to their newest schema, keeping every row;
    idempotent. A process names the owners whose tables it reads: the market's service reads the
    oracle's scores, the oracle the market's evidence.

    One process migrates at a time: PostgreSQL by an advisory lock, a SQLite file by a lock
    file beside it (two services started together on a fresh file would otherwise both
    create its tables). A database already at the newest schema is read, not migrated: Alembic's
    upgrade, a third of a second of every process that opens the ledger, is left unloaded."""
    schemas = list(dict.fromkeys((LEDGER, *owners)))
    with engine.connect() as conn:  # each owner's version table: a current database loads no Alembic
        if all(_revision(conn, schema) == schema.head for schema in schemas):
            return
    with _migrating(engine) as conn:
        for schema in schemas:
            _upgrade(conn, schema, "head")


def upgrade(engine: Engine, schema: Schema, revision: str = "head") -> None:
    """Brings `schema`'s tables alone to `revision` of its line: how a test builds an older schema."""
    with _migrating(engine) as conn:
        _upgrade(conn, schema, revision)


@contextmanager
def _migrating(engine: Engine) -> Iterator[Connection]:
    with _sqlite_migration_lock(engine), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        yield conn


def _upgrade(conn: Connection, schema: Schema, revision: str) -> None:
    from alembic import command

    config = alembic_config(schema, conn)
    _adopt_single_line(conn, schema, config)
    command.upgrade(config, revision)


def _adopt_single_line(conn: Connection, schema: Schema, config: Config) -> None:
    """Records where the single line left `schema`'s tables, the first time its owner opens a
    database that line built: at the newest of its revisions the line had reached. An owner none of
    whose revisions it reached starts from nothing, as on a new database."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    found = inspect(conn)
    if found.has_table(schema.version_table) or not found.has_table(SINGLE_LINE_TABLE):
        return
    reached = conn.execute(text(f"SELECT version_num FROM {SINGLE_LINE_TABLE}")).scalar()
    if reached is None:
        return  # the line never finished a revision here: nothing of it to take
    if reached not in SINGLE_LINE:
        raise SwarmError(
            f"The ledger database's {SINGLE_LINE_TABLE} names revision {reached!r}, which no Swarm "
            f"wrote (they run {SINGLE_LINE[0]} to {SINGLE_LINE[-1]}); restore the database from a backup."
        )
    script = ScriptDirectory.from_config(config)
    own = {revision.revision for revision in script.walk_revisions()}
    built = [revision for revision in SINGLE_LINE[: SINGLE_LINE.index(reached) + 1] if revision in own]
    if built:
        context = MigrationContext.configure(conn, opts={"version_table": schema.version_table})
        context.stamp(script, built[-1])


def _revision(conn: Connection, schema: Schema) -> str | None:
    """`schema`'s revision in the database; None where its tables were never built (or adopted)."""
    if not inspect(conn).has_table(schema.version_table):
        return None
    return conn.execute(text(f"SELECT version_num FROM {schema.version_table}")).scalar()


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


def current_revision(engine: Engine, schema: Schema = LEDGER) -> str | None:
    """`schema`'s revision in the database at `engine`; None where its tables were never built."""
    with engine.connect() as conn:
        return _revision(conn, schema)


def drift(engine: Engine, schema: Schema) -> list[Any]:
    """How `schema`'s models differ from its tables in the database (what `alembic check` reports):
    empty when its revisions build exactly what its models declare. Other owners' tables and every
    version table are left out of the comparison."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    metadata = schema.models()

    def owned(name: str | None, kind: str, _parents: Any) -> bool:
        return kind != "table" or name in metadata.tables

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": owned})
        return list(compare_metadata(context, metadata))


def open_ledger(url: str, *owners: Schema) -> Engine:
    """The ledger database at `url`, opened, with the ledger's tables and `owners`' migrated to
    their newest schema."""
    engine = open_engine(url)
    with database_errors(url):
        migrate(engine, *owners)
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
    """A session on the configured ledger database (SWARM_DB_URL or $SWARM_HOME/ledger.db), its
    ledger's tables migrated."""
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
    with engine.begin() as connection:
        tables = MetaData()
        tables.reflect(connection)
        for table in reversed(tables.sorted_tables):
            if "chain_id" in table.c:
                connection.execute(table.delete().where(table.c.chain_id == chain_id))
