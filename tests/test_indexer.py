"""The ledger indexer on a real anvil, into real SQLite and PostgreSQL databases: tables
equal to on-chain state, idempotent re-syncs, reorgs rolled back, a killed sync resumed
without a duplicate or a gap, `--follow` stopped by SIGTERM, the `show` output, schema
migrations that keep rows, and reward proofs read back from the database and claimed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import pytest
from alembic.script import ScriptDirectory
from eth_abi import encode as abi_encode
from eth_utils import keccak
from sqlalchemy import inspect, select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from ledger import jobs, rewards, stake
from ledger.chain import Chain, connect
from ledger.client import Swarm
from ledger.config import Settings
from ledger.db import (
    LEDGER,
    alembic_config,
    current_revision,
    drift,
    migrate,
    open_engine,
    open_ledger,
    session,
    upgrade,
)
from ledger.deploy import Deployment, deploy, devnet_committee_keys, error_decoder
from ledger.errors import InvalidInput
from ledger.indexer import Indexer, NotIndexed, SyncReport, reward_leaf, store_reward_tree
from ledger.indexer.models import TABLES, metadata
from ledger.indexer.store import read_cursor
from ledger.jobs import JobStatus
from ledger.merkle import RewardTree
from ledger.permit import Allowance
from ledger.reader import SCHEMA_HEAD, SqlAlchemyReader, SqliteReader, read_ledger
from ledger.reports import Slash, reason_bytes
from ledger.tx import Sender
from ledger.units import ONE
from market.migrations import MARKET
from oracle.migrations import ORACLE
from tests.conftest import one_line_error, provider_signature

CHAIN_ID = 31337
A, B, C = (dev_account(i) for i in (1, 2, 3))
BUSY_BLOCKS = 400  # blocks with a Staked event each, for the kill test


# ── helpers ──────────────────────────────────────────────────────────────────
@pytest.fixture
def engine(ledger_url: str) -> Iterator[Engine]:
    e = open_ledger(ledger_url)
    yield e
    e.dispose()


def sync(swarm: Swarm, engine: Engine, **options) -> SyncReport:
    return Indexer(swarm, engine, **options).sync()


def dump(engine: Engine, chain_id: int = CHAIN_ID) -> dict[str, list[tuple]]:
    """Every indexer row of one chain (the cursor without its timestamp), in a stable order.

    Only the indexer's tables: the market's and the oracle's are theirs, in their own metadata.
    """
    out = {}
    with engine.connect() as conn:
        for table in (model.__table__ for model in TABLES):  # type: ignore[union-attr]  # SQLModel's own
            columns = [c for c in table.columns if c.name != "updated_at"]
            rows = conn.execute(select(*columns).where(table.c.chain_id == chain_id)).all()
            out[table.name] = sorted(
                (tuple(r) for r in rows), key=lambda r: json.dumps(r, sort_keys=True, default=str)
            )
    return out


def rows_of(engine: Engine, table: str, **where) -> list[dict]:
    t = metadata.tables[table]
    query = select(t).where(*(t.c[k] == v for k, v in where.items()))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def settle_epoch(
    swarm: Swarm, rpc: RpcClient, epoch: int, tree: RewardTree, total: int, slashes=(), finalize: bool = True
) -> None:
    report = rewards.build_report(swarm, epoch, tree, total, slashes)
    keeper = swarm.sender(dev_account(9).key)
    rewards.submit_epoch(
        swarm, keeper, report, slashes, rewards.sign(swarm, report, devnet_committee_keys()[:3])
    )
    if finalize:
        rpc.increase_time(swarm.distributor.functions.challengeWindow().call())
        rewards.finalize_epoch(swarm, keeper, slashes)


def onchain_job(swarm: Swarm, job_id: int) -> dict:
    """JobMarket.getJob, by field name."""
    (abi,) = [f for f in swarm.market.abi if f.get("name") == "getJob"]
    names = [c["name"] for c in abi["outputs"][0]["components"]]
    return dict(zip(names, swarm.market.functions.getJob(job_id).call(), strict=True))


def approve_vault(swarm: Swarm, sender: Sender) -> None:
    sender.send(swarm.token.functions.approve(swarm.vault.address, 2**256 - 1))


# ── a busy chain of its own: many blocks with events, for reorgs, kills and --follow ──
@dataclass(frozen=True)
class OwnChain:
    node: AnvilNode
    chain: Chain
    deployment: Deployment
    home: Path

    @property
    def rpc(self) -> RpcClient:
        return self.node.rpc

    def swarm(self) -> Swarm:
        return Swarm(self.chain, self.deployment)  # fresh senders: nonces re-read

    def env(self, db_url: str) -> dict[str, str]:
        return os.environ | {
            "SWARM_HOME": str(self.home),
            "SWARM_RPC_URL": self.node.config.url,
            "SWARM_DB_URL": db_url,
            "COLUMNS": "200",
        }


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnChain]:
    home = tmp_path_factory.mktemp("indexer-chain")
    node = AnvilNode(AnvilConfig(home=home, port=free_port()))
    node.start()
    try:
        chain = connect(node.config.url)
        deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home).deployment
        swarm = Swarm(chain, deployment)
        provider = swarm.sender(A.key)
        stake.register(swarm, provider, b"\x0a" * 32, 1)
        approve_vault(swarm, provider)
        # One Staked event per block, sent without the sender's estimate-and-wait round trips.
        data = "0x" + keccak(text="stake(uint256)")[:4].hex() + abi_encode(["uint256"], [ONE]).hex()
        for _ in range(BUSY_BLOCKS):
            last = node.rpc.call(
                "eth_sendTransaction",
                {
                    "from": A.address,
                    "to": deployment.addresses["StakingVault"],
                    "data": data,
                    "gas": hex(150_000),
                },
            )
        # Mined in nonce order: once the last is in, all are, before any test snapshots the chain.
        chain.w3.eth.wait_for_transaction_receipt(last, timeout=120)
        yield OwnChain(node, chain, deployment, home)
    finally:
        node.stop()


@pytest.fixture
def own_chain(own: OwnChain) -> Iterator[OwnChain]:
    """The busy chain, restored after the test."""
    snapshot = own.rpc.snapshot()
    yield own
    own.rpc.revert(snapshot)


def run_cli(own: OwnChain, db_url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", *args],
        env=own.env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, what: str, timeout: float = 60.0, process: subprocess.Popen | None = None):
    """Polls another process's progress (it writes to the database) until `condition()` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(
                f"the indexer exited ({process.returncode}) before {what}: {process.stderr.read()}"
            )
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def cursor_block(engine: Engine) -> int | None:
    with engine.connect() as conn:
        cursor = read_cursor(conn, CHAIN_ID)
    return cursor.block_number if cursor else None


# ── sync: the tables equal the chain ─────────────────────────────────────────
def test_sync_indexes_every_table_equal_to_onchain_state_and_a_second_sync_adds_nothing(
    swarm: Swarm, rpc: RpcClient, engine: Engine
) -> None:
    a, b, c = (swarm.sender(k.key) for k in (A, B, C))
    matcher, buyer = swarm.sender(dev_account(0).key), swarm.sender(dev_account(4).key)
    stake.register(swarm, a, b"\x01" * 32, 1)
    stake.register(swarm, b, b"\x02" * 32, 2)
    stake.register(swarm, c, b"\x03" * 32, 1)
    stake.stake(swarm, a, 1_500 * ONE)
    stake.stake(swarm, b, 2_000 * ONE)
    stake.stake(swarm, c, 1_000 * ONE)
    stake.request_unstake(swarm, a, 400 * ONE)
    stake.update_spec(swarm, b, b"\x22" * 32, 2)

    deadline = swarm.chain.timestamp() + 86_400
    settled, _ = jobs.post_job(swarm, buyer, b"\x31" * 32, 2 * ONE, 10, deadline)
    jobs.assign_job(swarm, matcher, settled, b.address, ONE)
    result = b"\x55" * 32
    jobs.complete_job(swarm, matcher, settled, result, 7, provider_signature(swarm, settled, result, 7))
    cancelled, _ = jobs.post_job(swarm, buyer, b"\x32" * 32, ONE, 5, deadline)
    jobs.cancel_job(swarm, buyer, cancelled)
    failed, _ = jobs.post_job(swarm, buyer, b"\x33" * 32, ONE, 5, deadline)
    jobs.assign_job(swarm, matcher, failed, a.address, ONE)
    job_slash = swarm.events(jobs.fail_job(swarm, matcher, failed, "abandoned", slash_bps=1_000), "Slashed")
    open_job, _ = jobs.post_job(swarm, buyer, b"\x34" * 32, ONE, 5, deadline)
    rpc.increase_time(swarm.market.functions.disputeWindow().call())
    jobs.settle_job(swarm, matcher, settled)

    # Epoch 1: a report vetoed, then a corrected one finalized with a slash and a jail.
    tree = RewardTree.build({a.address: 30 * ONE, b.address: 20 * ONE})
    settle_epoch(swarm, rpc, 1, RewardTree.build({a.address: 99 * ONE}), 99 * ONE, finalize=False)
    rewards.veto_epoch(swarm, matcher, 1)
    epoch_slash = Slash(c.address, 500, reason_bytes("downtime"), b"\x0e" * 32, jail_seconds=3_600)
    settle_epoch(swarm, rpc, 1, tree, 50 * ONE, [epoch_slash])
    rewards.claim(swarm, a, a.address, 30 * ONE, tree.proof(a.address))

    report = sync(swarm, engine)
    assert report.events > 0 and report.reorgs == [] and report.cursor == swarm.chain.w3.eth.block_number

    for who in (a, b, c):
        info = stake.provider_info(swarm, who.address)
        (row,) = rows_of(engine, "providers", address=who.address)
        assert (
            row["stake"],
            row["unbonding"],
            row["release_time"],
            row["jailed_until"],
            row["gpus"],
            row["tombstoned"],
            row["spec_hash"],
        ) == (
            info.stake,
            info.unbonding,
            info.unbonding_end,
            info.jailed_until,
            info.gpus,
            info.tombstoned,
            "0x" + info.spec_hash.hex(),
        )
        history = sorted(rows_of(engine, "stakes", provider=who.address), key=lambda r: r["block_number"])
        assert history[-1]["stake"] == info.stake

    for job_id in (settled, cancelled, failed, open_job):
        job = onchain_job(swarm, job_id)
        (row,) = rows_of(engine, "jobs", job_id=job_id)
        assert row["status"] == JobStatus(job["status"]).name.lower()
        assert (
            row["buyer"],
            row["max_price_per_unit"],
            row["max_units"],
            row["deadline"],
            row["price_per_unit"],
            row["units_used"],
            row["dispute_end"],
            row["result_hash"] or "0x" + "00" * 32,
        ) == (
            job["buyer"],
            job["maxPricePerUnit"],
            job["maxUnits"],
            job["deadline"],
            job["pricePerUnit"],
            job["unitsUsed"],
            job["disputeEnd"],
            "0x" + job["resultHash"].hex(),
        )
        assert row["provider"] == (job["provider"] if int(job["provider"], 16) else None)
    (settled_row,) = rows_of(engine, "jobs", job_id=settled)
    assert settled_row["result_hash"] == "0x" + "55" * 32 and settled_row["payment"] > 0

    (epoch,) = rows_of(engine, "epochs")
    assert epoch["status"] == "finalized" and epoch["epoch"] == 1
    assert epoch["rewards_root"] == "0x" + swarm.distributor.functions.rewardsRoot().call().hex()
    assert epoch["total_rewards"] == 50 * ONE and epoch["slash_count"] == 1

    slashes = {(r["job_id"], r["epoch"]): r for r in rows_of(engine, "slashes")}
    assert set(slashes) == {(failed, None), (None, 1)}
    assert (
        slashes[(failed, None)]["amount"]
        == job_slash[0].args["fromStake"] + job_slash[0].args["fromUnbonding"]
    )
    assert slashes[(failed, None)]["reason"] == "abandoned"
    assert slashes[(None, 1)]["provider"] == c.address and slashes[(None, 1)]["reason"] == "downtime"

    (claim,) = rows_of(engine, "claims")
    assert (claim["provider"], claim["amount"]) == (
        a.address,
        swarm.distributor.functions.claimed(a.address).call(),
    )

    (committee,) = rows_of(engine, "events", name="CommitteeSet")  # a dynamic-field event, decoded by eth_abi
    assert committee["args"]["signers"] == swarm.distributor.functions.signers().call()

    before = dump(engine)
    again = sync(swarm, engine)
    assert (again.events, again.ranges, again.reorgs) == (0, 0, [])
    assert dump(engine) == before


def test_a_reassigned_job_shows_its_new_provider_and_price_and_the_slash_it_ordered(
    swarm: Swarm, engine: Engine
) -> None:
    a, b = swarm.sender(A.key), swarm.sender(B.key)
    matcher, buyer = swarm.sender(dev_account(0).key), swarm.sender(dev_account(4).key)
    for who, spec in ((a, b"\x01"), (b, b"\x02")):
        stake.register(swarm, who, spec * 32, 1)
        stake.stake(swarm, who, 1_000 * ONE)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x35" * 32, 2 * ONE, 10, swarm.chain.timestamp() + 86_400)
    jobs.assign_job(swarm, matcher, job_id, a.address, 2 * ONE)
    sync(swarm, engine)  # the job is indexed as assigned to a, then moves in a later range
    receipt = jobs.reassign_job(swarm, matcher, job_id, b.address, ONE, "nodes lost", slash_bps=500)
    (slashed,) = swarm.events(receipt, "Slashed")

    sync(swarm, engine)
    job = onchain_job(swarm, job_id)
    (row,) = rows_of(engine, "jobs", job_id=job_id)
    assert (row["status"], row["provider"], row["price_per_unit"], row["escrow"]) == (
        "assigned",
        b.address,
        ONE,
        20 * ONE,
    )
    assert (job["provider"], job["pricePerUnit"]) == (row["provider"], row["price_per_unit"])
    (event,) = rows_of(engine, "events", name="JobReassigned")
    assert (event["job_id"], event["provider"], event["args"]["from"]) == (job_id, b.address, a.address)
    (slash,) = rows_of(engine, "slashes", tx_hash=receipt.tx_hash)
    assert (slash["job_id"], slash["provider"], slash["reason"]) == (job_id, a.address, "nodes lost")
    assert slash["amount"] == slashed.args["fromStake"] + slashed.args["fromUnbonding"] == 50 * ONE
    (provider,) = rows_of(engine, "providers", address=a.address)
    assert provider["stake"] == stake.provider_info(swarm, a.address).stake == 950 * ONE


# ── reorgs ───────────────────────────────────────────────────────────────────
def test_reorg_rolls_the_tables_back_and_indexes_the_new_branch(own_chain: OwnChain, engine: Engine) -> None:
    swarm, rpc = own_chain.swarm(), own_chain.rpc
    provider, buyer = swarm.sender(B.key), swarm.sender(C.key)
    stake.register(swarm, provider, b"\x0b" * 32, 1)
    approve_vault(swarm, provider)
    stake.stake(swarm, provider, 1_000 * ONE, Allowance.APPROVED)
    old_stake = stake.stake(swarm, provider, 500 * ONE, Allowance.APPROVED)
    old_job, _ = jobs.post_job(swarm, buyer, b"\x0c" * 32, ONE, 3, swarm.chain.timestamp() + 3_600)
    rpc.mine(2)
    assert sync(swarm, engine).reorgs == []
    assert any(r["tx_hash"] == old_stake.tx_hash for r in rows_of(engine, "events", name="Staked"))
    assert rows_of(engine, "jobs", job_id=old_job)

    # Replace every block from the 500 stake on with a branch that stakes 700 instead.
    depth = swarm.chain.w3.eth.block_number - old_stake.block_number + 1
    replacement = {
        "from": provider.address,
        "to": swarm.vault.address,
        "gas": hex(200_000),
        "data": swarm.vault.encode_abi("stake", [700 * ONE]),
    }
    rpc.call("anvil_reorg", depth, [[replacement, 0]])

    report = sync(swarm, engine)
    (reorg,) = report.reorgs
    assert reorg.from_block <= old_stake.block_number and reorg.events_removed >= 2
    staked = [
        r["args"]["amount"]
        for r in sorted(
            rows_of(engine, "events", name="Staked", provider=provider.address),
            key=lambda r: r["block_number"],
        )
    ]
    assert staked == [1_000 * ONE, 700 * ONE]
    assert not any(r["tx_hash"] == old_stake.tx_hash for r in rows_of(engine, "events"))
    assert rows_of(engine, "jobs", job_id=old_job) == []  # posted on the old branch only
    (row,) = rows_of(engine, "providers", address=provider.address)
    assert row["stake"] == stake.provider_info(swarm, provider.address).stake == 1_700 * ONE
    assert [
        r["stake"]
        for r in sorted(rows_of(engine, "stakes", provider=provider.address), key=lambda r: r["block_number"])
    ] == [1_000 * ONE, 1_700 * ONE]

    fresh = open_ledger(f"sqlite:///{own_chain.home / f'fresh-{time.monotonic_ns()}.db'}")
    sync(swarm, fresh)
    assert dump(engine) == dump(fresh)  # exactly what a sync of the new branch alone builds


# ── kill -9 mid-sync, then resume ────────────────────────────────────────────
def test_an_indexer_killed_mid_sync_resumes_with_no_duplicate_or_missing_row(
    own_chain: OwnChain, engine: Engine, ledger_url: str, tmp_path: Path
) -> None:
    swarm = own_chain.swarm()
    head = swarm.chain.w3.eth.block_number
    start = own_chain.deployment.block_number
    process = run_cli(own_chain, ledger_url, "ledger", "sync", "--batch-blocks", "1", "--json")
    try:
        wait_for(
            lambda: (cursor_block(engine) or 0) >= start + (head - start) // 3,
            "a third of the blocks",
            process=process,
        )
    finally:
        process.kill()
        process.communicate()
    killed_at = cursor_block(engine)
    assert killed_at is not None and killed_at < head, "the sync finished before it could be killed"

    report = sync(swarm, engine, batch_blocks=7)
    assert report.from_block == killed_at + 1 and report.cursor == head

    fresh = open_ledger(f"sqlite:///{tmp_path / 'fresh.db'}")
    sync(swarm, fresh)
    resumed, full = dump(engine), dump(fresh)
    assert len(full["events"]) >= BUSY_BLOCKS
    assert resumed == full


# ── a node that limits eth_getLogs ranges ────────────────────────────────────
class RangeCappedNode:
    """A JSON-RPC proxy in front of anvil that refuses eth_getLogs over more than `cap` blocks,
    the way many public nodes do, and records the ranges it served."""

    def __init__(self, upstream: str, cap: int) -> None:
        self.upstream, self.cap = upstream, cap
        self.served: list[int] = []
        self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls = body if isinstance(body, list) else [body]
                replies = [proxy.answer(call) for call in calls]
                data = json.dumps(replies if isinstance(body, list) else replies[0]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, call: dict) -> dict:
        if call["method"] == "eth_getLogs":
            span = int(call["params"][0]["toBlock"], 16) - int(call["params"][0]["fromBlock"], 16) + 1
            if span > self.cap:
                self.refused += 1
                return {
                    "jsonrpc": "2.0",
                    "id": call["id"],
                    "error": {"code": -32005, "message": f"block range exceeds {self.cap}"},
                }
            self.served.append(span)
        return {
            "jsonrpc": "2.0",
            "id": call["id"],
            "result": RpcClient(self.upstream).call(call["method"], *call["params"]),
        }

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_node_that_refuses_wide_log_ranges_gets_narrower_ones(own: OwnChain, tmp_path: Path) -> None:
    capped_engine = open_ledger(f"sqlite:///{tmp_path / 'capped.db'}")
    with RangeCappedNode(own.node.config.url, cap=5) as node:
        report = sync(Swarm(connect(node.url), own.deployment), capped_engine, batch_blocks=64)
    assert report.cursor == own.chain.w3.eth.block_number
    assert max(node.served) <= 5 and 0 < node.refused <= 10
    direct = open_ledger(f"sqlite:///{tmp_path / 'direct.db'}")
    sync(own.swarm(), direct)
    assert dump(capped_engine) == dump(direct)


# ── --follow ─────────────────────────────────────────────────────────────────
def test_follow_indexes_new_blocks_and_exits_cleanly_on_sigterm(
    own_chain: OwnChain, engine: Engine, ledger_url: str
) -> None:
    swarm = own_chain.swarm()
    process = run_cli(own_chain, ledger_url, "ledger", "sync", "--follow", "--interval", "0.1", "--json")
    try:
        head = swarm.chain.w3.eth.block_number
        wait_for(lambda: cursor_block(engine) == head, "the head", process=process)
        receipt = stake.register(swarm, swarm.sender(B.key), b"\x0d" * 32, 2)
        wait_for(lambda: rows_of(engine, "providers", address=B.address), "the new provider", process=process)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    *passes, last = [json.loads(line) for line in out.splitlines()]
    assert last == {"stopped": True, "cursor": receipt.block_number}
    assert sum(p["events"] for p in passes) == len(rows_of(engine, "events"))
    assert sync(swarm, engine).events == 0  # restartable: nothing left to add


# ── anvil restarted from its state file ─────────────────────────────────────
def test_sync_after_anvil_restarts_from_its_state_adds_nothing_and_loses_nothing(
    tmp_path: Path, engine: Engine
) -> None:
    node = AnvilNode(AnvilConfig(home=tmp_path, port=free_port()))
    node.start()
    try:
        chain = connect(node.config.url)
        deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), tmp_path).deployment
        swarm = Swarm(chain, deployment)
        provider = swarm.sender(A.key)
        stake.register(swarm, provider, b"\x09" * 32, 2)
        stake.stake(swarm, provider, 3_000 * ONE)
        assert sync(swarm, engine).events > 0
        before = dump(engine)
        node.stop()
        node.start()
        swarm = Swarm(connect(node.config.url), deployment)
        report = sync(swarm, engine)
        assert (report.events, report.reorgs) == (0, [])
        assert dump(engine) == before
        (row,) = rows_of(engine, "providers", address=provider.address)
        assert row["stake"] == stake.provider_info(swarm, provider.address).stake == 3_000 * ONE
    finally:
        node.stop()


# ── the command line ─────────────────────────────────────────────────────────
def test_show_json_matches_the_chain(swarm: Swarm, rpc: RpcClient, cli, ledger_url: str) -> None:
    a, matcher, buyer = (
        swarm.sender(A.key),
        swarm.sender(dev_account(0).key),
        swarm.sender(dev_account(4).key),
    )
    stake.register(swarm, a, b"\x01" * 32, 1)
    stake.stake(swarm, a, 2_000 * ONE)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x31" * 32, ONE, 10, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, a.address, ONE)
    slash = Slash(a.address, 250, reason_bytes("downtime"), b"\x0e" * 32)
    settle_epoch(swarm, rpc, 1, RewardTree.build({a.address: 5 * ONE}), 5 * ONE, [slash])
    env = {"SWARM_DB_URL": ledger_url}

    synced = cli("ledger", "sync", "--json", env=env)
    assert synced.code == 0, synced.stderr
    assert json.loads(synced.stdout)["cursor"] == swarm.chain.w3.eth.block_number

    def show(kind: str) -> list[dict]:
        result = cli("ledger", "show", kind, "--json", env=env)
        assert result.code == 0, result.stderr
        return json.loads(result.stdout)[kind]

    info = stake.provider_info(swarm, a.address)
    (provider,) = show("providers")
    assert (provider["address"], provider["stake_wei"], provider["gpus"]) == (a.address, str(info.stake), 1)
    assert provider["slashed_total_wei"] == str(2_000 * ONE - info.stake)
    (job,) = show("jobs")
    assert (job["job_id"], job["status"], job["provider"], job["price_per_unit_wei"]) == (
        job_id,
        "assigned",
        a.address,
        str(ONE),
    )
    (epoch,) = show("epochs")
    assert (epoch["epoch"], epoch["status"], epoch["total_rewards_wei"]) == (1, "finalized", str(5 * ONE))
    assert epoch["rewards_root"] == "0x" + swarm.distributor.functions.rewardsRoot().call().hex()
    (slashed,) = show("slashes")
    assert (slashed["provider"], slashed["reason"], slashed["epoch"], slashed["amount_wei"]) == (
        a.address,
        "downtime",
        1,
        str(2_000 * ONE - info.stake),
    )

    human = cli("ledger", "show", "providers", env=env)
    assert human.code == 0 and a.address in human.stdout and "1,950 SWARM" in human.stdout


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://alice:s3cret@127.0.0.1:{port}/ledger",
            "The ledger database at postgresql://alice:***@127.0.0.1:{port}/ledger cannot be opened",
        ),
        ("not a url", "SWARM_DB_URL 'not a url' is not a database URL"),
        (
            "mysql://bob:s3cret@localhost/ledger",
            "names a mysql database; the ledger runs on SQLite or PostgreSQL",
        ),
    ],
    ids=["unreachable", "malformed", "unsupported"],
)
def test_a_bad_database_url_is_one_sentence_naming_it_without_its_password(
    cli, url: str, expected: str
) -> None:
    port = str(free_port())
    for command in (("ledger", "sync"), ("ledger", "show", "jobs")):
        text = one_line_error(cli(*command, env={"SWARM_DB_URL": url.format(port=port)}))
        assert expected.format(port=port) in text
        assert "s3cret" not in text


def test_sync_with_the_chain_down_says_so(cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    text = one_line_error(
        cli("ledger", "sync", env={"SWARM_RPC_URL": url, "SWARM_DB_URL": f"sqlite:///{tmp_path / 'l.db'}"})
    )
    assert f"No chain answers at {url}" in text


# ── migrations ───────────────────────────────────────────────────────────────
def test_upgrading_the_schema_keeps_every_row_and_migrate_is_idempotent(
    swarm: Swarm, ledger_url: str
) -> None:
    engine = open_engine(ledger_url)
    upgrade(engine, LEDGER, "0001")
    assert current_revision(engine) == "0001"
    assert "ix_jobs_chain_id_status" not in {i["name"] for i in inspect(engine).get_indexes("jobs")}
    buyer = swarm.sender(dev_account(4).key)
    stake.register(swarm, swarm.sender(A.key), b"\x01" * 32, 1)
    jobs.post_job(swarm, buyer, b"\x31" * 32, ONE, 10, swarm.chain.timestamp() + 3_600)
    assert sync(swarm, engine).events > 0
    before = dump(engine)

    migrate(engine, MARKET, ORACLE)
    migrate(engine, MARKET, ORACLE)
    for schema in (LEDGER, MARKET, ORACLE):
        assert current_revision(engine, schema) == ScriptDirectory.from_config(
            alembic_config(schema)).get_current_head()
        assert drift(engine, schema) == []
    assert dump(engine) == before
    assert "ix_jobs_chain_id_status" in {i["name"] for i in inspect(engine).get_indexes("jobs")}
    assert sync(swarm, engine).events == 0
    engine.dispose()


# ── reward trees for claims ──────────────────────────────────────────────────
def test_a_proof_read_back_from_the_database_claims_on_chain(
    swarm: Swarm, rpc: RpcClient, engine: Engine
) -> None:
    chain_id = swarm.chain.chain_id
    first = {A.address: 100 * ONE, B.address: 50 * ONE}
    tree = RewardTree.build(first)
    with session(engine) as s:
        store_reward_tree(s, chain_id, 1, tree.root, first)
    with Session(engine) as s, pytest.raises(NotIndexed, match="run `swarm ledger sync` first"):
        reward_leaf(s, chain_id, A.address)
    sync(swarm, engine)
    with Session(engine) as s:
        assert reward_leaf(s, chain_id, A.address) is None  # nothing finalized yet

    settle_epoch(swarm, rpc, 1, tree, 150 * ONE)
    second = {A.address: 250 * ONE, B.address: 120 * ONE}
    tree2 = RewardTree.build(second)
    with session(engine) as s:
        store_reward_tree(s, chain_id, 2, tree2.root, second)
    settle_epoch(swarm, rpc, 2, tree2, 220 * ONE, finalize=False)  # submitted, not final: not claimable yet
    sync(swarm, engine)

    with Session(engine) as s:
        leaf = reward_leaf(s, chain_id, A.address)
        assert reward_leaf(s, chain_id, C.address) is None
    assert leaf is not None and (leaf.epoch, leaf.cumulative) == (1, 100 * ONE)
    stake.register(swarm, swarm.sender(A.key), b"\x0a" * 32, 1)  # claims live in the provider's vault record
    before = swarm.balance_of(A.address)
    receipt = rewards.claim(swarm, swarm.sender(dev_account(9).key), A.address, leaf.cumulative, leaf.proof)
    (claimed,) = swarm.events(receipt, "Claimed")
    assert claimed.args["amount"] == 100 * ONE
    assert swarm.balance_of(A.address) == before + 100 * ONE

    with session(engine) as s, pytest.raises(InvalidInput, match="hash to root"):
        store_reward_tree(s, chain_id, 3, b"\x00" * 32, first)


def test_the_read_only_reader_sees_the_claimable_leaf_the_orm_sees(
    swarm: Swarm, rpc: RpcClient, ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`swarm provider status` reads through ledger.reader: plain sqlite3 for the default SQLite
    file, SQLAlchemy for PostgreSQL. It never creates or migrates a database."""
    monkeypatch.setenv("SWARM_DB_URL", ledger_url)
    settings = Settings.from_env({"SWARM_HOME": str(tmp_path)})
    if ledger_url.startswith("sqlite"):
        with read_ledger(settings) as reader:
            assert reader is None
        assert not Path(ledger_url.removeprefix("sqlite:///")).exists()
    engine = open_engine(ledger_url)
    upgrade(engine, LEDGER, "0001")
    with read_ledger(settings) as reader:
        assert reader is None  # an older schema: `swarm ledger sync` migrates it first
    migrate(engine)
    chain_id = swarm.chain.chain_id
    amounts = {A.address: 7 * ONE, B.address: 3 * ONE}
    tree = RewardTree.build(amounts)
    with session(engine) as s:
        store_reward_tree(s, chain_id, 1, tree.root, amounts)
    sync(swarm, engine)
    settle_epoch(swarm, rpc, 1, tree, 10 * ONE)
    sync(swarm, engine)
    with Session(engine) as s:
        expected = reward_leaf(s, chain_id, A.address)
    engine.dispose()
    assert expected is not None and expected.cumulative == 7 * ONE
    with read_ledger(settings) as reader:
        assert isinstance(reader, SqliteReader if ledger_url.startswith("sqlite") else SqlAlchemyReader)
        assert reward_leaf(reader, chain_id, A.address) == expected
        assert reward_leaf(reader, chain_id, C.address) is None


def test_a_ledger_at_the_newest_schema_opens_without_alembic_and_an_older_one_is_upgraded(
    ledger_url: str,
) -> None:
    """Opening the ledger reads its version table: only a schema behind the newest loads Alembic,
    which migrates it."""
    opened = ("import sys; from ledger.db import open_ledger; from market.migrations import MARKET; "
              "from oracle.migrations import ORACLE; open_ledger(sys.argv[1], MARKET, ORACLE).dispose(); "
              "print('alembic' in sys.modules)")

    def alembic_loaded_by_opening() -> bool:
        done = subprocess.run([sys.executable, "-c", opened, ledger_url], capture_output=True, text=True,
                              check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        return {"True": True, "False": False}[done.stdout.strip()]

    engine = open_engine(ledger_url)
    try:
        upgrade(engine, LEDGER)  # as a ledger an older Swarm left
        upgrade(engine, MARKET, "0006")
        upgrade(engine, ORACLE, "0007")
        assert alembic_loaded_by_opening()
        assert [current_revision(engine, s) for s in (LEDGER, MARKET, ORACLE)] == [
            SCHEMA_HEAD, MARKET.head, ORACLE.head]
        assert "gpu_power_w" in {c["name"] for c in inspect(engine).get_columns("probe_samples")}
        kept = {"node_rounds_s", "node_commit_s", "challenge_size", "challenge_rounds", "challenge_stride"}
        assert kept <= {c["name"] for c in inspect(engine).get_columns("challenge_results")}
        assert {"outputs_hash", "log_tail", "progress"} <= {c["name"] for c in inspect(engine).get_columns(
            "market_jobs")}
        assert not alembic_loaded_by_opening()
        assert [current_revision(engine, s) for s in (LEDGER, MARKET, ORACLE)] == [
            SCHEMA_HEAD, MARKET.head, ORACLE.head]
    finally:
        engine.dispose()


def test_the_readers_schema_head_is_the_newest_migration() -> None:
    assert ScriptDirectory.from_config(alembic_config(LEDGER)).get_current_head() == SCHEMA_HEAD
