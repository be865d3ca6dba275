"""The market service (docs/architecture.md §5): takes posted jobs from the ledger, matches them to
providers, assigns them on-chain, runs them as leases on the providers' sites, and completes,
fails, reassigns, expires, disputes and settles them. It holds no Ray connection: a site is
reached over HTTPS with requests signed by the matcher's key (`market.sites`).

It is a reconciliation loop. Each `tick` syncs the ledger, then for every open job
compares what the chain says (the authority on escrow) with the service's own record
(`market.records.MarketJob`) and takes the one step that brings them together. Every
step is a transaction whose precondition the contract checks — `assignJob` only from
Posted, `completeJob` only from Assigned, `settleJob` only from Completed — and every
transition, checked against the table of moves (`market.records.MARKET_MOVES`), is written
to `market_transitions` once its transaction is mined. A service killed at any point
therefore resumes from the chain's state: a job it had assigned is seen assigned and is run
again (from its last checkpoint), a job it had completed is seen completed, and nothing is
assigned, paid or refunded twice.

A tick runs its phases in order over one `market.tick.Tick`, which holds the pass's session,
open jobs, their records, the chain's time and its report:
  - `market.observe`: records brought in line with the chain, and the leases' progress;
  - `market.leases`: leases that ended are collected (a lost provider's job reassigned);
  - `market.settle`: jobs past their deadline expired or failed;
  - `market.assign`: queued jobs matched and assigned;
  - `market.leases`: assigned jobs' leases started;
  - `market.settle`: jobs that ran completed, completed ones disputed or settled.
Each lease is followed on a thread of the service's pool and holds its provider's capacity
until it ends; its outcome is handled on the loop's thread, where all transactions are sent.
A job still posted at its deadline is expired: its escrow goes back to the buyer. A dispute
the arbiter leaves undecided past its arbitration period is settled half and half.

A replicated job (`replicas: k`) is k on-chain jobs with the same buyer and spec hash,
grouped in job-id order and placed on k distinct providers. Its members are completed
together once each has a result; if their result hashes differ, the service records the
evidence (each provider's hash and outputs) and disputes every member, so the arbiter
decides and no one is paid for a result that another provider contradicts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from core.states import IllegalMove
from ledger.client import Swarm
from ledger.errors import SwarmError, TransactionFailed
from ledger.indexer import Indexer
from ledger.specs import canonical, load_spec
from ledger.tx import Sender, TxReceipt
from market import assign, leases, observe, settle
from market.leases import LeaseRun
from market.offers import Newcomer
from market.records import MarketState
from market.sites import Sites
from market.spec import JobSpec, SpecError, job_namespace, validate_spec
from market.tick import Tick, TickReport

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class MarketConfig:
    interval_s: float = 1.0  # between ticks when nothing wakes the loop earlier
    max_running: int = 16  # runs at once (threads; the cluster's capacity is the real limit)
    # An immediate slash for a provider whose nodes vanish mid-job. 0: the oracle's slashing
    # matrix (job abandonment) charges it at the epoch's end, from the chain's events.
    fault_slash_bps: int = 0
    default_price_per_unit: int = 10**15  # 0.001 SWARM per unit, for providers that declared no price
    newcomer: Newcomer = field(default_factory=Newcomer)

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise SwarmError(f"the market's interval must be positive, got {self.interval_s}.")
        if self.max_running < 1:
            raise SwarmError(f"--max-running must be at least 1, got {self.max_running}.")
        if not 0 <= self.fault_slash_bps <= 10_000:
            raise SwarmError(f"the fault slash must be from 0 to 10000 bps, got {self.fault_slash_bps}.")


class MarketService:
    """One market service for one deployment; `sender` must hold MATCHER_ROLE."""

    def __init__(
        self,
        swarm: Swarm,
        sender: Sender,
        engine: Engine,
        home: Path,
        config: MarketConfig = MarketConfig(),
    ) -> None:
        self.swarm = swarm
        self.sender = sender
        self.engine = engine
        self.home = home
        self.config = config
        self.chain_id = swarm.chain.chain_id
        self.namespace = job_namespace(self.chain_id, swarm.market.address)
        self.indexer = Indexer(swarm, engine, confirmations=0)  # the market acts on the chain's head
        self.pool = ThreadPoolExecutor(max_workers=config.max_running, thread_name_prefix="swarm-lease")
        self.sites = Sites(swarm, sender, home)
        self.halt = threading.Event()  # tells the lease followers the service is closing
        self.runs: dict[int, LeaseRun] = {}  # the leases under way, by job id
        self._specs: dict[str, JobSpec | SpecError] = {}
        self._arbitration: int | None = None  # JobMarket.ARBITRATION_PERIOD, read once
        self.wake = threading.Event()  # set when a run ends, so the loop handles it at once
        role = swarm.market.functions.MATCHER_ROLE().call()
        if not swarm.market.functions.hasRole(role, sender.address).call():
            raise SwarmError(
                f"{sender.address} does not hold the market's MATCHER_ROLE; run the service with the key "
                "that holds it (granted at deployment or through the timelock; on a devnet, dev account 0)."
            )

    # ── the loop ─────────────────────────────────────────────────────────────
    def run(
        self,
        stop: threading.Event,
        once: bool = False,
        on_tick: Callable[[TickReport], None] | None = None,
    ) -> TickReport:
        """Ticks until `stop` is set; with `once`, until the jobs this pass took have run and completed."""
        while True:
            try:
                report = self.tick()
            except IllegalMove:
                raise  # a bug in a phase, not the chain or the database away: passes would repeat it
            except (SwarmError, OSError, requests.RequestException, OperationalError) as exc:
                # The chain or the database stopped answering: the next pass starts over from them.
                log.warning("pass failed, retrying: %s: %s", type(exc).__name__, exc)
                report = TickReport()
                if stop.wait(self.config.interval_s):
                    return report
                continue
            if on_tick is not None:
                on_tick(report)
            if (once and not self.runs and not self.wake.is_set()) or stop.is_set():
                self.indexer.sync()  # the ledger shows this pass's own transactions
                return report
            self.wake.wait(self.config.interval_s)
            self.wake.clear()

    def close(self, wait: bool = False) -> None:
        self.halt.set()
        self.pool.shutdown(wait=wait, cancel_futures=True)
        self.sites.close()

    def tick(self) -> TickReport:
        """One pass over every open job; see the module's docstring."""
        report = TickReport()
        self.indexer.sync()
        now = self.swarm.chain.timestamp()
        with Session(self.engine) as session:
            jobs = observe.open_jobs(self, session)
            t = Tick(self, session, jobs, observe.load_records(self, session, jobs), now, report)
            observe.observe(t)
            # Results are acted on in the tick after the one that records them.
            ready = {job_id for job_id, r in t.records.items() if r.state == MarketState.RAN}
            observe.progress(t)
            leases.collect(t)
            settle.expire(t)
            assign.assign(t)
            leases.start(t)
            settle.complete(t, ready)
            settle.settle(t)
        report.running = len(self.runs)
        if report.counts.get("ran"):
            self.wake.set()  # complete them on the next tick, at once
        return report

    # ── what the phases share ────────────────────────────────────────────────
    def spec(self, spec_hash: str) -> JobSpec | SpecError:
        """The buyer's spec for a hash, validated as it was when posted (cached)."""
        cached = self._specs.get(spec_hash)
        if cached is None:
            try:
                data = load_spec(self.home, bytes.fromhex(spec_hash.removeprefix("0x")))
                cached = validate_spec(data, now=float(data.get("deadline", 1)) - 1)
            except SpecError as exc:
                cached = exc
            except (SwarmError, ValueError, TypeError, AttributeError):
                cached = SpecError(
                    f"the job spec {spec_hash} is not in {self.home / 'specs'} or is not valid; "
                    "the buyer must post it with `swarm job post`."
                )
            self._specs[spec_hash] = cached
        return cached

    def spec_body(self, spec_hash: str) -> bytes:
        """A spec as posted: the bytes whose keccak is the spec hash on chain."""
        return canonical(load_spec(self.home, bytes.fromhex(spec_hash.removeprefix("0x"))))

    def send(self, call: Callable[..., TxReceipt], *args: Any) -> TxReceipt | None:
        """Sends one transaction; a refusal (the chain moved on) is logged and read back next tick."""
        try:
            return call(self.swarm, self.sender, *args)
        except TransactionFailed as exc:
            log.warning("job %s: %s refused: %s", args[0], call.__name__, exc)
            return None

    def arbitration_period(self) -> int:
        """JobMarket.ARBITRATION_PERIOD, read once."""
        if self._arbitration is None:
            self._arbitration = int(self.swarm.read("JobMarket", "ARBITRATION_PERIOD"))
        return self._arbitration
