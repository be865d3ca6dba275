"""Dispatch overhead: time from handing a `train` job to the runner to its first training
step, against handing the same training loop to `TorchTrainer` directly on the same
cluster. Goal: ratio ≤ 1.10.

Run: make bench-dispatch   (or .venv/bin/python bench/dispatch.py --runs 5)

Both paths run compute.runners.train.train_loop with the same data and one worker of one
CPU on the same provider node; the loop stamps the wall-clock time of its first step.
The runner's path adds validation, the capacity check, pinning and the provider watch.
Runs alternate between the two paths; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray
from ray.cluster_utils import Cluster
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from anvil import dev_account
from compute.dispatch import run_job
from compute.jobs import ComputeJob
from compute.placement import node_labels, node_resources
from compute.runners.train import STATE, TrainParams, loop_config, train_loop

RESULTS = Path(__file__).resolve().parent / "results" / "dispatch.json"
PROVIDER = dev_account(1).address
PARAMS = {"model": "mlp", "dataset": "synthetic-classification", "samples": 512, "epochs": 1}


def direct(storage: Path, name: str) -> float:
    """Seconds from building a plain TorchTrainer to the loop's first step."""
    job = ComputeJob.of(name, "train", PROVIDER, params=PARAMS, storage=str(storage))
    params = job.params
    assert isinstance(params, TrainParams)
    started = time.time()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=loop_config(job, params),
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=name, storage_path=str(storage)),
    )
    result = trainer.fit()
    with result.checkpoint.as_directory() as directory:
        state = json.loads((Path(directory) / STATE).read_text())
    return state["first_step_at"] - started


def through_runner(storage: Path, name: str) -> float:
    """Seconds from handing the job to run_job to the loop's first step."""
    started = time.time()
    result = run_job(ComputeJob.of(name, "train", PROVIDER, params=PARAMS, storage=str(storage)))
    return result.metrics["first_step_at"] - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": 80 * 1024 * 1024})
    cluster.add_node(num_cpus=1, labels=node_labels(PROVIDER), resources=node_resources(PROVIDER),
                     object_store_memory=80 * 1024 * 1024)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    direct_s: list[float] = []
    runner_s: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            storage = Path(tmp)
            through_runner(storage, "warmup-runner")  # first use imports torch etc. on the worker
            direct(storage, "warmup-direct")
            for i in range(args.runs):
                pair = [(direct_s, direct), (runner_s, through_runner)]
                for sink, fn in pair if i % 2 == 0 else reversed(pair):
                    sink.append(fn(storage, f"{fn.__name__}-{i}"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    figures = {
        "runs": args.runs,
        "direct_s": [round(x, 3) for x in direct_s],
        "runner_s": [round(x, 3) for x in runner_s],
        "direct_median_s": round(statistics.median(direct_s), 3),
        "runner_median_s": round(statistics.median(runner_s), 3),
    }
    figures["ratio"] = round(figures["runner_median_s"] / figures["direct_median_s"], 3)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
