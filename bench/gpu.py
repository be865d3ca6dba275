"""The benchmark challenge on a GPU: measured TFLOPS per precision against the reference for
the GPU's model (compute/reference.py), where the node's time goes, and what checking it
costs the oracle.

Run: .venv/bin/python bench/gpu.py [--runs 3] [--shapes oracle,2048x32/1,8192x16/1]   (make bench-gpu)

For each shape (size × rounds / stride) and each precision the model is challenged in (fp32
and its tensor-core precision), over --runs fresh seeds, median:
  - rounds: the challenge's rounds alone on the GPU, the checkpoints kept there
    (`device_checkpoints`), to the last round done;
  - commit: the Merkle root over every committed row, hashed on the GPU (`DeviceProver`:
    compute/sha256.py's Triton kernel), to the root on the host; its share of the node's time;
  - node: both — what the oracle's clock sees, less the network — as TFLOPS, and rounds ÷
    reference and node ÷ reference (what the oracle would judge);
  - host commit: for comparison, the commitment as it was before, the checkpoints copied to the
    host and every row hashed there with hashlib (`Prover`);
  - verify: `check` of the sampled cells on this machine's CPU, its share of the node's time,
    and what 100,000 such checks would cost an oracle with this machine's cores.
Before the runs, the seconds Triton takes to compile the kernels on their first use (a
worker does this while it is readied, before the oracle's clock starts).
The first shape, `oracle`, is the production one: what the oracle gives this GPU's model in
each precision (oracle/config.toml's gpu_challenge_size and gpu_challenge_s, through
compute.challenge.timed_shape); the others show the CPU's 2048 × 32, which a GPU answers too fast
for the oracle's clock, and how the commitment's share changes with the size and the stride.
On a machine without a CUDA device it measures nothing and says so, in bench/results/gpu.json
unless that holds a run on a GPU, which it keeps.
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

from compute.challenge import Challenge, timed_shape
from compute.challenge_node import DeviceProver, device_checkpoints, gpu_identity
from compute.errors import ComputeError
from compute.proof import Prover, check, sample
from compute.reference import normalize_model, precisions, reference_gflops

RESULTS = REPO / "bench" / "results" / "gpu.json"
PROVIDERS = 100_000


def parse_shape(text: str, model: str = "", precision: str = "fp32") -> tuple[int, int, int]:
    """'SIZExROUNDS/STRIDE' (the stride optional) as (size, rounds, stride); 'oracle': the shape
    the oracle gives `model` in `precision`."""
    if text == "oracle":
        from oracle.config import load_config

        epoch = load_config().epoch
        reference = reference_gflops(model, precision)
        return timed_shape(reference, epoch.gpu_challenge_size, epoch.gpu_challenge_s)
    shape, _, stride = text.partition("/")
    size, _, rounds = shape.partition("x")
    return int(size), int(rounds), int(stride or 1)


def bench_shape(model: str, precision: str, shape: tuple[int, int, int], runs: int) -> dict:
    size, rounds, stride = shape
    rounds_s, commit_s, host_commit_s, verify_s = [], [], [], []
    for _ in range(runs):
        challenge = Challenge(
            seed=secrets.randbits(63), size=size, rounds=rounds, stride=stride, precision=precision
        )
        torch.cuda.synchronize()
        started = time.perf_counter()
        checkpoints = device_checkpoints(challenge)
        torch.cuda.synchronize()
        computed = time.perf_counter()
        prover = DeviceProver(challenge, checkpoints)  # ends with the root copied to the host
        committed = time.perf_counter()
        rounds_s.append(computed - started)
        commit_s.append(committed - computed)
        started = time.perf_counter()
        on_host = Prover(challenge, list(checkpoints.cpu().numpy()))
        host_commit_s.append(time.perf_counter() - started)
        assert on_host.root == prover.root, "the device's root is not the host's"
        cells = sample(challenge)
        openings = prover.open(cells)
        started = time.perf_counter()
        check(challenge, prover.root, cells, openings)
        verify_s.append(time.perf_counter() - started)
        del prover, on_host, checkpoints
    shaped = Challenge(seed=0, size=size, rounds=rounds, stride=stride)
    flops = shaped.flops
    rounds_med, commit_med, host_commit_med, verify_med = (
        statistics.median(v) for v in (rounds_s, commit_s, host_commit_s, verify_s)
    )
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
        "committed_mib": round(size * size * shaped.checkpoints / (1 << 20), 1),
        "rounds_s": round(rounds_med, 6),
        "commit_s": round(commit_med, 6),
        "node_s": round(node_med, 6),
        "commit_share_of_node": round(commit_med / node_med, 4),
        "rounds_tflops": round(flops / rounds_med / 1e12, 2),
        "node_tflops": round(flops / node_med / 1e12, 2),
        "reference_tflops": round(reference / 1e12, 2),
        "rounds_ratio": round(flops / rounds_med / reference, 4),
        "node_ratio": round(flops / node_med / reference, 4),
        "host_commit_s": round(host_commit_med, 4),
        "host_node_ratio": round(flops / (rounds_med + host_commit_med) / reference, 4),
        "verify_s": round(verify_med, 4),
        "verify_share_of_node": round(verify_med / node_med, 5),
        "oracle_minutes_for_100k": round(verify_med * PROVIDERS / (os.cpu_count() or 1) / 60, 1),
        "rounds_all": [round(v, 6) for v in rounds_s],
        "commit_all": [round(v, 6) for v in commit_s],
    }


def compile_kernels() -> float:
    """Seconds to the first commitment on this machine's GPU: Triton compiling the kernels (or
    reading them from its cache, when an earlier run compiled them)."""
    started = time.perf_counter()
    tiny = Challenge(seed=1, size=8, rounds=1)
    DeviceProver(tiny, torch.zeros((1, 8, 8), dtype=torch.uint8, device="cuda"))
    return round(time.perf_counter() - started, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shapes", default="oracle,2048x32/1,8192x16/1",
                        help="comma-separated SIZExROUNDS/STRIDE, or `oracle` for the production shape")
    args = parser.parse_args()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        result = {
            "ran": False,
            "reason": f"no CUDA device: torch {torch.__version__}"
            f"{' was built without CUDA' if torch.version.cuda is None else ''}",
        }
        # A run recorded on a GPU stays: compute/reference.py's measured references are its figures.
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        if not recorded.get("ran"):
            RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        kept = f" {RESULTS.name} keeps the run on {recorded['gpu']['name']}." if recorded.get("ran") else ""
        print(f"bench/gpu.py measured nothing: {result['reason']}.{kept}")
        return 0
    torch.set_num_threads(1)  # the oracle's check on one thread, as bench/proof.py measures it
    identity = gpu_identity() or {"name": torch.cuda.get_device_name(0)}
    model = normalize_model(identity["name"])
    first_commit_s = compile_kernels()
    for precision in precisions(model):  # warm-up: cuBLAS handles and kernels of every precision
        warm = Challenge(seed=1, size=256, rounds=1, precision=precision)
        DeviceProver(warm, device_checkpoints(warm))
    result = {
        "ran": True,
        "gpu": identity,
        "model": model,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "first_commit_s": first_commit_s,
        "shapes": [bench_shape(model, p, parse_shape(shape, model, p), args.runs)
                   for shape in args.shapes.split(",") for p in precisions(model)],
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
