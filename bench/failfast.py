"""How soon the compute layer gives up. The tests assert each outcome (a ProviderFault, a
probe that says down, a job refused before any Ray work); the seconds it takes are measured
here, against the margins the tests used to assert, median of --runs.

Run: make bench-failfast   (or .venv/bin/python bench/failfast.py --runs 3)

On a local Ray cluster: a head with no CPUs and one-CPU nodes for providers A and B, plus a
node for provider D that is added and then killed.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Ray reads its authentication settings when it is first imported (as tests/ray_cluster.py does).
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray
from ray.cluster_utils import Cluster

from anvil import dev_address
from compute.challenge_node import ready_worker
from compute.checkpoints import registered_checkpoint
from compute.dispatch import run_job
from compute.errors import ComputeError, InvalidJob, ProviderFault
from compute.jobs import ComputeJob
from compute.node import LOCAL_HEALTH_CHECKS
from compute.placement import node_labels, node_resources
from compute.ray_private import system_config_args
from compute.telemetry import probe, probe_all

RESULTS = REPO / "bench" / "results" / "failfast.json"
OBJECT_STORE = 80 * 1024 * 1024
A, B, D = dev_address(1), dev_address(2), dev_address(9)
NOBODY = "0x000000000000000000000000000000000000dEaD"
LONG = {"model": "mlp", "samples": 512, "epochs": 8}


def timed(action: Callable[[], object], expected: type[BaseException] | None = None) -> float:
    """Seconds `action` takes; it must raise `expected` (or return, when None)."""
    started = time.perf_counter()
    try:
        action()
    except BaseException as exc:
        if expected is None or not isinstance(exc, expected):
            raise
    else:
        if expected is not None:
            raise AssertionError(f"expected {expected.__name__}")
    return time.perf_counter() - started


class Bench:
    def __init__(self, storage: Path) -> None:
        self.storage = storage
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": OBJECT_STORE,
            **system_config_args(LOCAL_HEALTH_CHECKS)})
        for provider in (A, B):
            self.add_node(provider)
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False)

    def add_node(self, provider: str):
        node = self.cluster.add_node(
            num_cpus=1,
            labels=node_labels(provider),
            resources=node_resources(provider),
            object_store_memory=OBJECT_STORE,
        )
        self.cluster.wait_for_nodes()
        return node

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()

    def challenge_of_no_node(self) -> float:
        return timed(lambda: ready_worker(NOBODY, 2), ProviderFault)

    def probe_of_never_joined(self) -> float:
        started = time.perf_counter()
        assert not probe(dev_address(5), timeout_s=2).alive
        return time.perf_counter() - started

    def probe_of_dead_node(self) -> float:
        node = self.add_node(D)
        assert probe(D, timeout_s=60).alive
        self.cluster.remove_node(node)
        started = time.perf_counter()
        down, live = probe_all([D, A], timeout_s=5)
        assert not down.alive and live.alive
        return time.perf_counter() - started

    def bad_job(self) -> float:
        job = ComputeJob.of("bad", "train", NOBODY, storage=str(self.storage))
        return timed(lambda: run_job(job), InvalidJob)

    def provider_loss(self, run: int) -> float:
        node = self.add_node(D)
        job = ComputeJob.of(f"lost-{run}", "train", D, storage=str(self.storage), timeout_s=240, params=LONG)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(run_job, job)
            while registered_checkpoint(job.result_dir()) is None:
                if running.done():
                    raise AssertionError(f"the job ended before its first checkpoint: {running.exception()}")
                time.sleep(0.05)
            self.cluster.remove_node(node)
            return timed(lambda: running.result(timeout=240), ProviderFault)

    def job_timeout(self, run: int) -> float:
        job = ComputeJob.of(f"slow-{run}", "train", B, storage=str(self.storage), timeout_s=6, params=LONG)
        return timed(lambda: run_job(job), ComputeError)


# (name, what the tests used to assert, in seconds)
CASES = [
    ("challenge_of_a_provider_with_no_node (timeout 2 s)", 4.0),
    ("probe_of_a_provider_that_never_joined (timeout 2 s)", 4.0),
    ("probe_of_a_dead_node_beside_a_live_one (timeout 5 s)", 7.0),
    ("bad_job_refused_before_ray_work", 5.0),
    ("provider_losing_its_last_node_noticed_after_removal", 90.0),
    ("job_past_its_timeout_of_6_s_stopped", 60.0),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {name: [] for name, _ in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            for run in range(args.runs):
                measured = [
                    bench.challenge_of_no_node(),
                    bench.probe_of_never_joined(),
                    bench.probe_of_dead_node(),
                    bench.bad_job(),
                    bench.provider_loss(run),
                    bench.job_timeout(run),
                ]
                for (name, _), seconds in zip(CASES, measured, strict=True):
                    figures[name].append(round(seconds, 2))
        finally:
            bench.close()
    report = {
        "runs": args.runs,
        "cases": {name: {"median_s": round(statistics.median(figures[name]), 2), "all_s": figures[name],
                         "bound_s": bound, "within": statistics.median(figures[name]) <= bound}
                  for name, bound in CASES},
    }
    report["all_within"] = all(case["within"] for case in report["cases"].values())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
