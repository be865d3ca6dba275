"""End to end: a buyer posts a `train` job → its first training step on the provider's site,
with the market's share of that time.

Run: make bench-post-to-step   (or .venv/bin/python bench/post_to_step.py --runs 5)

A real anvil with the contracts deployed, one provider site (`swarm provider serve`: its own
Ray cluster of a head and one 1-CPU node, its agent over HTTPS), a SQLite ledger, and the
market service ticking in a thread at its default interval. Each run posts the same small
job (a new job id, so nothing is reused) and splits the time from the start of the post to
the loop's first step into:
  post     validating and storing the spec, the permit and the postJob transaction;
  market   the service noticing the job (polling), syncing the ledger, matching, the
           assignJob transaction, and the signed request that starts the lease on the site;
  compute  the lease to the first step: the site checking the request on chain, Ray's job
           submission, the sandbox, the lease's own Ray instance, Ray Train's controller,
           the worker process and the data.
Medians of the runs are reported, after one warm-up run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlmodel import Session, select

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from devnet.network import start_sites, stop_sites
from ledger import jobs, stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import deploy, error_decoder
from ledger.specs import store_spec
from ledger.tx import Sender
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.service import MarketConfig, MarketService
from market.spec import validate_spec
from oracle.migrations import ORACLE

RESULTS = Path(__file__).resolve().parent / "results" / "post_to_step.json"
PROVIDER = dev_account(1)
BUYER = dev_account(5)
SPEC = {
    "kind": "train", "model": "mlp", "dataset": "synthetic-classification",
    "resources": {"workers": 1, "cpus_per_worker": 1},
    "max_price_per_unit": "0.001", "max_units": 600, "deadline": "1h",
    "params": {"samples": 512, "epochs": 1},
}


def one_run(swarm: Swarm, home: Path, engine, seed: int) -> dict[str, float]:
    started = time.time()
    spec = validate_spec(SPEC | {"seed": seed, "output": str(home / "results")}, now=swarm.chain.timestamp())
    digest = store_spec(home, spec.canonical())
    job_id, _ = jobs.post_job(swarm, swarm.sender(BUYER.key), digest, spec.max_price_per_unit, spec.max_units,
                              spec.deadline)
    posted = time.time()
    while True:
        with Session(engine) as session:
            record = session.exec(select(MarketJob).where(MarketJob.job_id == job_id)).first()
            if record is not None and record.metrics.get("first_step_at"):
                running = session.exec(select(MarketTransition).where(
                    MarketTransition.job_id == job_id, MarketTransition.to_state == "running")).first()
                assert running is not None, f"job {job_id} has a first step but never ran"
                break
            if record is not None and record.state == "failed":
                raise RuntimeError(f"job {job_id} failed: {record.error}")
        time.sleep(0.2)
    first_step = record.metrics["first_step_at"]
    return {"post_s": posted - started, "market_s": running.at - posted, "compute_s": first_step - running.at,
            "total_s": first_step - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", type=float, default=MarketConfig.interval_s,
                        help="the service's polling interval (default: its default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        node = AnvilNode(AnvilConfig(home=home, port=free_port()))
        node.start()
        stop = threading.Event()
        try:
            chain = connect(node.config.url)
            deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home).deployment
            swarm = Swarm(chain, deployment)
            (site,) = start_sites(home, {1: 1}, node.config.url)
            provider = swarm.sender(PROVIDER.key)
            hardware = {"gpu_model": "RTX4090", "gpus": 1, "vram_gb": 24, "site_url": site.url,
                        "site_fingerprint": site.fingerprint}
            stake.register(swarm, provider, store_spec(home, hardware), 1)
            stake.stake(swarm, provider, 1_000 * 10**18)
            engine = open_ledger(f"sqlite:///{home / 'ledger.db'}", MARKET, ORACLE)
            config = MarketConfig(interval_s=args.interval)
            service = MarketService(swarm, swarm.sender(dev_account(0).key), engine, home, config)
            loop = threading.Thread(target=service.run, args=(stop,), daemon=True)
            loop.start()
            one_run(swarm, home, engine, seed=10_000)  # warm-up: the worker imports torch once
            runs = [one_run(swarm, home, engine, seed=i) for i in range(args.runs)]
        finally:
            stop.set()
            stop_sites(home)
            node.stop()
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    figures = {
        "runs": args.runs,
        "interval_s": args.interval,
        "median": medians,
        "market_share": round(medians["market_s"] / medians["total_s"], 3),
        "all": [{k: round(v, 3) for k, v in r.items()} for r in runs],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
