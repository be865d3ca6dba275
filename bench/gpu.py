"""The benchmark challenge on a GPU: measured TFLOPS per precision against the reference for
the GPU's model (compute/reference.py), where the node's time goes, and what checking it
costs the oracle.

Run: .venv/bin/python bench/gpu.py [--runs 3] [--shapes 2048x32/1,8192x16/1,8192x64/16]   (make bench-gpu)

For each shape (size × rounds / stride) and each precision the model is challenged in (fp32
and its tensor-core precision), over --runs fresh seeds, median:
  - rounds: the challenge's rounds alone on the GPU (the checkpoints copied back included);
  - commit: the Merkle tree over every committed row, on the host's CPU;
  - node: both — what the oracle's clock sees, less the network;
  - the reference for the model NVML names, and rounds ÷ reference and node ÷ reference;
  - verify: `check` of the sampled cells on this machine's CPU, its share of the node's time,
    and what 100,000 such checks would cost an oracle with this machine's cores.
The first shape is the production one (oracle/config.toml); the others show how the
commitment's share changes with the size and the stride. On a machine without a CUDA device
it measures nothing and says so (bench/results/gpu.json).
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

from compute.challenge import Challenge, checkpoints_of, gpu_identity
from compute.errors import ComputeError
from compute.proof import Prover, check, sample
from compute.reference import normalize_model, precisions, reference_gflops

RESULTS = REPO / "bench" / "results" / "gpu.json"
PROVIDERS = 100_000


def parse_shape(text: str) -> tuple[int, int, int]:
    """'SIZExROUNDS/STRIDE' (the stride optional) as (size, rounds, stride)."""
    shape, _, stride = text.partition("/")
    size, _, rounds = shape.partition("x")
    return int(size), int(rounds), int(stride or 1)


def bench_shape(model: str, precision: str, shape: tuple[int, int, int], runs: int) -> dict:
    size, rounds, stride = shape
    rounds_s, commit_s, verify_s = [], [], []
    for _ in range(runs):
        challenge = Challenge(
            seed=secrets.randbits(63), size=size, rounds=rounds, stride=stride, precision=precision
        )
        torch.cuda.synchronize()
        started = time.perf_counter()
        checkpoints = checkpoints_of(challenge, "cuda")
        computed = time.perf_counter()
        prover = Prover(challenge, checkpoints)
        committed = time.perf_counter()
        rounds_s.append(computed - started)
        commit_s.append(committed - computed)
        cells = sample(challenge)
        openings = prover.open(cells)
        started = time.perf_counter()
        check(challenge, prover.root, cells, openings)
        verify_s.append(time.perf_counter() - started)
    flops = Challenge(seed=0, size=size, rounds=rounds, stride=stride).flops
    rounds_med, commit_med, verify_med = (statistics.median(v) for v in (rounds_s, commit_s, verify_s))
    node_med = rounds_med + commit_med
    try:
        reference = reference_gflops(model, precision) * 1e9
    except ComputeError:
        reference = float("nan")
    return {
        "precision": precision,
        "size": size,
        "rounds": rounds,
        "stride": stride,
        "rounds_s": round(rounds_med, 5),
        "commit_s": round(commit_med, 5),
        "node_s": round(node_med, 5),
        "commit_share_of_node": round(commit_med / node_med, 4),
        "rounds_tflops": round(flops / rounds_med / 1e12, 2),
        "node_tflops": round(flops / node_med / 1e12, 2),
        "reference_tflops": round(reference / 1e12, 2),
        "rounds_ratio": round(flops / rounds_med / reference, 4),
        "node_ratio": round(flops / node_med / reference, 4),
        "verify_s": round(verify_med, 4),
        "verify_share_of_node": round(verify_med / node_med, 5),
        "oracle_minutes_for_100k": round(verify_med * PROVIDERS / (os.cpu_count() or 1) / 60, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shapes", default="2048x32/1,8192x16/1,8192x64/16",
                        help="comma-separated SIZExROUNDS/STRIDE; the first is the production shape")
    args = parser.parse_args()
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        result = {
            "ran": False,
            "reason": f"no CUDA device: torch {torch.__version__}"
            f"{' was built without CUDA' if torch.version.cuda is None else ''}",
        }
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"bench/gpu.py measured nothing: {result['reason']}.")
        return 0
    torch.set_num_threads(1)  # the oracle's check on one thread, as bench/proof.py measures it
    identity = gpu_identity() or {"name": torch.cuda.get_device_name(0)}
    model = normalize_model(identity["name"])
    for precision in precisions(model):  # warm-up: cuBLAS handles and kernels of every precision
        checkpoints_of(Challenge(seed=1, size=256, rounds=1, precision=precision), "cuda")
    result = {
        "ran": True,
        "gpu": identity,
        "model": model,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "shapes": [bench_shape(model, p, shape, args.runs) for shape in shapes for p in precisions(model)],
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
