"""Indexer throughput: a full `sync` of ≥ 100,000 Swarm events into SQLite and PostgreSQL.

Run: make bench-indexer   (or .venv/bin/python bench/indexer.py [--runs N])

Setup (timed apart): a fresh anvil, the contracts deployed, then real transactions
against them — registrations, stakes, unstakes, jobs posted/assigned/completed/settled,
epoch reports submitted and vetoed, one finalized with slashes, claims. To make about
80,000 transactions in a couple of minutes, automine is off, senders are impersonated
(no transaction signing in Python; only the providers sign their jobs' results, as
completeJob requires) and each block packs hundreds of transactions, as a busy chain
would. Every counted event comes from a Swarm contract; token Transfer/Approval logs
are not indexed and not counted.

Measured: `Indexer.sync()` end to end — eth_getLogs over the node's JSON-RPC, decoding,
projections and the database writes — into an empty database, several runs, median.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from anvil.rpc import RpcClient
from ledger.chain import connect
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import deploy, devnet_committee_keys, error_decoder
from ledger.indexer import (
    DEFAULT_BATCH_BLOCKS,
    Indexer,
)
from ledger.indexer.store import count_rows
from ledger.merkle import RewardTree
from ledger.reports import (
    REPORT_TUPLE,
    SLASH_TUPLE,
    EpochReport,
    Slash,
    deferred_hash,
    reason_bytes,
    slashes_hash,
    sorted_slashes,
)
from ledger.results import JobTerms, sign_result
from ledger.rewards import sign
from ledger.tx import Sender
from ledger.units import ONE

RESULTS = REPO / "bench" / "results" / "indexer.json"
TARGET_EVENTS_PER_SECOND = 5_000
PROVIDERS = 500
STAKES_PER_PROVIDER = 100
UNSTAKES_PER_PROVIDER = 20
BUYERS = 100
JOBS_PER_BUYER = 50
VETOED_REPORTS = 100
SLASHES_PER_REPORT = 200  # RewardDistributor.MAX_SLASHES_PER_REPORT
FINAL_SLASHES = 50
SMALL_RANGES = 8  # --batch-blocks for the second configuration: ~36 ranges of ~2,800 events
SEND_BATCH = 1_000
GAS = 400_000
MAX_FEE = 1_000 * 10**9


def selector(signature: str) -> str:
    return "0x" + keccak(text=signature)[:4].hex()


def calldata(signature: str, types: list[str], args: list) -> str:
    return selector(signature) + abi_encode(types, args).hex()


def address(tag: str, i: int) -> str:
    return to_checksum_address(keccak(text=f"swarm-bench-{tag}-{i}")[:20])


class Workload:
    """Real transactions against the deployed contracts, many per block."""

    def __init__(self, node: AnvilNode, swarm: Swarm) -> None:
        self.rpc = RpcClient(node.config.url, timeout=600)
        self.swarm = swarm
        self.d = swarm.deployment.addresses
        self.deployer = dev_account(0).address
        self.guardian = swarm.deployment.params["guardian"]  # vetoes: the deployer on a devnet
        self.nonces: dict[str, int] = {}

    def nonce(self, sender: str) -> int:
        """The sender's next nonce, kept here: the node handles a batch's calls in parallel."""
        if sender not in self.nonces:
            self.nonces[sender] = int(self.rpc.call("eth_getTransactionCount", sender, "pending"), 16)
        self.nonces[sender] += 1
        return self.nonces[sender] - 1

    def send(self, txs: list[tuple[str, str, str]], gas: int = GAS) -> None:
        """Sends (from, to, data) transactions to the pool and mines until it is empty."""
        for i in range(0, len(txs), SEND_BATCH):
            body = [
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "eth_sendTransaction",
                    "params": [
                        {
                            "from": sender,
                            "to": to,
                            "data": data,
                            "gas": hex(gas),
                            "maxFeePerGas": hex(MAX_FEE),
                            "maxPriorityFeePerGas": hex(10**9),
                            "nonce": hex(self.nonce(sender)),
                        }
                    ],
                }
                for n, (sender, to, data) in enumerate(txs[i : i + SEND_BATCH])
            ]
            replies = self._post(body)
            errors = [r["error"] for r in replies if "error" in r]
            if errors:
                raise RuntimeError(f"the node refused {len(errors)} transactions: {errors[0]}")
        self.mine_all()

    def mine_all(self) -> None:
        while int(self.rpc.call("txpool_status")["pending"], 16) > 0:
            # Full blocks would raise the base fee 12.5% a block; hold it so fees stay affordable.
            self.rpc.call("anvil_setNextBlockBaseFeePerGas", hex(10**9))
            self.rpc.call("evm_mine")

    def _post(self, body: list[dict]) -> list[dict]:
        import requests

        return requests.post(self.rpc.url, json=body, timeout=600).json()

    def run(self) -> None:
        rpc, d = self.rpc, self.d
        from eth_account import Account

        # The providers have keys: each signs the results of the jobs it ran.
        provider_keys = [keccak(text=f"swarm-bench-provider-{i}") for i in range(PROVIDERS)]
        providers = [Account.from_key(key).address for key in provider_keys]
        buyers = [address("buyer", i) for i in range(BUYERS)]
        for who in providers + buyers + [self.deployer]:
            rpc.call("anvil_setBalance", who, hex(10**24))
        rpc.call("anvil_autoImpersonateAccount", True)
        rpc.call("evm_setAutomine", False)

        token, vault, market = d["SwarmToken"], d["StakingVault"], d["JobMarket"]
        transfer = "transfer(address,uint256)", ["address", "uint256"]
        approve = "approve(address,uint256)", ["address", "uint256"]
        self.send(
            [(self.deployer, token, calldata(*transfer, [p, 100_000 * ONE])) for p in providers + buyers]
        )
        self.send(
            [(p, token, calldata(*approve, [vault, 2**256 - 1])) for p in providers]
            + [(b, token, calldata(*approve, [market, 2**256 - 1])) for b in buyers]
        )

        self.send(
            [
                (p, vault, calldata("register(bytes32,uint32)", ["bytes32", "uint32"], [keccak(text=p), 1]))
                for p in providers
            ]
        )
        stake = calldata("stake(uint256)", ["uint256"], [20 * ONE])
        for _ in range(STAKES_PER_PROVIDER):
            self.send([(p, vault, stake) for p in providers])
        unstake = calldata("requestUnstake(uint256)", ["uint256"], [ONE])
        for _ in range(UNSTAKES_PER_PROVIDER):
            self.send([(p, vault, unstake) for p in providers])

        self._jobs(providers, provider_keys, buyers)
        self._vetoed_reports(providers)
        self._final_epoch(providers)

    def _jobs(self, providers: list[str], provider_keys: list[bytes], buyers: list[str]) -> None:
        market = self.d["JobMarket"]
        chain_id = self.swarm.chain.chain_id
        deadline = self.swarm.chain.timestamp() + 30 * 86_400
        post = calldata(
            "postJob(bytes32,uint128,uint64,uint64)",
            ["bytes32", "uint128", "uint64", "uint64"],
            [b"\x01" * 32, ONE, 10, deadline],
        )
        self.send([(b, market, post) for _ in range(JOBS_PER_BUYER) for b in buyers])
        job_ids = range(1, JOBS_PER_BUYER * len(buyers) + 1)
        self.send(
            [
                (
                    self.deployer,
                    market,
                    calldata(
                        "assignJob(uint256,address,uint128)",
                        ["uint256", "address", "uint128"],
                        [j, providers[j % len(providers)], ONE],
                    ),
                )
                for j in job_ids
            ]
        )
        complete = "completeJob(uint256,bytes32,uint64,bytes)", ["uint256", "bytes32", "uint64", "bytes"]
        completions = []
        for j in job_ids:
            result = keccak(j.to_bytes(32, "big"))
            terms = JobTerms(j, providers[j % len(providers)], ONE)  # assigned above at ONE a unit
            signature = sign_result(provider_keys[j % len(providers)], chain_id, market, terms, result, 7)
            completions.append((self.deployer, market, calldata(*complete, [j, result, 7, signature])))
        self.send(completions)
        self.rpc.call("evm_increaseTime", 3_600)
        self.send(
            [(self.deployer, market, calldata("settleJob(uint256)", ["uint256"], [j])) for j in job_ids]
        )

    def _expiry(self) -> int:
        return int(self.rpc.call("eth_getBlockByNumber", "latest", False)["timestamp"], 16) + 86_400

    def _submit(self, report: EpochReport, slashes: list[Slash]) -> None:
        signatures = sign(self.swarm, report, devnet_committee_keys()[:3])
        data = calldata(
            f"submitEpoch({REPORT_TUPLE},{SLASH_TUPLE}[],address[],bytes[])",
            [REPORT_TUPLE, f"{SLASH_TUPLE}[]", "address[]", "bytes[]"],
            [report.as_tuple(), [s.as_tuple() for s in slashes], [], signatures],
        )
        self.send([(self.deployer, self.d["RewardDistributor"], data)], gas=10_000_000)

    def _vetoed_reports(self, providers: list[str]) -> None:
        for _ in range(VETOED_REPORTS):
            slashes = sorted_slashes([
                Slash(providers[i % len(providers)], 100, reason_bytes("downtime"), secrets.token_bytes(32))
                for i in range(SLASHES_PER_REPORT)
            ])
            report = EpochReport(1, secrets.token_bytes(32), 0, 0, slashes_hash(slashes), deferred_hash([]),
                                 self._expiry())
            self._submit(report, slashes)
            self.send(
                [(self.guardian, self.d["RewardDistributor"], calldata("vetoEpoch(uint64)", ["uint64"], [1]))]
            )

    def _final_epoch(self, providers: list[str]) -> None:
        cumulative = {p: (i + 1) * ONE for i, p in enumerate(providers)}
        tree = RewardTree.build(cumulative)
        slashes = sorted_slashes([
            Slash(p, 200, reason_bytes("fraud"), secrets.token_bytes(32), jail_seconds=3_600)
            for p in providers[:FINAL_SLASHES]
        ])
        total = sum(cumulative.values())
        report = EpochReport(1, tree.root, total, total, slashes_hash(slashes), deferred_hash([]),
                             self._expiry())
        self._submit(report, slashes)
        self.rpc.call("evm_increaseTime", 60)
        finalize = calldata(
            f"finalizeEpoch({SLASH_TUPLE}[])", [f"{SLASH_TUPLE}[]"], [[s.as_tuple() for s in slashes]]
        )
        self.send([(self.deployer, self.d["RewardDistributor"], finalize)], gas=10_000_000)
        claim = "claim(address,uint256,bytes32[])", ["address", "uint256", "bytes32[]"]
        self.send(
            [
                (
                    self.deployer,
                    self.d["RewardDistributor"],
                    calldata(*claim, [p, cumulative[p], tree.proof(p)]),
                )
                for p in providers
            ]
        )


def time_sync(swarm: Swarm, url: str, batch_blocks: int) -> tuple[float, int, dict[str, int]]:
    engine = open_ledger(url)
    try:
        began = time.perf_counter()
        report = Indexer(swarm, engine, batch_blocks=batch_blocks).sync()
        seconds = time.perf_counter() - began
        with engine.connect() as conn:
            rows = count_rows(conn, swarm.chain.chain_id)
    finally:
        engine.dispose()
    return seconds, report.events, rows


def event_names(url: str, chain_id: int) -> Counter:
    from sqlalchemy import func, select

    from ledger.indexer.store import events_t

    engine = open_ledger(url)
    with engine.connect() as conn:
        found = conn.execute(
            select(events_t.c.name, func.count())
            .where(events_t.c.chain_id == chain_id)
            .group_by(events_t.c.name)
        ).all()
    engine.dispose()
    return Counter(dict(found))


def measure(backend: str, swarm: Swarm, runs: int, new_url, batch_blocks: int) -> dict:
    figures = []
    for _ in range(runs):
        seconds, events, rows = time_sync(swarm, new_url(), batch_blocks)
        figures.append(
            {"seconds": round(seconds, 3), "events": events, "events_per_second": round(events / seconds)}
        )
        print(
            f"  {backend}, --batch-blocks {batch_blocks}: {events:,} events in {seconds:.2f} s "
            f"= {events / seconds:,.0f} events/s",
            flush=True,
        )
    median = statistics.median(f["seconds"] for f in figures)
    return {
        "batch_blocks": batch_blocks,
        "runs": figures,
        "median_seconds": median,
        "median_events_per_second": round(figures[0]["events"] / median),
        "rows": rows,
    }


def phases(swarm: Swarm) -> dict[str, float]:
    """Where the time goes: the node's eth_getLogs (JSON-RPC and parsing) and decoding, without the
    database."""
    indexer = Indexer(swarm, open_ledger("sqlite://"))  # only its RPC client and decoder are used
    began = time.perf_counter()
    raw = indexer.rpc.call(
        "eth_getLogs",
        {"fromBlock": hex(swarm.deployment.block_number), "toBlock": "latest", "address": indexer.addresses},
    )
    fetched = time.perf_counter()
    indexer.decoder.decode_all(raw)
    decoded = time.perf_counter()
    return {"get_logs_seconds": round(fetched - began, 3), "decode_seconds": round(decoded - fetched, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from tests.postgres import TempPostgres

    work = Path(tempfile.mkdtemp(prefix="swarm-bench-indexer-"))
    node = AnvilNode(AnvilConfig(home=work, port=free_port(), state_interval=3_600))
    node.start()
    postgres = TempPostgres(durable=True).start()
    try:
        chain = connect(node.config.url)
        deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), work).deployment
        swarm = Swarm(chain, deployment)
        began = time.perf_counter()
        Workload(node, swarm).run()
        setup = time.perf_counter() - began
        head = chain.w3.eth.block_number
        print(f"setup: {head:,} blocks in {setup:.0f} s", flush=True)

        sqlite_files = iter(range(1000))

        def sqlite_url() -> str:
            return f"sqlite:///{work / f'ledger-{next(sqlite_files)}.db'}"

        sqlite = measure("sqlite", swarm, args.runs, sqlite_url, DEFAULT_BATCH_BLOCKS)
        pg = measure("postgresql", swarm, args.runs, postgres.create_database, DEFAULT_BATCH_BLOCKS)
        sqlite_small = measure("sqlite", swarm, args.runs, sqlite_url, SMALL_RANGES)
        pg_small = measure("postgresql", swarm, args.runs, postgres.create_database, SMALL_RANGES)
        split = phases(swarm)
        names = event_names(f"sqlite:///{work / 'ledger-0.db'}", chain.chain_id)
    finally:
        postgres.stop()
        node.stop()

    result = {
        "events": sum(names.values()),
        "by_event": dict(names.most_common()),
        "blocks": head - deployment.block_number + 1,
        "setup_seconds": round(setup, 1),
        "target_events_per_second": TARGET_EVENTS_PER_SECOND,
        "sqlite": sqlite,
        "postgresql": pg,
        "sqlite_small_ranges": sqlite_small,
        "postgresql_small_ranges": pg_small,
        "without_database": split,
        "postgresql_settings": "PostgreSQL defaults (fsync on, synchronous_commit on), local TCP",
        "sqlite_settings": "WAL, synchronous=NORMAL",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("events", "blocks", "setup_seconds")}))
    print(
        f"sqlite median {sqlite['median_events_per_second']:,} events/s; "
        f"postgresql median {pg['median_events_per_second']:,} events/s (target ≥ "
        f"{TARGET_EVENTS_PER_SECOND:,})"
    )


if __name__ == "__main__":
    main()
