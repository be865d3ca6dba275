"""Who builds which tables of the ledger database (docs/architecture.md §3): the ledger its
indexer's, the market and the oracle theirs, each by its own line of revisions recorded in its own
version table. A database the one line before them built (revisions 0001 to 0011, every table in
it), opened by today's Swarm, keeps every row and ends with the schema a new database gets, on
SQLite and PostgreSQL, whichever owner opens it first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import JSON, Column, MetaData, inspect, select, text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from ledger.db import (
    LEDGER,
    SINGLE_LINE,
    SINGLE_LINE_TABLE,
    Schema,
    alembic_config,
    current_revision,
    drift,
    open_engine,
    open_ledger,
    upgrade,
)
from ledger.errors import SwarmError
from ledger.indexer.models import TABLES
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from oracle.migrations import ORACLE
from oracle.records import CanaryRecord, ChallengeRecord, OracleEpoch, ProbeSample, ProviderScore

OWNERS = (LEDGER, MARKET, ORACLE)
MODELS = {LEDGER: TABLES, MARKET: (MarketJob, MarketTransition),
          ORACLE: (ProbeSample, ChallengeRecord, CanaryRecord, OracleEpoch, ProviderScore)}
RENAMED = {("challenge_results", "checksum_ok"): "proof_ok"}  # by the oracle's 0007
ROWS = 2  # of every table, before an upgrade


def revisions(schema: Schema) -> list[str]:
    """`schema`'s line, oldest first."""
    walked = ScriptDirectory.from_config(alembic_config(schema)).walk_revisions()
    return [script.revision for script in reversed(list(walked))]


def version_tables(engine: Engine) -> set[str]:
    return {name for name in inspect(engine).get_table_names() if "version" in name}


def single_line(engine: Engine, reached: str) -> None:
    """The database the single line left at `reached`: its revisions run in their order (the
    owners' scripts are that line's, under the same numbers), recorded as it recorded them, in its
    one version table."""
    owner_of = {revision: schema for schema in OWNERS for revision in revisions(schema)}
    for revision in SINGLE_LINE[: SINGLE_LINE.index(reached) + 1]:
        upgrade(engine, owner_of[revision], revision)
    with engine.begin() as conn:
        for schema in OWNERS:
            conn.execute(text(f"DROP TABLE IF EXISTS {schema.version_table}"))
        conn.execute(text(f"CREATE TABLE {SINGLE_LINE_TABLE} (version_num VARCHAR(32) NOT NULL, "
                          f"CONSTRAINT {SINGLE_LINE_TABLE}_pkc PRIMARY KEY (version_num))"))
        conn.execute(text(f"INSERT INTO {SINGLE_LINE_TABLE} (version_num) VALUES (:reached)"),
                     {"reached": reached})


def _value(column: Column, n: int) -> Any:
    """Row `n`'s value for `column`, of the column's own type (digits for text, which is also how
    SQLite holds a Uint256)."""
    if isinstance(column.type, JSON):
        return {"n": n}
    kind = column.type.python_type
    if kind is bool:
        return n % 2 == 0
    if kind is int:
        return n
    if kind is float:
        return n + 0.5
    if kind is Decimal:
        return Decimal(10**40 + n)
    if kind is str:
        length = getattr(column.type, "length", None) or 8
        return f"{n:0{length}d}"
    raise AssertionError(f"{column.table.name}.{column.name}: no sample value for {kind}")


def owned_tables(engine: Engine) -> MetaData:
    tables = MetaData()
    tables.reflect(engine)
    for name in [name for name in tables.tables if "version" in name]:
        tables.remove(tables.tables[name])
    return tables


def fill(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """ROWS rows in every table the database holds; returns every row, by table."""
    tables = owned_tables(engine)
    with engine.begin() as conn:
        for table in tables.sorted_tables:
            conn.execute(table.insert(), [{c.name: _value(c, n) for c in table.columns}
                                          for n in range(1, ROWS + 1)])
    return dump(engine)


def dump(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    out = {}
    with engine.connect() as conn:
        for table in owned_tables(engine).sorted_tables:
            rows = [dict(row) for row in conn.execute(select(table)).mappings()]
            out[table.name] = sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))
    return out


def schema_of(engine: Engine) -> dict[str, Any]:
    """Every owner's tables as the database describes them: columns in order (type, nullability,
    default), primary key and indexes."""
    found = inspect(engine)
    return {
        table: {
            "columns": [(c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                        for c in found.get_columns(table)],
            "primary key": found.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                              for i in found.get_indexes(table)),
        }
        for table in sorted(found.get_table_names()) if "version" not in table
    }


@pytest.fixture
def fresh_url(ledger_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A second empty database on `ledger_url`'s backend."""
    if ledger_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture
def engine(ledger_url: str) -> Iterator[Engine]:
    opened = open_engine(ledger_url)
    yield opened
    opened.dispose()


# ── each owner's line ────────────────────────────────────────────────────────
def test_each_single_line_revision_belongs_to_one_owner_and_each_head_is_its_newest() -> None:
    lines = {schema: revisions(schema) for schema in OWNERS}
    assert sorted(r for line in lines.values() for r in line if r in SINGLE_LINE) == list(SINGLE_LINE)
    for schema, line in lines.items():
        assert schema.head == line[-1] == ScriptDirectory.from_config(
            alembic_config(schema)).get_current_head()
        assert schema.version_table == f"{schema.owner}_schema_version"


def test_the_ledger_builds_its_own_tables_only_and_each_owner_adds_exactly_its_own(
    ledger_url: str,
) -> None:
    """Opened by the ledger alone, the database holds the indexer's tables; a process that hands
    it the market's line gets the market's too, and so on: each owner's revisions build what its
    models declare, nothing more (no drift, and `alembic check` finds nothing to add)."""
    expected = {LEDGER.version_table} | {model.__tablename__ for model in TABLES}
    for owners in ((), (MARKET,), (MARKET, ORACLE)):
        engine = open_ledger(ledger_url, *owners)
        try:
            for schema in owners:
                expected |= {schema.version_table} | set(schema.models().tables)
            assert set(inspect(engine).get_table_names()) == expected
            for schema in (LEDGER, *owners):
                assert current_revision(engine, schema) == schema.head
                assert drift(engine, schema) == []
                with engine.begin() as conn:  # `alembic check`, through the environment's own filter
                    command.check(alembic_config(schema, conn, compare=True))
        finally:
            engine.dispose()


# ── a database the single line built ─────────────────────────────────────────
@pytest.mark.parametrize("reached", SINGLE_LINE)
def test_a_database_the_single_line_left_keeps_every_row_and_ends_as_a_new_one(
    reached: str, engine: Engine, ledger_url: str, fresh_url: str
) -> None:
    """Each owner starts from the newest of its revisions the single line reached, runs the rest
    of its line, and leaves that line's version table as it stood."""
    single_line(engine, reached)
    before = fill(engine)

    open_ledger(ledger_url, MARKET, ORACLE).dispose()

    for schema in OWNERS:
        assert current_revision(engine, schema) == schema.head
        assert drift(engine, schema) == []
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {SINGLE_LINE_TABLE}")).scalars().all() == [reached]
    after = dump(engine)
    for table, rows in before.items():
        names = {name: RENAMED.get((table, name), name) for name in rows[0]}
        kept = [{name: row[new] for name, new in names.items()} for row in after[table]]
        assert kept == rows, table
    fresh = open_ledger(fresh_url, MARKET, ORACLE)
    try:
        assert schema_of(engine) == schema_of(fresh)
    finally:
        fresh.dispose()


def test_a_database_of_todays_schema_reads_back_through_every_model_after_the_upgrade(
    engine: Engine, ledger_url: str
) -> None:
    """At 0011, as today's Swarm leaves every database it opens: every row is still a row of its
    model, on both backends."""
    single_line(engine, SINGLE_LINE[-1])
    fill(engine)
    upgraded = open_ledger(ledger_url, MARKET, ORACLE)
    try:
        with Session(upgraded) as session:
            for models in MODELS.values():
                for model in models:
                    assert len(session.scalars(select(model)).all()) == ROWS, model.__tablename__
    finally:
        upgraded.dispose()


def test_owners_that_open_a_single_line_database_later_still_find_their_rows(
    engine: Engine, ledger_url: str
) -> None:
    """The ledger alone opens it first (`swarm provider claim`); the market and the oracle, each in
    its turn, then take their tables where the single line left them, rows and all, instead of
    building them again."""
    single_line(engine, SINGLE_LINE[-1])
    before = fill(engine)
    open_ledger(ledger_url).dispose()
    assert [current_revision(engine, schema) for schema in OWNERS] == [LEDGER.head, None, None]
    open_ledger(ledger_url, ORACLE).dispose()
    assert [current_revision(engine, schema) for schema in OWNERS] == [LEDGER.head, None, ORACLE.head]
    open_ledger(ledger_url, MARKET).dispose()
    assert [current_revision(engine, schema) for schema in OWNERS] == [LEDGER.head, MARKET.head, ORACLE.head]
    assert dump(engine) == before
    assert version_tables(engine) == {SINGLE_LINE_TABLE} | {schema.version_table for schema in OWNERS}


def test_a_single_line_revision_no_swarm_wrote_is_refused_in_one_sentence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE {SINGLE_LINE_TABLE} (version_num VARCHAR(32) PRIMARY KEY)"))
            conn.execute(text(f"INSERT INTO {SINGLE_LINE_TABLE} VALUES ('0099')"))
        with pytest.raises(SwarmError, match=r"names revision '0099', which no Swarm wrote .*0001 to 0011.*; "
                                             r"restore the database from a backup\.$"):
            open_ledger(url)
        assert current_revision(engine) is None  # nothing was written
    finally:
        engine.dispose()


def test_a_single_line_version_table_with_no_revision_in_it_leaves_every_owner_to_build_its_own(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE {SINGLE_LINE_TABLE} (version_num VARCHAR(32) PRIMARY KEY)"))
        open_ledger(url, MARKET, ORACLE).dispose()
        assert [current_revision(engine, schema) for schema in OWNERS] == [s.head for s in OWNERS]
        for schema in OWNERS:
            assert drift(engine, schema) == []
    finally:
        engine.dispose()
