"""Benchmark challenge: seconds per node on the CPU (target ≤ 5 s), its throughput beside the
CPU reference (this machine's core as `make cpu-reference` measured it, × CPU_MARGIN; none
when it has not been measured), and what the oracle's own timing adds.

Run: .venv/bin/python bench/challenge.py [--runs 5]

Measured, each over --runs fresh seeds, median:
  - node: computing the rounds and committing to them (`checkpoints_of`, `Prover`) on one CPU
    core (torch limited to one thread, as a Ray actor with num_cpus=1 is), and of that the
    commitment;
  - round trip: a ChallengeWorker readied on a 1-CPU provider node of a local Ray cluster
    (`ready_worker`, untimed, as a site does before the oracle's clock starts), then the seed
    sent and the root received — what the oracle's clock sees, less the site's HTTP — and
    the throughput that gives; and the rounds' and the commitment's times the worker reports
    with its root;
  - verify: opening the sampled rows and `check`ing them, all verified.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

# Ray reads its authentication settings when it is first imported (as tests/ray_cluster.py does).
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray
import torch
from ray.cluster_utils import Cluster

from anvil import dev_account
from compute import challenge_node as node
from compute.challenge import Challenge
from compute.placement import node_labels, node_resources
from compute.proof import Prover, check, opening_from_json, root_from_hex, sample
from compute.reference import CpuReferenceMissing, cpu_reference_gflops

RESULTS = REPO / "bench" / "results" / "challenge.json"
TARGET_SECONDS = 5.0
PROVIDER = dev_account(1).address


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def bench_node(runs: int) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    node_s, commit_s, gflops = [], [], []
    try:
        for _ in range(runs):
            challenge = Challenge(seed=secrets.randbits(63))
            started = time.perf_counter()
            checkpoints = node.checkpoints_of(challenge)
            computed = time.perf_counter()
            Prover(challenge, checkpoints)
            node_s.append(time.perf_counter() - started)
            commit_s.append(time.perf_counter() - computed)
            gflops.append(challenge.flops / node_s[-1] / 1e9)
    finally:
        torch.set_num_threads(threads)
    return {
        "node_s": _median(node_s),
        "commit_s": _median(commit_s),
        "gflops": round(statistics.median(gflops), 1),
        "gflops_all": [round(g, 1) for g in gflops],
        "device_name": node.device_name("cpu"),
    }


def bench_round_trip(runs: int) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * 1024 * 1024})
    cluster.add_node(num_cpus=1, labels=node_labels(PROVIDER), resources=node_resources(PROVIDER),
                     object_store_memory=80 * 1024 * 1024)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        ready_s, round_trip, gflops, verified, node_rounds_s, node_commit_s = [], [], [], [], [], []
        for _ in range(runs):
            challenge = Challenge(seed=secrets.randbits(63))
            started = time.perf_counter()
            worker, _ = node.ready_worker(PROVIDER, timeout_s=120)
            ready_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = ray.get(worker.commit.remote({**challenge.params(), "seed": challenge.seed}))
            round_trip.append(time.perf_counter() - started)
            node_rounds_s.append(answer["rounds_s"])
            node_commit_s.append(answer["commit_s"])
            gflops.append(challenge.flops / round_trip[-1] / 1e9)
            cells = sample(challenge)
            openings = ray.get(worker.open.remote(cells))
            ray.kill(worker)
            check(challenge, root_from_hex(answer["root"]), cells, [opening_from_json(o) for o in openings])
            verified.append(True)
        return {
            "ready_s": _median(ready_s),
            "round_trip_s": _median(round_trip),
            "round_trip_all": [round(s, 3) for s in round_trip],
            "oracle_gflops": round(statistics.median(gflops), 1),
            "node_rounds_s": _median(node_rounds_s),  # the worker's own account, sent with its root
            "node_commit_s": _median(node_commit_s),
            "all_verified": len(verified) == runs,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


def cpu_reference() -> float | None:
    try:
        return cpu_reference_gflops()
    except CpuReferenceMissing:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    workload = Challenge(seed=0)
    result = {
        "workload": {"size": workload.size, "rounds": workload.rounds, "gflop": workload.flops / 1e9},
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "node": bench_node(args.runs),
        "provider": bench_round_trip(args.runs),
        "target_seconds": TARGET_SECONDS,
        "cpu_reference_gflops": cpu_reference(),
    }
    result["meets_target"] = result["provider"]["round_trip_s"] <= TARGET_SECONDS
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
