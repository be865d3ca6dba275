"""The challenge as a proof (compute/proof.py): what checking it costs the oracle against
the node's work (issue target: ratio ≤ 0.01), and the soundness the sample gives.

Run: .venv/bin/python bench/proof.py [--runs 5] [--commit-only | --gpu-shapes]

For each shape (size, rounds, stride), over --runs fresh seeds, median:
  - node: computing every round on one CPU core (torch limited to one thread, as a Ray actor
    with num_cpus=1 is), and of that the commitment (the Merkle tree over every row);
  - verify: reading the node's openings from their JSON and `check`ing them — CELLS rows over
    SAMPLES checkpoints, B made from the seed included — on this machine, one thread: what
    one challenge costs the oracle; and how many bytes the openings are;
  - the projected oracle time for 100,000 providers' challenges on this machine's cores: one
    challenge each (CPU nodes), and two (GPU nodes: fp32 and the tensor-core precision, whose
    check is the same integer arithmetic);
  - a CPU node's commitment alone at the production shape (2048 × 32, stride 1: 128 MiB of
    checkpoints, every row hashed with hashlib), --runs times over one challenge's checkpoints,
    against its target: no slower than the 0.25 s it took before GPU nodes hashed on the device.
    With --commit-only, only this is measured, and only its entry of the results is rewritten.
  - with --gpu-shapes, only the oracle's side of the challenges it gives GPUs (their shapes timed
    to each declared model: compute.challenge.timed_shape, oracle/config.toml): making B and
    recomputing `stride` rounds of the CELLS sampled rows, one thread, --runs times; the node's
    side is its reference's (datasheet) flops, not measured. Only its entry is rewritten.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

from compute.challenge import Challenge
from compute.challenge_node import checkpoints_of
from compute.proof import (
    CELLS,
    SAMPLES,
    Prover,
    check,
    opening_as_json,
    opening_from_json,
    pass_probability,
    sample,
)

RESULTS = REPO / "bench" / "results" / "proof.json"
# (size, rounds, stride): the old devnet size, the production size (oracle/config.toml), and
# two strided shapes that commit less for a GPU to hash (BENCHMARKS.md, the challenge on a GPU).
SIZES = ((1024, 32, 1), (2048, 32, 1), (2048, 32, 8), (1024, 32, 16))
PROVIDERS = 100_000
CPU_COMMIT_TARGET_S = 0.25


def bench_size(size: int, rounds: int, stride: int, runs: int) -> dict:
    node_s, commit_s, verify_s, sent = [], [], [], []
    for _ in range(runs):
        challenge = Challenge(seed=secrets.randbits(63), size=size, rounds=rounds, stride=stride)
        started = time.perf_counter()
        checkpoints = checkpoints_of(challenge)
        computed = time.perf_counter()
        prover = Prover(challenge, checkpoints)
        root = prover.root
        node_s.append(time.perf_counter() - started)
        commit_s.append(time.perf_counter() - computed)
        cells = sample(challenge)
        wire = json.dumps([opening_as_json(o) for o in prover.open(cells)])
        sent.append(len(wire))
        started = time.perf_counter()
        check(challenge, root, cells, [opening_from_json(o) for o in json.loads(wire)])
        verify_s.append(time.perf_counter() - started)
    node, verify = statistics.median(node_s), statistics.median(verify_s)
    return {"size": size, "rounds": rounds, "stride": stride, "node_s": round(node, 3),
            "commit_s": round(statistics.median(commit_s), 3),
            "verify_s": round(verify, 4), "ratio": round(verify / node, 5),
            "verify_all": [round(v, 4) for v in verify_s],
            "oracle_minutes_for_100k": round(verify * PROVIDERS / (os.cpu_count() or 1) / 60, 1),
            "oracle_minutes_for_100k_gpus": round(2 * verify * PROVIDERS / (os.cpu_count() or 1) / 60, 1),
            "opening_bytes": int(statistics.median(sent))}


def bench_cpu_commit(runs: int) -> dict:
    challenge = Challenge(seed=secrets.randbits(63), size=2048, rounds=32)
    checkpoints = checkpoints_of(challenge)
    commit_s = []
    for _ in range(runs):
        started = time.perf_counter()
        Prover(challenge, checkpoints)
        commit_s.append(time.perf_counter() - started)
    median = statistics.median(commit_s)
    return {"size": 2048, "rounds": 32, "stride": 1,
            "committed_mib": round(sum(c.nbytes for c in checkpoints) / (1 << 20), 1),
            "commit_s": round(median, 3), "commit_all": [round(s, 3) for s in commit_s],
            "target_s": CPU_COMMIT_TARGET_S, "meets_target": median <= CPU_COMMIT_TARGET_S}


GPU_SHAPES = (("H100", "fp32"), ("H100", "bf16"), ("L4", "bf16"), ("T4", "fp16"))


def bench_gpu_shapes(runs: int) -> list[dict]:
    """The oracle's check of each GPU challenge shape it gives, on one thread: B from the seed
    and `stride` rounds of the sampled rows (the Merkle paths, microseconds, left out)."""
    from compute.challenge import step, timed_shape
    from compute.reference import reference_gflops
    from oracle.config import load_config

    epoch = load_config().epoch
    rows = []
    for model, precision in GPU_SHAPES:
        size, rounds, stride = timed_shape(reference_gflops(model, precision), epoch.gpu_challenge_size,
                                           epoch.gpu_challenge_s)
        challenge = Challenge(seed=secrets.randbits(63), size=size, rounds=rounds, stride=stride)
        check_s = []
        for _ in range(runs):
            started = time.perf_counter()
            step(challenge.first_rows(list(range(CELLS))), challenge.b(), stride)
            check_s.append(time.perf_counter() - started)
        median = statistics.median(check_s)
        rows.append({"model": model, "precision": precision, "size": size, "rounds": rounds, "stride": stride,
                     "node_tflop": round(challenge.flops / 1e12, 1),
                     "node_s_at_reference": epoch.gpu_challenge_s,
                     "check_s": round(median, 3), "check_all": [round(v, 3) for v in check_s],
                     "core_hours_for_100k": round(median * PROVIDERS / 3600, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--commit-only", action="store_true", help="measure a CPU node's commitment alone")
    parser.add_argument("--gpu-shapes", action="store_true",
                        help="measure the oracle's check of GPU challenges")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.gpu_shapes:
        from threadpoolctl import threadpool_limits

        result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        with threadpool_limits(limits=1):
            result["gpu_shapes"] = bench_gpu_shapes(args.runs)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["gpu_shapes"], indent=2))
        return
    if args.commit_only:
        result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        result["cpu_commit"] = bench_cpu_commit(args.runs)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["cpu_commit"], indent=2))
        return
    result = {
        "runs": args.runs, "cpus": os.cpu_count(), "samples": SAMPLES, "cells": CELLS,
        "sizes": [bench_size(size, rounds, stride, args.runs) for size, rounds, stride in SIZES],
        "cpu_commit": bench_cpu_commit(args.runs),
        "pass_probability": {f"skipped_{name}_32": pass_probability(32, SAMPLES, skipped, CELLS // SAMPLES,
                                                                    skipped_rows=share, size=2048)
                             for name, skipped, share in (("all", 32, 1.0), ("half_the_rounds", 16, 1.0),
                                                          ("a_quarter_of_the_rounds", 8, 1.0),
                                                          ("half_of_every_rounds_rows", 32, 0.5))},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
