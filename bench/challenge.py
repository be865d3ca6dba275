"""Benchmark challenge: seconds per node on the CPU (target ≤ 5 s) and the throughput that
justifies the reference table's "cpu" entry.

Run: .venv/bin/python bench/challenge.py [--runs 5]

Measured, each over --runs fresh seeds, median:
  - node: `run_challenge` on one CPU core (torch limited to one thread, as a Ray task with
    num_cpus=1 is) — the rounds the node times, and the whole call with setup and checksum;
  - round trip: `run_on_provider` on a local Ray cluster with one 1-CPU provider node —
    what the oracle waits for, scheduling and transfer included;
  - verify: `verify`, the oracle recomputing the checksum on this machine's CPU (no cache).
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

import ray  # noqa: E402
import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from anvil import dev_account  # noqa: E402
from compute import challenge as ch  # noqa: E402
from compute.placement import node_labels, node_resources  # noqa: E402
from compute.reference import CPU_REFERENCE_GFLOPS  # noqa: E402

RESULTS = REPO / "bench" / "results" / "challenge.json"
TARGET_SECONDS = 5.0
PROVIDER = dev_account(1).address


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def bench_node(runs: int) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rounds_s, call_s, gflops = [], [], []
    try:
        for _ in range(runs):
            started = time.perf_counter()
            result = ch.run_challenge(ch.Challenge(seed=secrets.randbits(63)), "cpu")
            call_s.append(time.perf_counter() - started)
            rounds_s.append(result.seconds)
            gflops.append(result.throughput_gflops)
    finally:
        torch.set_num_threads(threads)
    return {"rounds_s": _median(rounds_s), "call_s": _median(call_s), "gflops": round(statistics.median(gflops), 1),
            "gflops_all": [round(g, 1) for g in gflops], "device_name": result.device_name}


def bench_round_trip(runs: int) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * 1024 * 1024})
    cluster.add_node(num_cpus=1, labels=node_labels(PROVIDER), resources=node_resources(PROVIDER),
                     object_store_memory=80 * 1024 * 1024)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        round_trip, verify_s, node_gflops, verdicts = [], [], [], []
        for _ in range(runs):
            challenge = ch.Challenge(seed=secrets.randbits(63))
            started = time.perf_counter()
            result = ch.run_on_provider(PROVIDER, challenge, timeout_s=120)
            round_trip.append(time.perf_counter() - started)
            node_gflops.append(result.throughput_gflops)
            ch.expected_checksum.cache_clear()
            started = time.perf_counter()
            verdict = ch.verify(challenge, result, "cpu")
            verify_s.append(time.perf_counter() - started)
            verdicts.append(verdict.passed)
        return {"round_trip_s": _median(round_trip), "round_trip_all": [round(s, 3) for s in round_trip],
                "node_gflops": round(statistics.median(node_gflops), 1), "verify_s": _median(verify_s),
                "all_verified": all(verdicts)}
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    workload = ch.Challenge(seed=0)
    result = {
        "workload": {"size": workload.size, "rounds": workload.rounds, "gflop": workload.flops / 1e9},
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "node": bench_node(args.runs),
        "provider": bench_round_trip(args.runs),
        "target_seconds": TARGET_SECONDS,
        "cpu_reference_gflops": CPU_REFERENCE_GFLOPS,
    }
    result["meets_target"] = result["provider"]["round_trip_s"] <= TARGET_SECONDS
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
