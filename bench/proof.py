"""The challenge as a proof (compute/proof.py): what checking it costs the oracle against
the node's work (issue target: ratio ≤ 0.01), and the soundness the sample gives.

Run: .venv/bin/python bench/proof.py [--runs 5]

For each size, over --runs fresh seeds, median:
  - node: computing every round on one CPU core (torch limited to one thread, as a Ray task
    with num_cpus=1 is) and committing to them (the Merkle root);
  - verify: `check` of SAMPLES opened rounds, ROWS rows recomputed in each, on this machine,
    one thread, the matrices made from the seed included — what one challenge costs the oracle;
  - the projected oracle time for 100,000 providers' challenges on this machine's cores.
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

import torch  # noqa: E402

from compute.challenge import Challenge  # noqa: E402
from compute.proof import ROWS, SAMPLES, Prover, check, pass_probability, rounds_of, sample_rounds  # noqa: E402

RESULTS = REPO / "bench" / "results" / "proof.json"
SIZES = ((1024, 32), (2048, 32))  # the old devnet size, the production size (oracle/config.toml)
PROVIDERS = 100_000


def bench_size(size: int, rounds: int, runs: int) -> dict:
    node_s, verify_s = [], []
    for _ in range(runs):
        challenge = Challenge(seed=secrets.randbits(63), size=size, rounds=rounds)
        started = time.perf_counter()
        prover = Prover(challenge, rounds_of(challenge))
        root = prover.root
        node_s.append(time.perf_counter() - started)
        requested = sample_rounds(challenge)
        openings = prover.open(requested)
        started = time.perf_counter()
        check(challenge, root, requested, openings)
        verify_s.append(time.perf_counter() - started)
    node, verify = statistics.median(node_s), statistics.median(verify_s)
    return {"size": size, "rounds": rounds, "node_s": round(node, 3), "verify_s": round(verify, 4),
            "ratio": round(verify / node, 4), "verify_all": [round(v, 4) for v in verify_s],
            "oracle_minutes_for_100k": round(verify * PROVIDERS / (os.cpu_count() or 1) / 60, 1),
            "opened_bytes": 2 * SAMPLES * size * size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = {
        "runs": args.runs, "cpus": os.cpu_count(), "samples": SAMPLES, "rows": ROWS,
        "sizes": [bench_size(size, rounds, args.runs) for size, rounds in SIZES],
        "pass_probability": {"skipped_all_32": pass_probability(32, SAMPLES, 32, size=2048),
                             "skipped_half_the_rounds_32": pass_probability(32, SAMPLES, 16, size=2048),
                             "skipped_a_quarter_of_the_rounds_32": pass_probability(32, SAMPLES, 8, size=2048),
                             "skipped_half_of_every_rounds_rows_32": pass_probability(32, SAMPLES, 32, skipped_rows=0.5,
                                                                                      size=2048)},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
