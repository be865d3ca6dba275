"""Reward tree: build a 100,000-leaf tree and every provider's proof (goal ≤ 2 s).

Run: .venv/bin/python bench/merkle.py [--runs 5] [--leaves 100000]

The leaves are synthetic, from a fixed seed: random provider addresses (checksummed, as the
ledger stores them) and cumulative earnings up to ≈ 10^24 wei. Measured, median of --runs:
`RewardTree.build` (checksums, leaf hashes, sort, the internal nodes) plus `tree.proofs()`
(every proof), and apart from it the same proofs one provider at a time with `tree.proof`.
Every proof is checked against the root once, outside the timing.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eth_utils import to_checksum_address

from ledger.merkle import RewardTree, verify

RESULTS = REPO / "bench" / "results" / "merkle.json"
SEED = 20261206
GOAL_SECONDS = 2.0


def make_leaves(n: int, seed: int = SEED) -> dict[str, int]:
    rng = random.Random(seed)
    return {to_checksum_address(f"0x{rng.getrandbits(160):040x}"): rng.getrandbits(80) for _ in range(n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--leaves", type=int, default=100_000)
    args = parser.parse_args()

    leaves = make_leaves(args.leaves)
    build_s, proofs_s, one_by_one_s = [], [], []
    tree, proofs = None, {}
    for _ in range(args.runs):
        started = time.perf_counter()
        tree = RewardTree.build(leaves)
        built = time.perf_counter()
        proofs = tree.proofs()
        done = time.perf_counter()
        build_s.append(built - started)
        proofs_s.append(done - built)
        started = time.perf_counter()
        for provider in leaves:
            tree.proof(provider)
        one_by_one_s.append(time.perf_counter() - started)
    assert tree is not None and len(proofs) == args.leaves
    assert all(verify(tree.root, p, c, proofs[p]) for p, c in leaves.items())
    total = [b + p for b, p in zip(build_s, proofs_s, strict=True)]
    figures = {
        "leaves": args.leaves,
        "runs": args.runs,
        "seed": SEED,
        "root": "0x" + tree.root.hex(),
        "proof_length": max(len(p) for p in proofs.values()),
        "median_build_s": round(statistics.median(build_s), 3),
        "median_all_proofs_s": round(statistics.median(proofs_s), 3),
        "median_build_and_all_proofs_s": round(statistics.median(total), 3),
        "all_build_and_all_proofs_s": [round(s, 3) for s in total],
        "median_proof_one_by_one_s": round(statistics.median(one_by_one_s), 3),
        "every_proof_verified": True,
        "goal_seconds": GOAL_SECONDS,
        "python": sys.version.split()[0],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
