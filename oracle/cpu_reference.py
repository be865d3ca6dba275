"""The CPU reference, measured on the machine that runs the oracle: `make cpu-reference`, or
`python -m oracle.cpu_reference [--config F]`.

A CPU node answers the challenge on one core: its worker makes B and X₀ from the seed,
computes the rounds with numpy's BLAS and commits to the checkpoints. This runs that same
worker (compute.challenge_node.ChallengeWorker) on one core of this machine — BLAS held to one
thread, as Ray holds a worker given one CPU — at the oracle's challenge size, and writes the
median of RUNS runs to compute.reference.CPU_MEASUREMENT, against which the oracle judges CPU
nodes (× CPU_MARGIN). A run has ROUNDS rounds, not the configured 32: a round costs the same
whatever their number, and four keep the whole measurement to a few seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from threadpoolctl import threadpool_limits

from compute.challenge import Challenge
from compute.challenge_node import ChallengeWorker, device_name
from compute.reference import CPU_MARGIN, CPU_MEASUREMENT
from oracle.config import load_config

RUNS = 3
ROUNDS = 4


@dataclass(frozen=True)
class CpuMeasurement:
    """One core's challenge throughput: the median of the runs, and each run."""

    gflops: float
    runs: tuple[float, ...]
    size: int
    rounds: int
    cpu: str
    measured_at: str  # UTC, ISO 8601

    def as_json(self) -> str:
        return json.dumps(asdict(self) | {"runs": list(self.runs), "threads": 1}, indent=1) + "\n"


def measure(size: int, rounds: int = ROUNDS, runs: int = RUNS) -> CpuMeasurement:
    """`runs` challenges of `size` × `size` and `rounds` rounds, each timed from the seed to the
    root as the oracle times a node, on one BLAS thread."""

    figures = []
    with threadpool_limits(limits=1):
        worker = ChallengeWorker("cpu")  # readied, as a node is before the oracle's clock starts
        for seed in range(1, runs + 1):
            challenge = Challenge(seed=seed, size=size, rounds=rounds)
            started = time.perf_counter()
            worker.commit(challenge.params() | {"seed": seed})
            figures.append(challenge.flops / (time.perf_counter() - started) / 1e9)
    return CpuMeasurement(round(statistics.median(figures), 2), tuple(round(f, 2) for f in figures), size,
                          rounds, device_name("cpu"), datetime.now(UTC).isoformat(timespec="seconds"))


def write(measurement: CpuMeasurement, path: Path = CPU_MEASUREMENT) -> None:
    """Writes the measurement whole (a reader never finds half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(measurement.as_json())
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="an oracle config TOML (default: the packaged one)")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--out", type=Path, default=CPU_MEASUREMENT)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    measurement = measure(load_config(args.config).epoch.challenge_size, runs=args.runs)
    write(measurement, args.out)
    print(f"One core of {measurement.cpu}: {measurement.gflops:,.1f} GFLOPS on the {measurement.size} × "
          f"{measurement.rounds} challenge (median of {', '.join(f'{g:,.1f}' for g in measurement.runs)}); "
          f"CPU reference {measurement.gflops * CPU_MARGIN:,.1f} GFLOPS (× {CPU_MARGIN:g}), in {args.out}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
