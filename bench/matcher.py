"""Matcher throughput: 100,000 open jobs on 10,000 providers (goal ≥ 50,000 assignments/s, ≤ 1 GB).

Run: .venv/bin/python bench/matcher.py [--runs 5] [--jobs 100000] [--providers 10000]

The market is synthetic, from a fixed seed: the reference table's GPU models in a realistic
mix (plus CPU-only nodes), 1–16 GPUs a provider, prices per model spread log-normally,
measured performance around the reference, a few providers unstaked or jailed. Jobs are
mostly one GPU, some gangs of up to 4 workers × 4 GPUs, a third with no model preference,
three priorities, some replicated, and some that cannot match (price caps under every
offer, VRAM no GPU has, a model nobody offers).

Measured: `match(jobs, providers)` end to end (index build, matching, explanations for the
unmatched), median of --runs runs; assignments/s = assignments ÷ that time. Peak memory is
the maximum resident set of a fresh subprocess that builds the market and matches it once.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from market.matcher import JobRequest, ProviderOffer, match

RESULTS = REPO / "bench" / "results" / "matcher.json"
SEED = 20261122
GOAL_ASSIGNMENTS_PER_S = 50_000
GOAL_PEAK_MB = 1024

# model: (share of providers, VRAM per GPU in GB, typical price per unit in wei)
GPU_MIX = {
    "H100": (0.12, 80, 40e12),
    "A100": (0.18, 80, 18e12),
    "L40S": (0.08, 48, 14e12),
    "L4": (0.12, 24, 6e12),
    "RTX4090": (0.15, 24, 5e12),
    "A10": (0.10, 24, 5e12),
    "T4": (0.10, 16, 2e12),
    "V100": (0.05, 32, 4e12),
    "cpu": (0.10, 0, 0.5e12),
}


def make_providers(n: int, rng: random.Random) -> list[ProviderOffer]:
    models = list(GPU_MIX)
    weights = [GPU_MIX[m][0] for m in models]
    providers = []
    for _ in range(n):
        model = rng.choices(models, weights)[0]
        _, vram, price = GPU_MIX[model]
        gpus = 0 if model == "cpu" else rng.choice((2, 4, 8, 8, 16, 32, 64))
        providers.append(
            ProviderOffer(
                address=f"0x{rng.getrandbits(160):040x}",
                gpu_model=model,
                gpus=gpus,
                vram_gb=vram,
                cpus=max(8, gpus * rng.choice((8, 12, 16))),
                memory_gb=max(32, gpus * rng.choice((64, 96, 128))),
                price_per_unit=int(price * rng.lognormvariate(0, 0.25)),
                stake_ok=rng.random() > 0.03,
                jailed=rng.random() < 0.02,
                score=rng.betavariate(8, 2),
                measured_perf=min(1.3, max(0.3, rng.gauss(1.0, 0.12))),
                reliability=rng.betavariate(9, 1),
            )
        )
    return providers


def make_jobs(n: int, rng: random.Random) -> list[JobRequest]:
    gpu_models = [m for m in GPU_MIX if m != "cpu"]
    shapes = [  # (workers, gpus per worker, share)
        ((1, 1), 0.55), ((1, 2), 0.15), ((2, 1), 0.08), ((1, 4), 0.06),
        ((2, 2), 0.05), ((4, 4), 0.01), ((1, 0), 0.10),
    ]
    jobs = []
    for i in range(n):
        (workers, gpw) = rng.choices([s for s, _ in shapes], [w for _, w in shapes])[0]
        if gpw == 0:
            model = rng.choice((None, "cpu"))
        else:
            model = rng.choice(gpu_models) if rng.random() < 0.7 else None
        typical = GPU_MIX[model or "A100"][2]
        cap = int(typical * rng.uniform(0.9, 2.5))
        vram = (GPU_MIX[model][1] if model else 24) * gpw * rng.choice((0.25, 0.5, 1.0))
        roll = rng.random()
        if roll < 0.02:
            cap = int(typical * 0.3)  # under every offer of its model
        elif roll < 0.03:
            vram = 200.0 * max(gpw, 1)  # more VRAM per GPU than any GPU has
        elif roll < 0.035:
            model = "B200"  # nobody offers it
        jobs.append(
            JobRequest(
                job_id=i,
                workers=workers,
                gpus_per_worker=gpw,
                gpu_model=model,
                vram_gb_per_worker=vram,
                cpus_per_worker=max(1, gpw) * rng.choice((2, 4, 8)),
                memory_gb=max(1, gpw) * rng.choice((16, 32, 64)),
                max_price_per_unit=cap,
                min_score=rng.choice((0.0, 0.0, 0.5, 0.7)),
                priority=rng.choices((0, 1, 2), (0.7, 0.2, 0.1))[0],
                replicas=2 if rng.random() < 0.05 else 1,
            )
        )
    return jobs


def market(n_jobs: int, n_providers: int) -> tuple[list[JobRequest], list[ProviderOffer]]:
    rng = random.Random(SEED)
    providers = make_providers(n_providers, rng)
    return make_jobs(n_jobs, rng), providers


def peak_rss_mb(n_jobs: int, n_providers: int) -> float:
    """Maximum resident set of a fresh process that builds the market and matches it once."""
    code = (
        f"import resource, sys; sys.path.insert(0, {str(REPO)!r}); from bench.matcher import market; "
        f"from market.matcher import match; match(*market({n_jobs}, {n_providers})); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return int(out.stdout.strip()) / 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--providers", type=int, default=10_000)
    args = parser.parse_args()

    jobs, providers = market(args.jobs, args.providers)
    seconds, result = [], None
    for _ in range(args.runs):
        started = time.perf_counter()
        result = match(jobs, providers)
        seconds.append(time.perf_counter() - started)
    assert result is not None
    median_s = statistics.median(seconds)
    assigned_jobs = len({a.job_id for a in result.assignments})
    causes: dict[str, int] = {}
    for explanation in result.unmatched.values():
        cause = explanation.constraint if "replicas" not in explanation.text else "replicas"
        causes[str(cause)] = causes.get(str(cause), 0) + 1
    figures = {
        "jobs": args.jobs,
        "providers": args.providers,
        "runs": args.runs,
        "seed": SEED,
        "assignments": len(result.assignments),
        "jobs_matched": assigned_jobs,
        "jobs_unmatched": len(result.unmatched),
        "unmatched_by_top_constraint": dict(sorted(causes.items())),
        "median_seconds": round(median_s, 3),
        "all_seconds": [round(s, 3) for s in seconds],
        "assignments_per_s": round(len(result.assignments) / median_s),
        "jobs_per_s": round(args.jobs / median_s),
        "peak_rss_mb": round(peak_rss_mb(args.jobs, args.providers), 1),
        "goal_assignments_per_s": GOAL_ASSIGNMENTS_PER_S,
        "goal_peak_mb": GOAL_PEAK_MB,
        "python": sys.version.split()[0],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
