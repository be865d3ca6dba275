"""The benchmark challenge as a proof of work the oracle checks without redoing it.

A node computes the challenge's rounds (`compute.challenge_node`): X_r = (X_{r-1}·B mod P)³ mod P
from B and X₀ that the seed gives. It commits to every checkpoint (every `stride`-th round)
at once — a sha256 Merkle root whose leaves are the checkpoints' rows — and the oracle's
clock stops when the root arrives. Only then does the oracle name the cells it will check
(`sample`): rows of some checkpoints. The node opens each (`Prover.open`): row i of the
checkpoint and row i of the one before (X₀'s rows are the seed's), with their Merkle paths.
The oracle checks both rows against the root and recomputes the later from the earlier —
`stride` rounds of one row, stride·n² multiply-adds where the node did stride·n³.

Soundness. A row the node did not compute from the row before differs from the right one
with probability 1 − P^-n, so for the node a row it did not compute is a row it cannot get
right. A node that skipped some checkpoints' work passes only if the sample misses them all,
and one that skipped a share of every checkpoint's rows only if every sampled row is one it
computed: `pass_probability` bounds both. With the defaults (16 checkpoints of 32 sampled,
32 rows in all) a node that skipped half the rounds passes with probability 1.7·10⁻⁹ per
challenge, one that skipped half of every round's rows with 2⁻³², one that skipped it all
with P^-(32n).

The oracle's cost is making B (n² bytes from the seed), 32·stride row products (n² each) and
hashing 64 rows with their paths: at 2048 × 32 about 0.0014 of the node's work
(bench/proof.py). What the node sends is as small: 64 rows and their paths.

Everything here is numpy and hashlib, what the oracle needs: the commitment's definition (the
leaves, the tree, `Prover` on the host), the openings on the wire, the sample and the check. A
GPU node's commitment, hashed on its device, is `compute.challenge_node.DeviceProver`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from compute.challenge import Challenge, P, step
from compute.errors import ComputeError

SAMPLES = 16  # checkpoints the oracle opens per challenge (all of them when there are fewer)
CELLS = 32  # rows the oracle recomputes per challenge, spread over the sampled checkpoints
LEAF_TAG = b"swarm/challenge-row/v2"
ROOT_BYTES = 32


class ProofError(ComputeError):
    """An answer that does not prove the challenge: a wrong root, opening or row."""


# ── the commitment ────────────────────────────────────────────────────────────────


def leaf(challenge: Challenge, checkpoint: int, row: int, data: bytes) -> bytes:
    """A row's Merkle leaf: the challenge (seed, size, rounds, stride), which checkpoint
    (1-based) and row it is, and the row's bytes."""
    digest = hashlib.sha256(leaf_tag(challenge) + checkpoint.to_bytes(8, "big") + row.to_bytes(8, "big"))
    digest.update(data)
    return digest.digest()


def leaf_tag(challenge: Challenge) -> bytes:
    """What every leaf of the challenge begins with: LEAF_TAG, the seed, size, rounds and stride."""
    c = challenge
    return LEAF_TAG + b"".join(v.to_bytes(8, "big") for v in (c.seed, c.size, c.rounds, c.stride))


def _checkpoint_leaves(challenge: Challenge, checkpoint: int, rows: np.ndarray) -> list[bytes]:
    """`leaf` of every row of one checkpoint (n × n uint8), the header hashed once and copied."""
    header = hashlib.sha256(leaf_tag(challenge) + checkpoint.to_bytes(8, "big"))
    n, data = rows.shape[1], memoryview(rows.tobytes())
    leaves = []
    for i in range(rows.shape[0]):
        digest = header.copy()
        digest.update(i.to_bytes(8, "big"))
        digest.update(data[i * n:(i + 1) * n])
        leaves.append(digest.digest())
    return leaves


def _parent(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """The tree bottom up; an odd level's last node is carried up unpaired."""
    levels, sha256 = [list(leaves)], hashlib.sha256
    while len(levels[-1]) > 1:
        level = levels[-1]  # _parent inlined: this loop is a third of a CPU node's commitment
        paired = [sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        levels.append(paired + ([level[-1]] if len(level) % 2 else []))
    return levels


def merkle_root(leaves: list[bytes]) -> bytes:
    return _levels(leaves)[-1][0]


def _path(levels: list[list[bytes]], index: int) -> list[bytes]:
    """The siblings from leaf `index` up (an unpaired node has none at that level)."""
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index //= 2
    return path


def merkle_path(leaves: list[bytes], index: int) -> list[bytes]:
    return _path(_levels(leaves), index)


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
    """Row `row` of checkpoint `checkpoint` (1-based) opened, with the same row of the
    checkpoint before (none for the first: X₀ comes from the seed)."""

    checkpoint: int
    row: int
    previous: bytes | None
    previous_path: tuple[bytes, ...]
    data: bytes
    path: tuple[bytes, ...]


class Prover:
    """The checkpoints committed to on the host, with hashlib, and opened on request: a CPU
    node's commitment, and the root a GPU node's (`compute.challenge_node.DeviceProver`) must equal."""

    def __init__(self, challenge: Challenge, checkpoints: list[np.ndarray]) -> None:
        n = challenge.size
        if len(checkpoints) != challenge.checkpoints or any(c.shape != (n, n) for c in checkpoints):
            raise ValueError(
                f"a proof of this challenge needs {challenge.checkpoints} checkpoints of {n}×{n}"
            )
        self.challenge = challenge
        self.checkpoints = [np.ascontiguousarray(c, dtype=np.uint8) for c in checkpoints]
        self.levels = _levels([digest for k, rows in enumerate(self.checkpoints, start=1)
                               for digest in _checkpoint_leaves(challenge, k, rows)])

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def open(self, cells: list[tuple[int, int]]) -> list[Opening]:
        n = self.challenge.size

        def row(index: int) -> bytes:
            return self.checkpoints[index // n][index % n].tobytes()

        return open_cells(self.challenge, cells, row, lambda index: _path(self.levels, index))


def open_cells(challenge: Challenge, cells: list[tuple[int, int]], row: Callable[[int], bytes],
               path: Callable[[int], list[bytes]]) -> list[Opening]:
    """The cells opened, given a leaf's row (`row`) and Merkle path (`path`) by its index: how
    every prover, on the host or on a device, answers the oracle's sample."""
    n, opened = challenge.size, []
    for k, i in cells:
        if not (1 <= k <= challenge.checkpoints and 0 <= i < n):
            raise ValueError(f"there is no row {i} of checkpoint {k} to open")
        at, before = (k - 1) * n + i, (k - 2) * n + i
        opened.append(
            Opening(
                k,
                i,
                row(before) if k > 1 else None,
                tuple(path(before)) if k > 1 else (),
                row(at),
                tuple(path(at)),
            )
        )
    return opened


# ── on the wire ───────────────────────────────────────────────────────────────────


def opening_as_json(o: Opening) -> dict[str, Any]:
    return {"checkpoint": o.checkpoint, "row": o.row,
            "previous": None if o.previous is None else base64.b64encode(o.previous).decode(),
            "previous_path": [h.hex() for h in o.previous_path], "data": base64.b64encode(o.data).decode(),
            "path": [h.hex() for h in o.path]}


def opening_from_json(raw: Any) -> Opening:
    """An opening as a node sent it, or ProofError for anything that is not one."""
    try:
        previous = raw["previous"]
        return Opening(
            int(raw["checkpoint"]),
            int(raw["row"]),
            None if previous is None else base64.b64decode(previous, validate=True),
            tuple(bytes.fromhex(h) for h in raw["previous_path"]),
            base64.b64decode(raw["data"], validate=True),
            tuple(bytes.fromhex(h) for h in raw["path"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError, binascii.Error):
        raise ProofError(
            "the node's opening is not an opening (checkpoint, row, previous, data and paths)"
        ) from None


def root_from_hex(raw: Any) -> bytes:
    """A commitment as a node sent it, or ProofError."""
    try:
        root = bytes.fromhex(str(raw).removeprefix("0x"))
    except ValueError:
        root = b""
    if len(root) != ROOT_BYTES:
        raise ProofError(f"the node's commitment is not a {ROOT_BYTES}-byte Merkle root")
    return root


# ── the oracle ────────────────────────────────────────────────────────────────────


def sample(challenge: Challenge, samples: int = SAMPLES, cells: int = CELLS) -> list[tuple[int, int]]:
    """The (checkpoint, row) cells to open, drawn by the oracle after the root arrived (the
    node cannot know them): `samples` checkpoints (all of them when there are fewer) and
    `cells` rows spread over them."""
    picked = sorted(k + 1 for k in _distinct(challenge.checkpoints, min(samples, challenge.checkpoints)))
    per = min(challenge.size, math.ceil(cells / len(picked)))
    return [(k, i) for k in picked for i in sorted(_distinct(challenge.size, per))]


def _distinct(population: int, count: int) -> set[int]:
    chosen: set[int] = set()
    while len(chosen) < count:
        chosen.add(secrets.randbelow(population))
    return chosen


def check(
    challenge: Challenge, root: bytes, requested: list[tuple[int, int]], openings: list[Opening]
) -> None:
    """Raises ProofError naming the first cell whose opening does not prove it."""
    n, count = challenge.size, challenge.checkpoints * challenge.size
    got = [(o.checkpoint, o.row) for o in openings]
    if got != [tuple(c) for c in requested]:
        raise ProofError(f"the node opened cells {got[:4]}…, not the {len(requested)} asked for")
    previous_rows, rows = [], []
    for o in openings:
        k, i = o.checkpoint, o.row
        row = _row(o.data, n, k, i)
        if not merkle_verify(root, leaf(challenge, k, i, o.data), (k - 1) * n + i, count, list(o.path)):
            raise ProofError(f"row {i} of checkpoint {k} is not the one committed to")
        if k == 1:
            previous = challenge.first_rows([i])[0]
        else:
            if o.previous is None:
                raise ProofError(f"row {i} of checkpoint {k} came without the same row of checkpoint {k - 1}")
            previous = _row(o.previous, n, k - 1, i)
            if not merkle_verify(root, leaf(challenge, k - 1, i, o.previous), (k - 2) * n + i, count,
                                 list(o.previous_path)):
                raise ProofError(f"row {i} of checkpoint {k - 1} is not the one committed to")
        previous_rows.append(previous)
        rows.append(row)
    recomputed = step(np.stack(previous_rows).astype(np.float32), challenge.b(), challenge.stride)
    wrong = np.flatnonzero((recomputed != np.stack(rows)).any(axis=1))
    if wrong.size:
        o = openings[int(wrong[0])]
        raise ProofError(f"row {o.row} of checkpoint {o.checkpoint} is not {challenge.stride} round(s) of "
                         f"(X·B mod {P})³ mod {P} from the row before: the node did not compute it")


def _row(data: bytes, n: int, checkpoint: int, row: int) -> np.ndarray:
    """A row (uint8, n) from its bytes: residues below P, or ProofError."""
    if not isinstance(data, bytes) or len(data) != n:
        raise ProofError(f"row {row} of checkpoint {checkpoint} is not {n} bytes")
    x = np.frombuffer(data, dtype=np.uint8)
    if int(x.max(initial=0)) >= P:
        raise ProofError(f"row {row} of checkpoint {checkpoint} holds a value of {P} or more")
    return x


def pass_probability(checkpoints: int, samples: int, skipped: int, rows: int, skipped_rows: float = 1.0,
                     size: int = 1024) -> float:
    """An upper bound on the chance that a node passes which, in `skipped` of the
    `checkpoints`, left a share `skipped_rows` of the rows uncomputed (1.0: all of them): the
    sampled checkpoints hold some of those (hypergeometric), and in each every one of the
    `rows` recomputed must be one it computed or, at P^-size, one it guessed right."""
    samples = min(samples, checkpoints)
    total = math.comb(checkpoints, samples)
    # A sampled skipping checkpoint passes if every recomputed row was computed or guessed.
    escape = (1.0 - skipped_rows + skipped_rows * float(P) ** -size) ** rows
    return sum(math.comb(skipped, j) * math.comb(checkpoints - skipped, samples - j) / total * escape ** j
               for j in range(min(samples, skipped) + 1))
