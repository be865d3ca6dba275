"""Oracle epoch: score 100,000 providers from 10,000,000 probe samples (goal ≤ 5 s, ≤ 2 GB).

Run: .venv/bin/python bench/oracle_epoch.py [--runs 5] [--providers 100000] [--samples 10000000]

The epoch is synthetic, from a fixed seed: the reference table's GPU models in a realistic
mix (plus CPU-only nodes), stakes spread log-normally around 10,000 SWARM; 2 % of the
providers jailed; of the rest most are up (99.5 % of probes answered), 10 % flaky (60–95 %)
and 3 % down (0–40 %). Probe samples name a random provider each (≈ 100 a provider). 90 %
of the providers ran a challenge, measuring around their model's reference; 0.5 % are
misdeclared (5–30 % of the reference), 0.05 % returned a bad checksum, 0.05 % failed a
replication check, 0.5 % abandoned 1–3 jobs. Job histories are Poisson (≈ 200 successes,
≈ 3 failures); loyalty runs from 0 to 500 epochs.

Measured: `score_epoch` end to end (uptime from the raw samples, performance, reliability,
loyalty, the slashing matrix, eligibility, weights, the exact reward split), median of
--runs runs. Peak memory is the maximum resident set of a fresh process that builds the
epoch and scores it once (Python, numpy and scipy included).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from compute.reference import reference_gflops
from oracle.config import load_config
from oracle.scoring import EpochInputs, score_epoch

RESULTS = REPO / "bench" / "results" / "oracle_epoch.json"
SEED = 20261205
GOAL_SECONDS = 5.0
GOAL_PEAK_MB = 2048

MODEL_MIX = {"H100": 0.12, "A100": 0.18, "L40S": 0.08, "L4": 0.12, "RTX4090": 0.15,
             "A10": 0.10, "T4": 0.10, "V100": 0.05, "cpu": 0.10}


def make_epoch(n: int, samples: int, seed: int = SEED) -> EpochInputs:
    rng = np.random.default_rng(seed)
    models = np.array(list(MODEL_MIX))
    declared = models[rng.choice(len(models), size=n, p=list(MODEL_MIX.values()))]
    known = {m: reference_gflops(m) for m in MODEL_MIX}  # the CPU's: this machine's measured core
    reference = np.array([known[m] for m in declared])
    stake_tokens = np.maximum(1.0, rng.lognormal(np.log(10_000), 1.0, size=n))
    fractions = rng.integers(0, 10**18, n).tolist()
    stake_wei = [int(t) * 10**18 + f for t, f in zip(stake_tokens.tolist(), fractions, strict=True)]

    roll = rng.random(n)
    p_ok = np.full(n, 0.995)
    flaky, down = roll < 0.10, (roll >= 0.10) & (roll < 0.13)
    p_ok[flaky] = rng.uniform(0.60, 0.95, flaky.sum())
    p_ok[down] = rng.uniform(0.0, 0.40, down.sum())
    probe_provider = rng.integers(0, n, size=samples, dtype=np.int32)
    probe_ok = rng.random(samples, dtype=np.float32) < p_ok[probe_provider]

    measured = reference * np.clip(rng.normal(1.0, 0.12, n), 0.55, 1.6)
    misdeclared = rng.random(n) < 0.005
    measured[misdeclared] = reference[misdeclared] * rng.uniform(0.05, 0.30, misdeclared.sum())
    measured[rng.random(n) < 0.10] = np.nan  # not challenged this epoch
    abandoned = np.where(rng.random(n) < 0.005, rng.integers(1, 4, n), 0)
    return EpochInputs(
        providers=[f"0x{a:040x}" for a in rng.integers(0, 2**63, n).tolist()],
        stake_wei=stake_wei,
        declared_model=declared.tolist(),
        probe_provider=probe_provider,
        probe_ok=probe_ok,
        measured_gflops=measured,
        challenge_ok=rng.random(n) >= 0.0005,
        job_successes=rng.poisson(200, n),
        job_failures=rng.poisson(3, n),
        abandoned=abandoned,
        replication_mismatch=rng.random(n) < 0.0005,
        epochs_staked=rng.integers(0, 500, n),
        jailed=rng.random(n) < 0.02,
        utilization=0.63,
        previous_performance=np.where(rng.random(n) < 0.8, rng.normal(1.0, 0.1, n), np.nan),
    )


def peak_rss_mb(n: int, samples: int) -> float:
    """Maximum resident set of a fresh process that builds the epoch and scores it once."""
    code = (
        f"import resource, sys; sys.path.insert(0, {str(REPO)!r}); "
        "from bench.oracle_epoch import make_epoch; "
        "from oracle.config import load_config; from oracle.scoring import score_epoch; "
        f"score_epoch(make_epoch({n}, {samples}), load_config()); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return int(out.stdout.strip()) / 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--providers", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=10_000_000)
    args = parser.parse_args()

    config = load_config()
    inputs = make_epoch(args.providers, args.samples)
    seconds, scores = [], None
    for _ in range(args.runs):
        started = time.perf_counter()
        scores = score_epoch(inputs, config)
        seconds.append(time.perf_counter() - started)
    assert scores is not None and sum(scores.reward_wei) == scores.emission_wei
    median_s = statistics.median(seconds)
    figures = {
        "providers": args.providers,
        "probe_samples": args.samples,
        "runs": args.runs,
        "seed": SEED,
        "eligible": int(scores.eligible.sum()),
        "emission_wei": str(scores.emission_wei),
        "rewards_sum_exact": sum(scores.reward_wei) == scores.emission_wei,
        "slashes_by_row": dict(sorted(Counter(s.row for s in scores.slashes).items())),
        "median_seconds": round(median_s, 3),
        "all_seconds": [round(s, 3) for s in seconds],
        "providers_per_s": round(args.providers / median_s),
        "peak_rss_mb": round(peak_rss_mb(args.providers, args.samples), 1),
        "this_process_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "goal_seconds": GOAL_SECONDS,
        "goal_peak_mb": GOAL_PEAK_MB,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
