"""The benchmark challenge as a proof of work the oracle checks without redoing it.

The node computes the challenge's rounds (`compute.challenge`): X_r = (A·X_{r-1} mod P)³ mod P
from A and X₀ that the seed gives. It commits to every round at once — a sha256 Merkle root
over the rounds' matrices X_r — and the oracle's clock stops when the root arrives. Only
then does the oracle name the rounds it will check (`sample_rounds`); the node opens each
(`Prover.open`): X_{r-1} and X_r with their Merkle paths (X₀ is the seed's). For each the
oracle checks that both are the committed ones, then recomputes `rows` random rows of X_r
from X_{r-1} — rows·n² multiply-adds where the node did n³ — and compares them.

Soundness. A round whose matrix the node did not compute from the previous one differs
from it in a row with probability 1 − P^-n, so for the node a row it did not compute is a
row it cannot get right. A node that computed none of the rounds passes only if every
sampled row happens to be right: with the defaults (4 rounds, 8 rows each) under P^-(n·32).
A node that skipped whole rounds passes if the sample misses them all, and one that skipped
a share of every round's rows if every sampled row is one it computed:
`pass_probability(rounds, samples, skipped)` bounds both (for a node that skipped half the
rounds of 32, 0.051 per challenge; half of every round's rows, 2^-32).

Exactness: every entry is below P = 17 and every row·column sums at most size·16·16 < 2^24
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
ROWS = 8  # rows of each opened round the oracle recomputes
LEAF_TAG = b"swarm/challenge-round/v1"


class ProofError(Exception):
    """An answer that does not prove the challenge: a wrong root, opening or row."""


# ── the node ──────────────────────────────────────────────────────────────────────


def rounds_of(challenge: Challenge, device: str = "cpu") -> list[np.ndarray]:
    """X_1 … X_R, each size × size uint8, computed on `device` ("cpu" or "cuda")."""
    import torch

    a_np, x_np = challenge.matrices()
    a, x = torch.from_numpy(a_np).to(device), torch.from_numpy(x_np).to(device)
    out = []
    for _ in range(challenge.rounds):
        y = torch.fmod(a @ x, P)  # exact: see the module's docstring
        x = torch.fmod(y * y * y, P)
        out.append(x.to(torch.uint8))
    return [m.cpu().numpy() for m in out]


def leaf(challenge: Challenge, round_: int, matrix: bytes) -> bytes:
    """A round's Merkle leaf: the challenge's seed and size, the round's number and X_r's bytes."""
    digest = hashlib.sha256(LEAF_TAG + challenge.seed.to_bytes(8, "big") + challenge.size.to_bytes(4, "big")
                            + round_.to_bytes(4, "big"))
    digest.update(matrix)  # no copy of the matrix
    return digest.digest()


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
    """Round `round` (1-based) opened: X_{r-1} (none for round 1: X₀ comes from the seed) and X_r."""

    round: int
    previous: bytes | None
    previous_path: tuple[bytes, ...]
    matrix: bytes
    path: tuple[bytes, ...]


class Prover:
    """A node's side: the rounds computed, committed, and opened on request."""

    def __init__(self, challenge: Challenge, rounds: list[np.ndarray] | None = None) -> None:
        self.challenge = challenge
        self.rounds = [r.astype(np.uint8).tobytes() for r in (rounds if rounds is not None else rounds_of(challenge))]
        self.leaves = [leaf(challenge, i, x) for i, x in enumerate(self.rounds, start=1)]

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
    chosen: set[int] = set()
    while len(chosen) < min(samples, challenge.rounds):
        chosen.add(1 + secrets.randbelow(challenge.rounds))
    return sorted(chosen)


def check(challenge: Challenge, root: bytes, requested: list[int], openings: list[Opening], rows: int = ROWS,
          rows_seed: int | None = None) -> None:
    """Raises ProofError naming the first round whose opening does not prove it. The rows
    recomputed are the verifier's secret draw (`rows_seed` fixes them for a test)."""
    n = challenge.size
    if [o.round for o in openings] != list(requested):
        raise ProofError(f"the node opened rounds {[o.round for o in openings]}, not the {list(requested)} asked for")
    rng = np.random.default_rng(secrets.randbits(64) if rows_seed is None else rows_seed)
    verified: dict[int, np.ndarray] = {}  # round → its matrix, once its leaf is checked

    def committed(round_: int, data: bytes | None, path: tuple[bytes, ...]) -> np.ndarray:
        if data is None:
            raise ProofError(f"round {round_ + 1} came without round {round_}'s matrix")
        matrix = _matrix(data, n, round_)
        known = verified.get(round_)
        if known is not None and np.array_equal(known, matrix):
            return known
        if not merkle_verify(root, leaf(challenge, round_, data), round_ - 1, challenge.rounds, list(path)):
            raise ProofError(f"round {round_}'s matrix is not the one committed to")
        verified[round_] = matrix
        return matrix

    for o in openings:
        x = committed(o.round, o.matrix, o.path)
        previous = challenge.first() if o.round == 1 else committed(o.round - 1, o.previous, o.previous_path)
        picked = rng.choice(n, size=min(rows, n), replace=False)
        products = challenge.rows_of_a(picked) @ previous.astype(np.float32)
        recomputed = CUBES[np.fmod(products, P).astype(np.uint8)]
        if not np.array_equal(recomputed, x[picked]):
            raise ProofError(f"round {o.round}'s matrix is not (A·X mod {P})³ mod {P} of the round before: the node "
                             "did not compute it")


def _matrix(data: bytes, n: int, round_: int) -> np.ndarray:
    """X_r (uint8, n × n) from its bytes: residues below P, or ProofError."""
    if not isinstance(data, bytes) or len(data) != n * n:
        raise ProofError(f"round {round_}'s matrix is not {n}×{n} bytes")
    x = np.frombuffer(data, dtype=np.uint8)
    if int(x.max(initial=0)) >= P:
        raise ProofError(f"round {round_}'s matrix holds a value of {P} or more")
    return x.reshape(n, n)


def pass_probability(rounds: int, samples: int, skipped: int, rows: int = ROWS, skipped_rows: float = 1.0,
                     size: int = 1024) -> float:
    """An upper bound on the chance that a node passes which, in `skipped` of the `rounds`,
    left a share `skipped_rows` of the rows uncomputed (1.0: the whole round): the sample of
    rounds holds some of those (hypergeometric), and in each every recomputed row must be one
    it computed or, at P^-size, one it guessed right."""
    samples = min(samples, rounds)
    total = math.comb(rounds, samples)
    # A sampled skipping round passes if every recomputed row was computed or guessed.
    escape = (1.0 - skipped_rows + skipped_rows * float(P) ** -size) ** rows
    return sum(math.comb(skipped, j) * math.comb(rounds - skipped, samples - j) / total * escape ** j
               for j in range(min(samples, skipped) + 1))
