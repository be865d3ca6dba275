"""The benchmark challenge as a proof of work the oracle checks without redoing it.

The node computes the challenge's rounds (`compute.challenge`): Y_r = A·X_{r-1} mod P and
X_r = Y_r³ mod P, from A and X₀ that the seed gives. It commits to every round at once —
a sha256 Merkle root over the rounds' Y_r — and the oracle's clock stops when the root
arrives. Only then does the oracle name the rounds it will check (`sample_rounds`); the
node opens each (`Prover.open`): Y_{r-1} and Y_r with their Merkle paths. For each the
oracle checks that both are the committed ones and, by Freivalds' algorithm, that
Y_r = A·X_{r-1} mod P, with X_{r-1} = Y_{r-1}³ mod P (X₀ from the seed): it multiplies by
`vectors` random columns instead of multiplying the matrices, O(n²) instead of O(n³).

Soundness. A committed round that was not computed is wrong (a matrix the node did not
multiply matches A·X_{r-1} mod P with probability P^-(n²)), and for a wrong round each
random column over Z_P exposes the difference with probability at least 1 − 1/P. So a node
that left `skipped` of the `rounds` uncomputed passes with probability at most
`pass_probability(rounds, samples, skipped, vectors)`: the chance that the sample misses
them, plus the chance that every sampled wrong round escapes all its columns. With the
defaults (4 samples, 2 columns each) a node that skipped the work passes with probability
P^-8 < 2^-32, and one that skipped half of it with probability under 1/16 per challenge.

Exactness: every entry is below P = 17 and every product sums at most size·16·16 < 2^24
(size ≤ compute.challenge.MAX_SIZE), so float32 matmuls — the node's and the verifier's
alike, on any BLAS or GPU — are exact.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass

import numpy as np

from compute.challenge import CUBES, P, Challenge

SAMPLES = 4  # rounds the oracle opens per challenge
VECTORS = 2  # Freivalds columns per opened round
LEAF_TAG = b"swarm/challenge-round/v1"


class ProofError(Exception):
    """An answer that does not prove the challenge: a wrong root, opening or product."""


# ── the node ──────────────────────────────────────────────────────────────────────


def products(challenge: Challenge, device: str = "cpu") -> list[np.ndarray]:
    """Y_1 … Y_R, each size × size uint8, computed on `device` ("cpu" or "cuda")."""
    import torch

    a_np, x_np = challenge.matrices()
    a, x = torch.from_numpy(a_np).to(device), torch.from_numpy(x_np).to(device)
    out = []
    for _ in range(challenge.rounds):
        y = torch.fmod(a @ x, P)  # exact: see the module's docstring
        out.append(y.to(torch.uint8))
        x = torch.fmod(y * y * y, P)
    return [y.cpu().numpy() for y in out]


def leaf(challenge: Challenge, round_: int, product: bytes) -> bytes:
    """A round's Merkle leaf: its number, the challenge's seed and size, and Y_r's bytes."""
    head = LEAF_TAG + challenge.seed.to_bytes(8, "big") + challenge.size.to_bytes(4, "big") + round_.to_bytes(4, "big")
    return hashlib.sha256(head + product).digest()


def _parent(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """The tree bottom up; an odd level's last node is carried up unpaired."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        level = levels[-1]
        levels.append([_parent(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                       for i in range(0, len(level), 2)])
    return levels


def merkle_root(leaves: list[bytes]) -> bytes:
    return _levels(leaves)[-1][0]


def merkle_path(leaves: list[bytes], index: int) -> list[bytes]:
    """The siblings from leaf `index` up (an unpaired node has none at that level)."""
    path = []
    for level in _levels(leaves)[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index //= 2
    return path


def merkle_verify(root: bytes, leaf_: bytes, index: int, count: int, path: list[bytes]) -> bool:
    """True if `leaf_` is leaf `index` of the `count` leaves under `root`."""
    if not 0 <= index < count:
        return False
    node, width, steps = leaf_, count, iter(path)
    while width > 1:
        if index ^ 1 < width:  # a sibling exists at this level
            sibling = next(steps, None)
            if sibling is None:
                return False
            node = _parent(sibling, node) if index & 1 else _parent(node, sibling)
        index, width = index // 2, (width + 1) // 2
    return next(steps, None) is None and node == root


@dataclass(frozen=True)
class Opening:
    """Round `round` (1-based) opened: Y_{r-1} (none for round 1: X₀ comes from the seed) and Y_r."""

    round: int
    previous: bytes | None
    previous_path: tuple[bytes, ...]
    product: bytes
    path: tuple[bytes, ...]


class Prover:
    """A node's side: the rounds computed, committed, and opened on request."""

    def __init__(self, challenge: Challenge, rounds: list[np.ndarray] | None = None) -> None:
        self.challenge = challenge
        self.rounds = [r.astype(np.uint8).tobytes() for r in (rounds if rounds is not None else products(challenge))]
        self.leaves = [leaf(challenge, i, y) for i, y in enumerate(self.rounds, start=1)]

    @property
    def root(self) -> bytes:
        return merkle_root(self.leaves)

    def open(self, rounds: list[int]) -> list[Opening]:
        opened = []
        for r in rounds:
            previous = self.rounds[r - 2] if r > 1 else None
            opened.append(Opening(r, previous, tuple(merkle_path(self.leaves, r - 2)) if r > 1 else (),
                                  self.rounds[r - 1], tuple(merkle_path(self.leaves, r - 1))))
        return opened


# ── the oracle ────────────────────────────────────────────────────────────────────


def sample_rounds(challenge: Challenge, samples: int = SAMPLES) -> list[int]:
    """The rounds to open, drawn by the oracle after the root arrived (the node cannot know them)."""
    chosen = set()
    while len(chosen) < min(samples, challenge.rounds):
        chosen.add(1 + secrets.randbelow(challenge.rounds))
    return sorted(chosen)


def check(challenge: Challenge, root: bytes, requested: list[int], openings: list[Opening],
          vectors: int = VECTORS, columns_seed: int | None = None) -> None:
    """Raises ProofError naming the first round whose opening does not prove its product.
    The Freivalds columns are the verifier's secret draw (`columns_seed` fixes them for a test)."""
    n = challenge.size
    if [o.round for o in openings] != list(requested):
        raise ProofError(f"the node opened rounds {[o.round for o in openings]}, not the {list(requested)} asked for")
    a, x0 = challenge.matrices()
    rng = np.random.default_rng(secrets.randbits(64) if columns_seed is None else columns_seed)
    for o in openings:
        y = _matrix(o.product, n, o.round)
        if not merkle_verify(root, leaf(challenge, o.round, o.product), o.round - 1, challenge.rounds, list(o.path)):
            raise ProofError(f"round {o.round}'s product is not the one committed to")
        if o.round == 1:
            x = x0
        else:
            if o.previous is None:
                raise ProofError(f"round {o.round} came without round {o.round - 1}'s product")
            previous = _matrix(o.previous, n, o.round - 1)
            if not merkle_verify(root, leaf(challenge, o.round - 1, o.previous), o.round - 2, challenge.rounds,
                                 list(o.previous_path)):
                raise ProofError(f"round {o.round - 1}'s product is not the one committed to")
            x = CUBES[previous].astype(np.float32)
        columns = rng.integers(0, P, size=(n, vectors)).astype(np.float32)
        expected = np.fmod(a @ np.fmod(x @ columns, P), P)
        if not np.array_equal(np.fmod(y.astype(np.float32) @ columns, P), expected):
            raise ProofError(f"round {o.round}'s product is not A·X mod {P}: the node did not compute it")


def _matrix(data: bytes, n: int, round_: int) -> np.ndarray:
    """Y_r (uint8) from its bytes: n² residues below P, or ProofError."""
    if not isinstance(data, bytes) or len(data) != n * n:
        raise ProofError(f"round {round_}'s product is not {n}×{n} bytes")
    y = np.frombuffer(data, dtype=np.uint8)
    if int(y.max(initial=0)) >= P:
        raise ProofError(f"round {round_}'s product holds a value of {P} or more")
    return y.reshape(n, n)


def pass_probability(rounds: int, samples: int, skipped: int, vectors: int = VECTORS) -> float:
    """An upper bound on the chance that a node which left `skipped` of `rounds` uncomputed
    passes: over how many wrong rounds the sample holds (hypergeometric), the chance that each
    escapes all of its `vectors` columns (at most P^-vectors each)."""
    samples = min(samples, rounds)
    total = math.comb(rounds, samples)
    return sum(math.comb(skipped, j) * math.comb(rounds - skipped, samples - j) / total * float(P) ** (-vectors * j)
               for j in range(min(samples, skipped) + 1))
