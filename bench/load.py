"""Load: 1,000 jobs posted in a burst against anvil; the market must keep up and lose none.

Run: make bench-load   (or .venv/bin/python bench/load.py --jobs 1000)

A real anvil with the contracts, a Ray cluster of a head and four one-CPU provider nodes,
a SQLite ledger, and the market service ticking in a thread. A small model is trained once;
then three buyers post `--jobs` inference jobs on it as fast as they can (one thread each).
The market matches them as capacity frees up, runs each on its provider's node, completes
and (with the devnet's clock run fast past the dispute window) settles them. Recorded: the
burst's duration and rate, the time until every job is completed and until every job is
settled (the queue drained), the market's passes, and the checks — every job settled, each
exactly once, and the market holding no escrow at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import ray
from ray.cluster_utils import Cluster
from sqlmodel import Session, func, select

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from compute.data import synthetic_sequences
from compute.dispatch import run_job
from compute.jobs import ComputeJob
from compute.placement import node_labels, node_resources
from ledger import jobs, stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import deploy, error_decoder
from ledger.specs import store_spec
from ledger.tx import Sender
from market.migrations import MARKET
from market.records import MarketJob
from market.service import MarketConfig, MarketService
from market.spec import validate_spec
from market.storage import pin
from oracle.migrations import ORACLE

RESULTS = Path(__file__).resolve().parent / "results" / "load.json"
PROVIDERS = (1, 2, 3, 4)
BUYERS = (5, 6, 7)


def count(engine, state: str) -> int:
    with Session(engine) as session:
        return session.exec(select(func.count()).select_from(MarketJob).where(MarketJob.state == state)).one()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        node = AnvilNode(AnvilConfig(home=home, port=free_port()))
        node.start()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                "object_store_memory": 80 * 1024 * 1024})
        for i in PROVIDERS:
            address = dev_account(i).address
            cluster.add_node(num_cpus=1, labels=node_labels(address), resources=node_resources(address),
                             object_store_memory=80 * 1024 * 1024)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        stop = threading.Event()
        rpc = RpcClient(node.config.url)
        try:
            chain = connect(node.config.url)
            swarm = Swarm(
                chain, deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home).deployment
            )
            for i in PROVIDERS:
                sender = swarm.sender(dev_account(i).key)
                stake.register(
                    swarm, sender, store_spec(home, {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1}), 1
                )
                stake.stake(swarm, sender, 1_500 * 10**18)
            base = run_job(
                ComputeJob.of(
                    "base",
                    "train",
                    dev_account(1).address,
                    storage=str(home / "results"),
                    params={"model": "tiny-transformer", "samples": 256, "epochs": 1},
                )
            )
            inputs = home / "inputs.npy"
            np.save(inputs, synthetic_sequences(5, n=16)[0].numpy())
            engine = open_ledger(f"sqlite:///{home / 'ledger.db'}", MARKET, ORACLE)
            service = MarketService(swarm, swarm.sender(dev_account(0).key), engine, home,
                                    MarketConfig(interval_s=0.5))
            passes = []
            loop = threading.Thread(
                target=service.run,
                args=(stop,),
                kwargs={"on_tick": lambda r: passes.append(time.monotonic())},
                daemon=True,
            )

            def clock() -> None:  # the 60 s dispute window passes in 6 s
                while not stop.wait(1.0):
                    rpc.increase_time(10)
                    rpc.mine()

            spec = {"kind": "infer", "model": base.result_dir, "dataset": str(inputs), "max_units": 60,
                    "max_price_per_unit": "0.001", "deadline": "12h", "resources": {"workers": 1}}

            def burst(buyer: int, n: int) -> list[int]:
                sender = swarm.sender(dev_account(buyer).key)
                posted = []
                for k in range(n):
                    parsed = pin(
                        validate_spec(spec | {"seed": buyer * 100_000 + k}, now=swarm.chain.timestamp()),
                        home,
                        default_output=str(home / "results"),
                    )
                    digest = store_spec(home, parsed.canonical())
                    posted.append(
                        jobs.post_job(
                            swarm,
                            sender,
                            digest,
                            parsed.max_price_per_unit,
                            parsed.max_units,
                            parsed.deadline,
                        )[0]
                    )
                return posted

            loop.start()
            threading.Thread(target=clock, daemon=True).start()
            shares = [
                args.jobs // len(BUYERS) + (1 if i < args.jobs % len(BUYERS) else 0)
                for i in range(len(BUYERS))
            ]
            began = time.monotonic()
            with ThreadPoolExecutor(len(BUYERS)) as pool:
                job_ids = [j for ids in pool.map(burst, BUYERS, shares) for j in ids]
            posted_s = time.monotonic() - began
            completed_s = settled_s = None
            while settled_s is None:
                time.sleep(1.0)
                done = count(engine, "settled")
                if completed_s is None and done + count(engine, "completed") >= args.jobs:
                    completed_s = time.monotonic() - began
                if done >= args.jobs:
                    settled_s = time.monotonic() - began
                if time.monotonic() - began > 3_600:
                    raise SystemExit(f"not drained within an hour: {done} of {args.jobs} settled")
            statuses = [jobs.job_info(swarm, j).status.name for j in job_ids]
            escrow_left = swarm.balance_of(swarm.market.address)
            failed = count(engine, "failed")
        finally:
            stop.set()
            ray.shutdown()
            cluster.shutdown()
            node.stop()
    assert completed_s is not None  # every job settled, so every job completed first
    figures = {
        "jobs": args.jobs,
        "provider_nodes": len(PROVIDERS),
        "burst_s": round(posted_s, 2),
        "posted_per_s": round(args.jobs / posted_s, 1),
        "all_completed_s": round(completed_s, 1),
        "drained_s": round(settled_s, 1),
        "jobs_per_s": round(args.jobs / settled_s, 2),
        "market_passes": len(passes),
        "checks": {
            "all_settled_on_chain": all(s == "SETTLED" for s in statuses),
            "distinct_job_ids": len(set(job_ids)) == args.jobs,
            "market_holds_no_escrow": escrow_left == 0,
            "none_failed": failed == 0,
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
