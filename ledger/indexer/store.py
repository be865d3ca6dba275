"""Writes to the ledger database: one indexed block range, or one rollback, per transaction.

The cursor is moved first in each transaction, with a compare-and-set on where it
was: that takes the write lock (SQLite) or the row lock (PostgreSQL), so two indexers
on one database cannot both write a range, and a range is written whole or not at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from ledger.indexer.decode import Log
from ledger.indexer.models import (
    BlockRow,
    ClaimRow,
    Cursor,
    Epoch,
    EventRow,
    Job,
    Provider,
    SlashRow,
    StakeChange,
)
from ledger.indexer.projections import EPOCH_EVENTS, JOB_EVENTS, PROVIDER_EVENTS, Projection, event_keys

CHUNK = 500  # keys per IN (...) list

events_t: Table = EventRow.__table__  # type: ignore[attr-defined]
blocks_t: Table = BlockRow.__table__  # type: ignore[attr-defined]
cursor_t: Table = Cursor.__table__  # type: ignore[attr-defined]
providers_t: Table = Provider.__table__  # type: ignore[attr-defined]
jobs_t: Table = Job.__table__  # type: ignore[attr-defined]
epochs_t: Table = Epoch.__table__  # type: ignore[attr-defined]
stakes_t: Table = StakeChange.__table__  # type: ignore[attr-defined]
slashes_t: Table = SlashRow.__table__  # type: ignore[attr-defined]
claims_t: Table = ClaimRow.__table__  # type: ignore[attr-defined]

# Rows that belong to one block and go when it is reorged away.
BY_BLOCK = (
    (events_t, events_t.c.block_number),
    (stakes_t, stakes_t.c.block_number),
    (slashes_t, slashes_t.c.block_number),
    (claims_t, claims_t.c.block_number),
)
# Current state: one row per entity, rebuilt from the events that remain.
ENTITIES = (
    (providers_t, "address", "provider", PROVIDER_EVENTS),
    (jobs_t, "job_id", "job_id", JOB_EVENTS),
    (epochs_t, "epoch", "epoch", EPOCH_EVENTS),
)


class CursorMoved(Exception):
    """Another indexer moved the cursor since this one read it."""


@dataclass(frozen=True)
class CursorState:
    chain_id: int
    contracts: str
    start_block: int
    block_number: int
    block_hash: str


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


# ── cursor ───────────────────────────────────────────────────────────────────
def read_cursor(conn: Connection, chain_id: int) -> CursorState | None:
    row = conn.execute(select(cursor_t).where(cursor_t.c.chain_id == chain_id)).mappings().first()
    if row is None:
        return None
    return CursorState(
        row["chain_id"], row["contracts"], row["start_block"], row["block_number"], row["block_hash"]
    )


def start_cursor(conn: Connection, chain_id: int, contracts: str, start_block: int, anchor_hash: str) -> None:
    """Forgets whatever this chain had and points its cursor just before `start_block`.

    Reward trees stay: they are keyed by the root they prove and come from the oracle.
    """
    for table, _ in BY_BLOCK:
        conn.execute(delete(table).where(table.c.chain_id == chain_id))
    for table, *_ in ENTITIES:
        conn.execute(delete(table).where(table.c.chain_id == chain_id))
    conn.execute(delete(blocks_t).where(blocks_t.c.chain_id == chain_id))
    conn.execute(delete(cursor_t).where(cursor_t.c.chain_id == chain_id))
    conn.execute(
        insert(cursor_t).values(
            chain_id=chain_id,
            contracts=contracts,
            start_block=start_block,
            block_number=start_block - 1,
            block_hash=anchor_hash,
            updated_at=time.time(),
        )
    )
    conn.execute(insert(blocks_t).values(chain_id=chain_id, number=start_block - 1, hash=anchor_hash))


def _move_cursor(conn: Connection, cursor: CursorState, block: int, block_hash: str) -> None:
    c = cursor_t.c
    moved = conn.execute(
        update(cursor_t)
        .where(
            c.chain_id == cursor.chain_id,
            c.block_number == cursor.block_number,
            c.block_hash == cursor.block_hash,
        )
        .values(block_number=block, block_hash=block_hash, updated_at=time.time())
    )
    if moved.rowcount != 1:
        raise CursorMoved


def stored_blocks(conn: Connection, chain_id: int, below: int, limit: int) -> list[tuple[int, str]]:
    """Up to `limit` stored (number, hash) pairs under block `below`, newest first."""
    rows = conn.execute(
        select(blocks_t.c.number, blocks_t.c.hash)
        .where(blocks_t.c.chain_id == chain_id, blocks_t.c.number < below)
        .order_by(blocks_t.c.number.desc())
        .limit(limit)
    )
    return [(int(n), h) for n, h in rows]


# ── one block range ──────────────────────────────────────────────────────────
def write_range(conn: Connection, cursor: CursorState, logs: list[Log], to_block: int, to_hash: str) -> None:
    """Adds the events of blocks cursor+1 … to_block, their projections, and moves the cursor."""
    chain_id = cursor.chain_id
    _move_cursor(conn, cursor, to_block, to_hash)

    event_rows = []
    hashes: dict[int, str] = {}
    for log in logs:
        provider, job_id, epoch = event_keys(log)
        event_rows.append(
            {
                "chain_id": chain_id,
                "block_number": log.block_number,
                "log_index": log.log_index,
                "block_hash": log.block_hash,
                "tx_hash": log.tx_hash,
                "tx_index": log.tx_index,
                "contract": log.contract,
                "name": log.name,
                "args": log.args,
                "provider": provider,
                "job_id": job_id,
                "epoch": epoch,
            }
        )
        hashes[log.block_number] = log.block_hash
    hashes[to_block] = to_hash

    projection = Projection(
        chain_id,
        _load(
            conn,
            providers_t,
            "address",
            chain_id,
            {r["provider"] for r in event_rows if r["name"] in PROVIDER_EVENTS},
        ),
        _load(conn, jobs_t, "job_id", chain_id, {r["job_id"] for r in event_rows if r["name"] in JOB_EVENTS}),
        _load(
            conn, epochs_t, "epoch", chain_id, {r["epoch"] for r in event_rows if r["name"] in EPOCH_EVENTS}
        ),
    )
    projection.apply_all(logs)

    # The previous cursor block is kept only if it had events: reorg checks need no more.
    if cursor.block_number >= cursor.start_block:
        _forget_empty_block(conn, chain_id, cursor.block_number)
    _insert(conn, events_t, event_rows)
    _insert(conn, blocks_t, [{"chain_id": chain_id, "number": n, "hash": h} for n, h in hashes.items()])
    _insert(conn, stakes_t, projection.stakes)
    _insert(conn, slashes_t, projection.slashes)
    _insert(conn, claims_t, projection.claims)
    _replace(conn, providers_t, "address", chain_id, projection.providers)
    _replace(conn, jobs_t, "job_id", chain_id, projection.jobs)
    _replace(conn, epochs_t, "epoch", chain_id, projection.epochs)


def _forget_empty_block(conn: Connection, chain_id: int, number: int) -> None:
    has_events = conn.execute(
        select(func.count())
        .select_from(events_t)
        .where(events_t.c.chain_id == chain_id, events_t.c.block_number == number)
    ).scalar_one()
    if not has_events:
        conn.execute(delete(blocks_t).where(blocks_t.c.chain_id == chain_id, blocks_t.c.number == number))


def _load(
    conn: Connection, table: Table, key: str, chain_id: int, keys: Iterable[Any]
) -> dict[Any, dict[str, Any]]:
    found: dict[Any, dict[str, Any]] = {}
    wanted = sorted(k for k in keys if k is not None)
    column = table.c[key]
    for chunk in _chunks(wanted):
        rows = conn.execute(select(table).where(table.c.chain_id == chain_id, column.in_(chunk))).mappings()
        for row in rows:
            found[row[key]] = dict(row)
    return found


def _insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(table), rows)


def _replace(
    conn: Connection, table: Table, key: str, chain_id: int, rows: dict[Any, dict[str, Any]]
) -> None:
    """Writes whole entity rows: the old ones go, the new ones come in (two bulk statements)."""
    if not rows:
        return
    column = table.c[key]
    for chunk in _chunks(sorted(rows)):
        conn.execute(delete(table).where(table.c.chain_id == chain_id, column.in_(chunk)))
    conn.execute(insert(table), list(rows.values()))


# ── reorgs ───────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Rollback:
    from_block: int  # the first block that was dropped
    to_block: int  # the cursor's block before the rollback
    events_removed: int


def rollback(conn: Connection, cursor: CursorState, keep_block: int, keep_hash: str) -> Rollback:
    """Drops everything above `keep_block` and rebuilds the entities it touched from what remains."""
    chain_id = cursor.chain_id
    _move_cursor(conn, cursor, keep_block, keep_hash)
    above = (events_t.c.chain_id == chain_id) & (events_t.c.block_number > keep_block)
    touched = conn.execute(
        select(events_t.c.provider, events_t.c.job_id, events_t.c.epoch, events_t.c.name).where(above)
    ).all()
    for table, column in BY_BLOCK:
        conn.execute(delete(table).where(table.c.chain_id == chain_id, column > keep_block))
    conn.execute(delete(blocks_t).where(blocks_t.c.chain_id == chain_id, blocks_t.c.number > keep_block))

    for table, key, event_column, names in ENTITIES:
        position = {"provider": 0, "job_id": 1, "epoch": 2}[event_column]
        keys = sorted({row[position] for row in touched if row[3] in names and row[position] is not None})
        if keys:
            _rebuild(conn, chain_id, table, key, event_column, names, keys)
    return Rollback(keep_block + 1, cursor.block_number, len(touched))


def _rebuild(
    conn: Connection,
    chain_id: int,
    table: Table,
    key: str,
    event_column: str,
    names: frozenset[str],
    keys: list[Any],
) -> None:
    column = table.c[key]
    for chunk in _chunks(keys):
        conn.execute(delete(table).where(table.c.chain_id == chain_id, column.in_(chunk)))
        projection = Projection(chain_id)
        rows = conn.execute(
            select(events_t)
            .where(
                events_t.c.chain_id == chain_id,
                events_t.c[event_column].in_(chunk),
                events_t.c.name.in_(sorted(names)),
            )
            .order_by(events_t.c.block_number, events_t.c.log_index)
        ).mappings()
        projection.apply_all(_as_log(row) for row in rows)
        states: dict[str, dict[Any, Any]] = {"address": projection.providers, "job_id": projection.jobs,
                                             "epoch": projection.epochs}
        state = states[key]
        _insert(conn, table, list(state.values()))


def _as_log(row: Any) -> Log:
    return Log(
        row["block_number"],
        row["block_hash"],
        row["tx_hash"],
        row["tx_index"],
        row["log_index"],
        row["contract"],
        row["name"],
        row["args"],
    )


def count_events(conn: Connection, chain_id: int) -> int:
    return conn.execute(
        select(func.count()).select_from(events_t).where(events_t.c.chain_id == chain_id)
    ).scalar_one()


def count_rows(conn: Connection, chain_id: int) -> dict[str, int]:
    """Rows per table for one chain (for reports and tests)."""
    counts = {}
    for table in (events_t, providers_t, stakes_t, jobs_t, epochs_t, slashes_t, claims_t):
        counts[table.name] = conn.execute(
            select(func.count()).select_from(table).where(table.c.chain_id == chain_id)
        ).scalar_one()
    return counts
