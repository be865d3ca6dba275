"""The demo: the whole story on the embedded defaults, in under three minutes.

A fresh anvil with the contracts; three providers, each serving its own site — its own Ray
cluster behind an HTTPS agent that the chain authorizes — fast (two nodes), slow (one node)
and flaky (one node, the cheapest, whose site is killed while it runs the first job); two
buyers who bring a table of real data, scikit-learn's handwritten digits, pinned by its sha256,
and post a `train` job that learns it (the MLP, above 90 % validation accuracy, its curve on
the dashboard) and publishes its result, an `infer` job by the other buyer that scores the
trained model on the table, and a `finetune` of it;
the market service and the oracle, which reach the providers only through their sites,
running on their schedules; and at the end a summary of stakes, rewards, slashes, job
outcomes and every balance, checked: every job settled, each epoch's rewards equal its
emission, the flaky provider slashed, and the token's supply accounted for to the wei.

The devnet's clock is run ten times faster than the wall clock (anvil's evm_increaseTime),
so the 60 s dispute window and the 30 s challenge window pass in seconds; deadlines are
hours long, so nothing expires. The clock cannot be moved back, so after the demo it runs ahead
of the wall clock; the summary says by how much (`clock_ahead_s`). Running it again starts the
devnet afresh: the old chain, its ledger rows and the demo's results are replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from anvil import AnvilNode, RpcClient, dev_account
from core import logs
from devnet.network import kill_site, start_sites, stop_sites
from ledger import stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.config import Settings
from ledger.deploy import deploy, devnet_committee_keys, error_decoder
from ledger.errors import SwarmError
from ledger.indexer.rewards import reward_leaf
from ledger.jobs import job_info, post_job
from ledger.operator import Provider
from ledger.specs import store_spec
from ledger.stake import HardwareSpec
from ledger.units import parse_amount

# The story loads what is slow to load as it reaches it — the ledger's database and web3 as it
# deploys, the services and torch in a thread while the sites start (`_prepare`), pydantic's specs
# as it posts, the ORM's models as it reads the ledger — so its first step shows at once: the
# imports inside its steps are those.

BUYERS = (5, 6)
CLOCK_SPEEDUP = 10  # devnet seconds per wall second
EPOCH_S = 8.0
EPOCHS_AFTER_LOSS = 2  # finalized epochs after the flaky node is lost before the demo ends
TIMEOUT_S = 420.0


@dataclass(frozen=True)
class DemoProvider:
    name: str
    account: int
    nodes: int
    hardware: HardwareSpec


PROVIDERS = (
    DemoProvider("fast", 1, 2, HardwareSpec("cpu", 2, 1, "eu-west", parse_amount("0.0008"))),
    DemoProvider("slow", 2, 1, HardwareSpec("cpu", 1, 1, "us-east", parse_amount("0.0006"))),
    DemoProvider("flaky", 3, 1, HardwareSpec("cpu", 1, 1, "ap-south", parse_amount("0.0004"))),
)
STAKE_HEADROOM = 3  # providers stake 1.5× their minimum: minimum × 3 / 2


def job_specs(table: Path, train_id: int | None = None) -> dict[str, dict]:
    base = {"resources": {"workers": 1, "cpus_per_worker": 1}, "max_units": 1_200, "deadline": "6h",
            "max_price_per_unit": "0.001"}
    return {
        # Published, so the second buyer's infer job may build on its result.
        "train": base | {"kind": "train", "model": "mlp", "dataset": str(table), "seed": 7, "publish": True,
                         # 30 epochs of 16 samples a step: a few seconds in which to kill the
                         # flaky site between its first checkpoint and its last (an epoch of 32 a
                         # step takes 40 ms on one core; 6 of them left no time to)
                         "params": {"epochs": 30, "batch_size": 16, "lr": 0.003}},
        "infer": base | {"kind": "infer", "model": f"job:{train_id}", "dataset": str(table), "priority": 8,
                         "params": {"batch_size": 256}},
        "finetune": base | {"kind": "finetune", "model": f"job:{train_id}", "dataset": str(table),
                            "seed": 11, "params": {"samples": 600, "epochs": 2}},
    }


class Progress(Protocol):
    """What the demo tells of its steps: rich's Progress, or `Silent`."""

    def add_task(self, description: str, *, total: float | None = ...) -> Any: ...

    def advance(self, task: Any, /) -> None: ...

    def update(
        self, task: Any, /, *, completed: float | None = ..., total: float | None = ...,
        description: str | None = ...,
    ) -> None: ...


class Silent:
    """A progress that shows nothing (the demo's `--json`)."""

    def add_task(self, description: str, *, total: float | None = None) -> int:
        return 0

    def advance(self, task: Any, /) -> None:
        pass

    def update(self, task: Any, /, *, completed: float | None = None, total: float | None = None,
               description: str | None = None) -> None:
        pass


class ServicesLog:
    """What the market and the oracle log as they run the story (INFO and above), written to the
    demo's services log rather than to the console, where the story's progress is shown; closed,
    and the loggers as they were, when the demo ends."""

    SERVICES = ("market", "oracle")

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter(logs.FORMAT, datefmt="%H:%M:%S"))
        self.kept: dict[str, tuple[int, bool]] = {}
        for name in self.SERVICES:
            logger = logging.getLogger(name)
            self.kept[name] = (logger.level, logger.propagate)
            logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
            logger.propagate = False
            logger.addHandler(self.handler)

    def close(self) -> None:
        for name, (level, propagate) in self.kept.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self.handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self.handler.close()


class Demo:
    """The demo's story on a fresh devnet in `settings.home`, its chain served by `node`; `progress`
    hears of each step (rich's Progress is one)."""

    def __init__(self, settings: Settings, node: AnvilNode, progress: Progress | None = None) -> None:
        self.settings = settings
        self.home = settings.home
        self.node = node
        self.progress = progress or Silent()
        self.stop = threading.Event()
        self.lost_at_epoch: int | None = None  # the last epoch finalized when the flaky site was killed

    # ── the story ────────────────────────────────────────────────────────────
    def run(self) -> dict[str, Any]:
        """Runs the story and returns its summary: providers, jobs, epochs, balances and the checks."""
        started = time.monotonic()
        chain = self.progress.add_task("Devnet: anvil and the contracts", total=2)
        self._chain()
        self.progress.advance(chain)
        self._deploy()
        self.progress.advance(chain)
        sites_task = self.progress.add_task("Provider sites: 3 sites, 4 nodes", total=1)
        with ThreadPoolExecutor(1, thread_name_prefix="demo-prepare") as pool:
            preparing = pool.submit(self._prepare)  # while the sites start, which is waiting here
            self._sites()
            preparing.result()
        self.progress.advance(sites_task)
        staking = self.progress.add_task("Providers register and stake", total=len(PROVIDERS))
        for p in PROVIDERS:
            self._stake(p)
            self.progress.advance(staking)
        try:
            self._services()
            self._jobs()
        finally:
            self.stop.set()
            for thread in self.threads:
                if thread.ident is not None:
                    thread.join(timeout=60)
            self.market.close(wait=False)
            self.services_log.close()
            self._shutdown_sites()
        summary = self._summary()
        summary["seconds"] = round(time.monotonic() - started, 1)
        return summary

    def _chain(self) -> None:
        node = self.node
        node.stop()
        node.state_file.unlink(missing_ok=True)  # a fresh devnet every run
        self.url = node.start().url
        self.rpc = RpcClient(self.url)

    def _deploy(self) -> None:
        # SQLAlchemy and web3
        from ledger.db import database_url, forget_chain, open_ledger
        from ledger.tx import Sender
        from market.migrations import MARKET
        from oracle.migrations import ORACLE

        chain = connect(self.url)
        result = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), self.home, force=True)
        self.swarm = Swarm(chain, result.deployment)
        self.engine = open_ledger(database_url(self.home), MARKET, ORACLE)
        forget_chain(self.engine, chain.chain_id)  # rows of an earlier demo's devnet
        self.supply_at_start = self.swarm.token.functions.totalSupply().call()

    def _prepare(self) -> None:
        """What the services and the buyers load before they start: the market's and the
        oracle's modules, torch, and the buyers' table, written where the sites can read it."""
        # in a thread while the sites start (see the module's imports)
        import market.service  # noqa: F401
        import oracle.service  # noqa: F401
        from compute.checkpoints import registered_checkpoint  # noqa: F401  (torch)
        from compute.data import write_digits

        self.inputs = write_digits(self.home / "demo" / "digits.parquet")
        self.inputs.chmod(0o644)  # a site copies in only what every user of its machine may read

    def _sites(self) -> None:
        """A site per provider, as `swarm cluster up` starts them: each its own Ray cluster and agent."""
        stop_sites(self.home)  # an earlier demo's, if it was interrupted
        self.sites = {dev_account(s.account).address: s
                      for s in start_sites(self.home, {p.account: p.nodes for p in PROVIDERS}, self.url)}

    def _shutdown_sites(self) -> None:
        stop_sites(self.home)

    def _stake(self, p: DemoProvider) -> None:
        """What `swarm provider register` and `stake` do, through the provider's API."""
        provider = Provider(self.swarm, self.swarm.sender(dev_account(p.account).key), self.settings)
        site = self.sites[provider.address]
        registered = provider.declare(
            replace(p.hardware, site_url=site.url, site_fingerprint=site.fingerprint)
        )
        provider.stake(registered.min_stake_wei * STAKE_HEADROOM // 2)

    def _services(self) -> None:
        # loaded by `_prepare` while the sites started
        from market.service import MarketConfig, MarketService
        from oracle.config import load_config
        from oracle.service import OracleService, schedule

        self.storage = self.home / "results"  # the buyers' output: a directory the devnet's sites write
        self.services_log = ServicesLog(self.home / "demo" / "services.log")
        self.market = MarketService(self.swarm, self.swarm.sender(dev_account(0).key), self.engine, self.home,
                                    MarketConfig(interval_s=0.5))
        config = load_config()
        self.oracle = OracleService(
            self.swarm,
            self.engine,
            self.home,
            config,
            self.swarm.sender(dev_account(0).key),
            devnet_committee_keys(),
            schedule(config, devnet=True, epoch_length_s=EPOCH_S),
        )
        self.threads = [
            threading.Thread(target=self.market.run, args=(self.stop,), daemon=True, name="demo-market"),
            threading.Thread(target=self.oracle.run, args=(self.stop,), daemon=True, name="demo-oracle"),
            threading.Thread(target=self._clock, daemon=True, name="demo-clock"),
        ]
        for thread in self.threads:
            if thread.name != "demo-oracle":
                thread.start()  # the oracle's, once the first job is placed (_jobs)

    def _start_oracle(self) -> None:
        """The oracle starts measuring once the train job is placed: a first challenge, loading torch
        on the one core of the cheapest site while the market asks the sites what they hold, could
        make that site answer too late to be offered the job the story needs it to run."""
        oracle = next(t for t in self.threads if t.name == "demo-oracle")
        if oracle.ident is None:
            oracle.start()

    def _clock(self) -> None:
        """The devnet's clock at CLOCK_SPEEDUP× the wall clock."""
        while not self.stop.wait(1.0):
            self.rpc.increase_time(CLOCK_SPEEDUP - 1)
            self.rpc.mine()

    def _jobs(self) -> None:
        from compute.checkpoints import registered_checkpoint  # torch, loaded by `_prepare` already

        inputs = self.inputs
        steps = ("posted", "assigned", "running", "completed", "settled")
        train_task = self.progress.add_task("Buyer 1: train (the flaky provider)", total=len(steps))
        (train_id,) = self._post(BUYERS[0], job_specs(inputs)["train"])
        self._follow(train_id, train_task, steps, until="assigned")
        self._start_oracle()
        self._follow(train_id, train_task, steps, until="running")
        flaky = dev_account(PROVIDERS[2].account).address
        if self._provider_of(train_id) == flaky:
            run_dir = self.storage / f"{self.market.namespace}{train_id}"
            self._wait(lambda: self._still_open(train_id) and registered_checkpoint(run_dir) is not None,
                       every=0.05)
            kill_site(self.sites[flaky])
            self.lost_at_epoch = self._finalized_epochs()
            self.progress.update(train_task, description="Buyer 1: train (flaky site killed)")
        self._follow(train_id, train_task, steps, until="completed")
        specs = job_specs(inputs, train_id)
        infer_task = self.progress.add_task("Buyer 2: infer on the trained model", total=len(steps))
        finetune_task = self.progress.add_task("Buyer 1: finetune of the trained model", total=len(steps))
        (infer_id,) = self._post(BUYERS[1], specs["infer"])
        (finetune_id,) = self._post(BUYERS[0], specs["finetune"])
        self.job_ids = {"train": train_id, "infer": infer_id, "finetune": finetune_id}
        for job_id, task in ((train_id, train_task), (infer_id, infer_task), (finetune_id, finetune_task)):
            self._follow(job_id, task, steps, until="settled")
        # Epochs finalized since the flaky site was lost, until the oracle has slashed it: the count
        # says what it counts (not the chain's epoch number), and ends at the number it took.
        lost_at = self.lost_at_epoch if self.lost_at_epoch is not None else self._finalized_epochs()
        epochs = self.progress.add_task("Oracle epochs since the loss", total=EPOCHS_AFTER_LOSS + 1)

        def since_loss() -> int:
            count = self._finalized_epochs() - lost_at
            self.progress.update(epochs, completed=min(count, EPOCHS_AFTER_LOSS + 1))
            return count

        self._wait(lambda: since_loss() >= 0 and self._flaky_slashed())
        taken = since_loss()
        self.progress.update(epochs, total=max(taken, 1), completed=taken)
        self.stop.set()  # the services rest; the providers claim what they earned
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(timeout=60)
        claims = self.progress.add_task("Providers claim their rewards", total=len(PROVIDERS))
        for p in PROVIDERS:
            self._claim(p)
            self.progress.advance(claims)

    def _claim(self, p: DemoProvider) -> None:
        """What `swarm provider claim` does: one proof from the ledger for every epoch so far."""
        # the ORM and the reward proofs (numpy)
        from sqlmodel import Session

        from ledger import rewards
        from ledger.indexer import Indexer

        Indexer(self.swarm, self.engine, confirmations=0).sync()
        address = dev_account(p.account).address
        with Session(self.engine) as session:
            leaf = reward_leaf(session, self.swarm.chain.chain_id, address)
        if leaf is not None and leaf.cumulative > 0:
            rewards.claim(self.swarm, self.swarm.sender(dev_account(p.account).key), address, leaf.cumulative,
                          list(leaf.proof))

    def _post(self, buyer: int, spec: dict) -> list[int]:
        # pydantic's spec models
        from market.spec import validate_spec
        from market.storage import pin

        # The table stays where it is, pinned by its sha256: the devnet's sites read this machine's
        # files, and write the results to the buyers' output here.
        parsed = pin(validate_spec(spec, now=self.swarm.chain.timestamp()), self.home,
                     default_output=str(self.storage))
        digest = store_spec(self.home, parsed.canonical())
        sender = self.swarm.sender(dev_account(buyer).key)
        return [
            post_job(
                self.swarm, sender, digest, parsed.max_price_per_unit, parsed.max_units, parsed.deadline
            )[0]
            for _ in range(parsed.replicas)
        ]

    def _still_open(self, job_id: int) -> bool:
        """True while the job is open; a job that ended otherwise than settled ends the demo."""
        state = self._state(job_id)
        if state in ("failed", "expired", "cancelled", "reclaimed"):
            raise SwarmError(f"Demo job {job_id} ended {state}: {self._record(job_id).error}")
        return True

    def _follow(self, job_id: int, task, steps: tuple[str, ...], until: str) -> None:
        def reached() -> bool:
            self._still_open(job_id)
            state = self._state(job_id)
            order = {"queued": 0, "assigned": 1, "running": 2, "ran": 2, "completed": 3, "disputed": 3,
                     "settled": 4}
            self.progress.update(task, completed=order.get(state, 0) + 1)
            return order.get(state, -1) >= steps.index(until)
        self._wait(reached)

    def _wait(self, check, every: float = 0.5) -> None:
        end = time.monotonic() + TIMEOUT_S
        while time.monotonic() < end:
            if check():
                return
            time.sleep(every)
        raise SwarmError(f"The demo did not finish within {TIMEOUT_S:g} s; see `swarm job list --all` and "
                         "`swarm oracle show`.")

    def _record(self, job_id: int):
        from sqlmodel import Session

        from market.records import MarketJob  # SQLModel

        with Session(self.engine) as session:
            return session.get(MarketJob, (self.swarm.chain.chain_id, job_id))

    def _state(self, job_id: int) -> str:
        record = self._record(job_id)
        return record.state if record is not None else "posted"

    def _provider_of(self, job_id: int) -> str | None:
        record = self._record(job_id)
        return record.provider if record is not None else None

    def _finalized_epochs(self) -> int:
        return int(self.swarm.distributor.functions.lastFinalizedEpoch().call())

    def _flaky_slashed(self) -> bool:
        return stake.provider_info(self.swarm, dev_account(PROVIDERS[2].account).address).jailed_until > 0

    # ── the summary ──────────────────────────────────────────────────────────
    def _summary(self) -> dict:
        # the ORM
        from sqlmodel import Session, col, select

        from ledger.indexer import Indexer
        from ledger.indexer.models import Job, SlashRow
        from oracle.records import OracleEpoch, ProviderScore

        Indexer(self.swarm, self.engine, confirmations=0).sync()
        chain_id = self.swarm.chain.chain_id
        with Session(self.engine) as session:
            epochs = session.exec(
                select(OracleEpoch)
                .where(OracleEpoch.chain_id == chain_id, OracleEpoch.state == "finalized")
                .order_by(col(OracleEpoch.epoch))
            ).all()
            scores = session.exec(select(ProviderScore).where(ProviderScore.chain_id == chain_id)).all()
            slashes = session.exec(select(SlashRow).where(SlashRow.chain_id == chain_id)).all()
            jobs = {j.job_id: j for j in session.exec(select(Job).where(Job.chain_id == chain_id))}
        last = epochs[-1].epoch if epochs else 0
        cumulative = {s.provider: s.cumulative_wei for s in scores if s.epoch == last}
        providers = []
        for p in PROVIDERS:
            address = dev_account(p.account).address
            info = stake.provider_info(self.swarm, address)
            providers.append(
                {
                    "name": p.name,
                    "address": address,
                    "nodes": p.nodes,
                    "stake_wei": str(info.stake),
                    "jailed": info.jailed_until > 0,
                    "tombstoned": info.tombstoned,
                    "rewards_wei": str(cumulative.get(address, 0)),
                    "balance_wei": str(self.swarm.balance_of(address)),
                    "claimed_wei": str(self.swarm.distributor.functions.claimed(address).call()),
                }
            )
        job_rows = []
        for kind, job_id in self.job_ids.items():
            on_chain, row = job_info(self.swarm, job_id), jobs.get(job_id)
            record = self._record(job_id)
            job_rows.append(
                {
                    "kind": kind,
                    "id": job_id,
                    "status": on_chain.status.name.lower(),
                    "provider": on_chain.provider,
                    "units": on_chain.units_used,
                    "payment_wei": str(row.payment if row else 0),
                    "fee_wei": str(row.fee if row else 0),
                    "refund_wei": str(row.refund if row else 0),
                    "escrow_wei": str(on_chain.escrow),
                    "result_dir": record.result_dir if record else None,
                    "attempts": record.attempts if record else 0,
                    "accuracy": _accuracy(record.metrics if record else None),
                }
            )
        per_epoch = []
        for e in epochs:
            scored = [s for s in scores if s.epoch == e.epoch]
            paid = sum(s.reward_wei for s in scored)
            per_epoch.append({"epoch": e.epoch, "emission_wei": str(e.emission_wei), "paid_wei": str(paid),
                              "why_unpaid": "" if paid else _why_unpaid(scored),
                              "slashes": [{"provider": s["provider"], "row": s["row"], "bps": s["bps"]}
                                          for s in e.slashes]})
        holders = {f"account {i}": dev_account(i).address for i in range(10)}
        holders |= {name: address for name, address in self.swarm.deployment.addresses.items()}
        # The fees and the slashes' share: the market's treasury, which is the vault's too.
        holders["treasury"] = self.swarm.read("JobMarket", "treasury")
        balances = {name: str(self.swarm.balance_of(address)) for name, address in holders.items()}
        supply = self.swarm.token.functions.totalSupply().call()
        return {
            "chain_id": chain_id,
            "providers": providers,
            "jobs": job_rows,
            "epochs": per_epoch,
            "slashes": [
                {
                    "provider": s.provider,
                    "reason": s.reason,
                    "amount_wei": str(s.from_stake + s.from_unbonding),
                    "epoch": s.epoch,
                    "job": s.job_id,
                }
                for s in slashes
            ],
            "balances": balances,
            "checks": {
                "every_job_settled": all(j["status"] == "settled" for j in job_rows),
                "rewards_equal_emission": all(e["paid_wei"] == e["emission_wei"] for e in per_epoch),
                "flaky_slashed": any(
                    s.provider == dev_account(PROVIDERS[2].account).address for s in slashes
                ),
                "supply_accounted": sum(int(b) for b in balances.values()) == supply,
                "rewards_claimed": all(p["claimed_wei"] == p["rewards_wei"] for p in providers),
            },
            "supply_wei": str(supply),
            "supply_at_start_wei": str(self.supply_at_start),
            "results": str(self.home / "results"),
            "log": str(self.home / "demo" / "services.log"),
            "dashboard": "swarm dashboard  →  http://127.0.0.1:8600",
            "rpc_url": self.url,
            # What the next block's time is ahead of now: a job posted next counts its deadline from it.
            "clock_ahead_s": self.swarm.chain.timestamp("pending") - round(time.time()),
        }


def _why_unpaid(scored: list) -> str:
    """Why an epoch paid nothing: no provider was eligible, and what kept each out (the oracle's
    notes, as `swarm oracle show` prints them), or that none was scored at all."""
    if not scored:
        return "no provider was scored yet"
    notes = sorted({s.note for s in scored if s.note})
    return "no provider was eligible: " + ("; ".join(notes) if notes else "none earned a share")


def _accuracy(metrics: dict | None) -> float | None:
    """A job's accuracy on the digits: held-out (train, finetune) or over the table (infer)."""
    metrics = metrics or {}
    return metrics.get("val_accuracy", metrics.get("accuracy"))
