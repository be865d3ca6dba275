"""The indexer: `eth_getLogs` over block ranges into the ledger database, reorg-safe.

Each range is read, checked and written in one database transaction together with
the cursor, so a kill at any moment leaves the tables as they were after some whole
range, and the next run resumes right after it. Before each range the cursor's block
hash is compared with the chain's; when they differ the indexer walks back through
the stored hashes to the newest block still on the chain, rolls the tables back to it
and indexes the new branch.

SwarmToken is not indexed: its Transfer/Approval logs would double the volume, carry
nothing the tables need that the Swarm contracts' own events do not (Staked, JobSettled
and Claimed name their amounts), and a token used beyond Swarm would fill the ledger
with unrelated transfers. Balances are one `balanceOf` call away.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from anvil.rpc import JsonRpc
from ledger.chain import TRANSIENT_RETRIES
from ledger.client import Swarm
from ledger.errors import RpcError, SwarmError
from ledger.indexer import DEFAULT_BATCH_BLOCKS
from ledger.indexer.decode import LogDecoder
from ledger.indexer.store import (
    CursorMoved,
    CursorState,
    Rollback,
    count_events,
    read_cursor,
    rollback,
    start_cursor,
    stored_blocks,
    write_range,
)

INDEXED_CONTRACTS = ("StakingVault", "JobMarket", "RewardDistributor")
DEVNET_CONFIRMATIONS = 0
DEFAULT_CONFIRMATIONS = 12
MAX_LOGS_PER_RANGE = 20_000  # above this the next range is halved, to bound memory and transaction size
WALK_BACK_CHUNK = 32
RPC_TIMEOUT = 120  # a wide eth_getLogs range can take a node a while


@dataclass(frozen=True)
class RangeDone:
    """One block range written: what a progress display needs."""

    from_block: int
    to_block: int
    target: int
    events: int
    start_block: int


@dataclass
class SyncReport:
    chain_id: int
    start_block: int  # the deployment's first block
    from_block: int  # the first block this run indexed
    cursor: int  # everything up to here is in the tables
    head: int
    target: int  # head − confirmations
    confirmations: int
    events: int = 0
    ranges: int = 0
    reorgs: list[Rollback] = field(default_factory=list)
    reset: bool = False  # the database followed another deployment and was cleared for this one
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["events_per_second"] = round(self.events / self.seconds) if self.seconds > 0 else None
        return out


class Indexer:
    """Indexes one deployment's events into one ledger database."""

    def __init__(
        self,
        swarm: Swarm,
        engine: Engine,
        confirmations: int | None = None,
        batch_blocks: int = DEFAULT_BATCH_BLOCKS,
    ) -> None:
        if batch_blocks < 1:
            raise SwarmError(f"--batch-blocks must be at least 1, got {batch_blocks}.")
        if confirmations is not None and confirmations < 0:
            raise SwarmError(f"--confirmations must be 0 or more, got {confirmations}.")
        self.swarm = swarm
        self.engine = engine
        self.chain_id = swarm.chain.chain_id
        self.confirmations = (
            confirmations
            if confirmations is not None
            else DEVNET_CONFIRMATIONS
            if swarm.chain.is_devnet
            else DEFAULT_CONFIRMATIONS
        )
        self.batch_blocks = batch_blocks
        self.start_block = swarm.deployment.block_number
        # Its own client (the one JSON-RPC client, anvil/rpc.py): a longer timeout, and a node's
        # brief absence ridden out, on one connection kept alive for the whole sync.
        self.rpc = JsonRpc(swarm.chain.url, timeout=RPC_TIMEOUT, attempts=TRANSIENT_RETRIES)
        addresses = {name: swarm.deployment.addresses[name] for name in INDEXED_CONTRACTS}
        self.addresses = [addresses[name] for name in INDEXED_CONTRACTS]
        self.contracts_key = ",".join(a.lower() for a in self.addresses)
        self.decoder = LogDecoder(
            (name, address, swarm.artifacts[name].abi) for name, address in addresses.items()
        )
        self._size = batch_blocks  # adapts: halved when the node refuses a range, grown back after
        self._limit = batch_blocks  # below the smallest range the node refused

    # ── public ───────────────────────────────────────────────────────────────
    def sync(
        self, stop: threading.Event | None = None, on_range: Callable[[RangeDone], None] | None = None
    ) -> SyncReport:
        """Indexes from the cursor up to head − confirmations; returns what it did."""
        began = time.perf_counter()
        cursor, reset = self._open_cursor()
        head = int(self.rpc.call("eth_blockNumber"), 16)
        report = SyncReport(
            self.chain_id,
            self.start_block,
            cursor.block_number + 1,
            cursor.block_number,
            head,
            self._target(head),
            self.confirmations,
            reset=reset,
        )
        while stop is None or not stop.is_set():
            cursor, done = self._step(cursor, report, on_range)
            if done:
                break
        report.cursor = cursor.block_number
        report.seconds = time.perf_counter() - began
        return report

    def follow(
        self,
        interval: float,
        stop: threading.Event,
        on_pass: Callable[[SyncReport], None],
        on_range: Callable[[RangeDone], None] | None = None,
    ) -> None:
        """Syncs, then polls for new blocks every `interval` seconds until `stop` is set."""
        while not stop.is_set():
            on_pass(self.sync(stop, on_range))
            stop.wait(interval)

    # ── one step: a reorg check, then one range ─────────────────────────────
    def _step(
        self, cursor: CursorState, report: SyncReport, on_range: Callable[[RangeDone], None] | None
    ) -> tuple[CursorState, bool]:
        first = cursor.block_number + 1
        last = min(first + self._size - 1, report.target)
        anchor, tip = self._hashes(cursor.block_number, last if last >= first else None)
        if anchor != cursor.block_hash:
            try:
                rolled = self._roll_back(cursor)
            except CursorMoved:  # another indexer handled it
                return self._reread(), False
            report.reorgs.append(rolled)
            report.from_block = min(report.from_block, rolled.from_block)
            report.head = int(self.rpc.call("eth_blockNumber"), 16)
            report.target = self._target(report.head)
            return self._reread(), False
        if last < first:
            return cursor, True
        if tip is None:  # the chain is shorter than it was a moment ago
            report.head = int(self.rpc.call("eth_blockNumber"), 16)
            report.target = self._target(report.head)
            return cursor, False
        try:
            raw = self.rpc.call(
                "eth_getLogs", {"fromBlock": hex(first), "toBlock": hex(last), "address": self.addresses}
            )
        except RpcError as exc:
            if last == first:
                raise SwarmError(
                    f"The node at {self.rpc.url} refused eth_getLogs for block {first} ({exc.message}); "
                    "check that it serves logs (an archive or full node)."
                ) from exc
            refused = last - first + 1
            self._limit = max(1, min(self._limit, refused - 1))
            self._size = max(1, refused // 2)
            return cursor, False
        if self._hashes(cursor.block_number, last) != (cursor.block_hash, tip):
            return cursor, False  # the chain moved under the read: check again, then re-read
        logs = self.decoder.decode_all(raw)
        try:
            with self.engine.begin() as conn:
                write_range(conn, cursor, logs, last, tip)
        except CursorMoved:
            return self._reread(), False
        except IntegrityError as exc:
            raise SwarmError(
                f"Another indexer wrote blocks {first}–{last} of chain {self.chain_id} at the same time; "
                "run one `swarm ledger sync` per database."
            ) from exc
        self._adapt(len(raw))
        report.events += len(logs)
        report.ranges += 1
        if on_range is not None:
            on_range(RangeDone(first, last, report.target, len(logs), self.start_block))
        return CursorState(cursor.chain_id, cursor.contracts, cursor.start_block, last, tip), False

    def _adapt(self, logs: int) -> None:
        if logs > MAX_LOGS_PER_RANGE:
            self._size = max(1, self._size // 2)
        elif logs < MAX_LOGS_PER_RANGE // 4 and self._size < self._limit:
            self._size = min(self._limit, self._size * 2)

    def _target(self, head: int) -> int:
        return head - self.confirmations

    # ── cursor and reorgs ────────────────────────────────────────────────────
    def _open_cursor(self) -> tuple[CursorState, bool]:
        """The chain's cursor; a new one (and cleared tables) when the deployment is new."""
        with self.engine.connect() as conn:
            cursor = read_cursor(conn, self.chain_id)
        if cursor is not None and cursor.contracts == self.contracts_key:
            return cursor, False
        anchor = self._header_hash(self.start_block - 1)
        try:
            with self.engine.begin() as conn:
                start_cursor(conn, self.chain_id, self.contracts_key, self.start_block, anchor or "")
        except IntegrityError:  # another indexer created it first
            pass
        return self._reread(), cursor is not None

    def _reread(self) -> CursorState:
        with self.engine.connect() as conn:
            cursor = read_cursor(conn, self.chain_id)
        if cursor is None:  # made before this is asked; only someone emptying the table removes it
            raise SwarmError(f"The ledger's cursor for chain {self.chain_id} was removed while it was "
                             "indexed; run the command again to index from the start.")
        return cursor

    def _roll_back(self, cursor: CursorState) -> Rollback:
        """Rolls the tables back to the newest stored block still on the chain."""
        below = cursor.block_number + 1
        while True:
            with self.engine.connect() as conn:
                candidates = stored_blocks(conn, self.chain_id, below, WALK_BACK_CHUNK)
            if not candidates:
                break
            hashes = self._many_hashes([n for n, _ in candidates])
            for (number, stored), onchain in zip(candidates, hashes, strict=True):
                if stored == onchain:
                    with self.engine.begin() as conn:
                        return rollback(conn, cursor, number, stored)
            below = candidates[-1][0]
        # Nothing stored is on the chain any more: start again from the deployment.
        anchor = self._header_hash(self.start_block - 1) or ""
        with self.engine.begin() as conn:
            removed = count_events(conn, self.chain_id)
            start_cursor(conn, self.chain_id, self.contracts_key, self.start_block, anchor)
        return Rollback(self.start_block, cursor.block_number, removed)

    # ── block hashes ─────────────────────────────────────────────────────────
    def _header_hash(self, number: int) -> str | None:
        return self._many_hashes([number])[0]

    def _hashes(self, anchor: int, tip: int | None) -> tuple[str | None, str | None]:
        numbers = [anchor] if tip is None else [anchor, tip]
        found = self._many_hashes(numbers)
        return found[0], (found[1] if tip is not None else None)

    def _many_hashes(self, numbers: list[int]) -> list[str | None]:
        calls = [("eth_getBlockByNumber", [hex(max(n, 0)), False]) for n in numbers]
        blocks = self.rpc.batch(calls)
        return [b["hash"] if b and n >= 0 else None for n, b in zip(numbers, blocks, strict=True)]
