"""The benchmark challenge on a GPU: measured TFLOPS per precision against the reference for
the GPU's model (compute/reference.py), and what checking it costs the oracle.

Run: .venv/bin/python bench/gpu.py [--runs 5] [--size 8192] [--rounds 16]   (make bench-gpu)

For fp32 and the model's tensor-core precision, each over --runs fresh seeds, median:
  - rounds: the challenge's rounds alone on the GPU (the checkpoints copied back included);
  - node: rounds and commitment (the Merkle tree over every row, on the host's CPU) — what
    the oracle's clock sees, less the network;
  - the reference for the model NVML names, and measured ÷ reference for each;
  - verify: `check` of the sampled cells on this machine's CPU, and its share of the node's time.
On a machine without a CUDA device it measures nothing and says so (bench/results/gpu.json).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from compute.challenge import Challenge, checkpoints_of, gpu_identity  # noqa: E402
from compute.errors import ComputeError  # noqa: E402
from compute.proof import Prover, check, sample  # noqa: E402
from compute.reference import normalize_model, precisions, reference_gflops  # noqa: E402

RESULTS = REPO / "bench" / "results" / "gpu.json"


def bench_precision(model: str, precision: str, size: int, rounds: int, runs: int) -> dict:
    rounds_s, node_s, verify_s = [], [], []
    for _ in range(runs):
        challenge = Challenge(seed=secrets.randbits(63), size=size, rounds=rounds, precision=precision)
        torch.cuda.synchronize()
        started = time.perf_counter()
        checkpoints = checkpoints_of(challenge, "cuda")
        rounds_s.append(time.perf_counter() - started)
        prover = Prover(challenge, checkpoints)
        node_s.append(time.perf_counter() - started)
        cells = sample(challenge)
        openings = prover.open(cells)
        started = time.perf_counter()
        check(challenge, prover.root, cells, openings)
        verify_s.append(time.perf_counter() - started)
    flops = Challenge(seed=0, size=size, rounds=rounds).flops
    rounds_med, node_med, verify_med = (statistics.median(v) for v in (rounds_s, node_s, verify_s))
    try:
        reference = reference_gflops(model, precision)
    except ComputeError:
        reference = float("nan")
    return {"precision": precision, "rounds_s": round(rounds_med, 4), "node_s": round(node_med, 4),
            "rounds_tflops": round(flops / rounds_med / 1e12, 2), "node_tflops": round(flops / node_med / 1e12, 2),
            "reference_tflops": round(reference / 1e3, 2),
            "rounds_ratio": round(flops / rounds_med / 1e9 / reference, 3),
            "node_ratio": round(flops / node_med / 1e9 / reference, 3),
            "verify_s": round(verify_med, 4), "verify_share_of_node": round(verify_med / node_med, 5)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        result = {"ran": False, "reason": f"no CUDA device: torch {torch.__version__}"
                                          f"{' was built without CUDA' if torch.version.cuda is None else ''}"}
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"bench/gpu.py measured nothing: {result['reason']}.")
        return 0
    identity = gpu_identity() or {"name": torch.cuda.get_device_name(0)}
    model = normalize_model(identity["name"])
    checkpoints_of(Challenge(seed=1, size=256, rounds=1, precision="bf16"), "cuda")  # warm-up: cuBLAS handles
    result = {"ran": True, "gpu": identity, "model": model, "size": args.size, "rounds": args.rounds,
              "runs": args.runs,
              "precisions": [bench_precision(model, p, args.size, args.rounds, args.runs) for p in precisions(model)]}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
