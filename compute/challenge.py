"""The benchmark challenge, defined and judged: from the oracle's random seed a node runs a
fixed chain of matmul rounds (on its GPU when it has one, else on one CPU core), commits to
what it computed, and proves it by opening the rows the oracle asks for (`compute.proof`). The
oracle times the node itself — from sending the seed to receiving the commitment — and
judges that throughput against the reference for the GPU model the provider declared.

A round is X_r = (X_{r-1}·B mod P)³ mod P, with B and X₀ made from the seed. Row i of X_r
depends only on row i of X_{r-1} and B, so the oracle checks one row of one round in n²
multiply-adds where the node did n³ for the round. Cubing permutes the residues mod 17
(gcd(3, 16) = 1) and is not linear, so no shortcut like computing B^R by squaring reaches
the last round without doing every one.

Exact on any hardware: the matrices hold integers in [0, P) stored as float32, so every
product (≤ 16·16) and every sum (≤ size·256 < 2^24) is an integer float32 represents
exactly, whatever the summation order, the BLAS or the GPU.

Here is what the oracle needs — the challenge's shape and its seed's matrices (numpy), one
round as the verifier recomputes it (`step`), the verdict on the time it took, and what a
node's account of its hardware is held to — and nothing of a node's side: computing the
rounds, committing on a device and the worker a site places are `compute.challenge_node`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from compute.errors import ComputeError
from compute.reference import PRECISIONS, normalize_model, reference_gflops

P = 17  # the modulus: entries are 0..16
MAX_SIZE = (1 << 24) // ((P - 1) ** 2) - 1  # keeps every sum of a row·column product below 2^24
MISDECLARED_RATIO = 0.5  # measured under half the declared model's reference
CUBES: np.ndarray = (np.arange(P) ** 3 % P).astype(np.uint8)  # an entry → its cube mod P


@dataclass(frozen=True)
class Challenge:
    """`rounds` rounds of `size` × `size`; the node commits to every `stride`-th round (its
    checkpoints), sized so one CPU core answers in about a second (bench/proof.py)."""

    seed: int
    size: int = 1024
    rounds: int = 32
    stride: int = 1
    precision: str = "fp32"  # the matmul's inputs on a GPU: fp32, or bf16/fp16 on its tensor cores

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_SIZE:
            raise ComputeError(f"challenge size must be in 1..{MAX_SIZE} for exact sums, got {self.size}.")
        if self.rounds < 1:
            raise ComputeError(f"challenge rounds must be at least 1, got {self.rounds}.")
        if self.stride < 1 or self.rounds % self.stride:
            raise ComputeError(f"challenge stride must divide its {self.rounds} rounds, got {self.stride}.")
        if not 0 <= self.seed < 1 << 64:
            raise ComputeError(f"challenge seed must be in 0..2^64-1, got {self.seed}.")
        if self.precision not in PRECISIONS:
            raise ComputeError(
                f"challenge precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}."
            )

    @property
    def flops(self) -> int:
        return 2 * self.size**3 * self.rounds

    @property
    def checkpoints(self) -> int:
        """The rounds committed to: stride, 2·stride, …, rounds."""
        return self.rounds // self.stride

    def params(self) -> dict[str, Any]:
        """What a site needs to ready a node for this challenge: everything but the seed."""
        return {"size": self.size, "rounds": self.rounds, "stride": self.stride, "precision": self.precision}

    def b(self) -> np.ndarray:
        """B, as float32."""
        n = self.size
        return self._entries(0, n * n).astype(np.float32).reshape(n, n)

    def first(self) -> np.ndarray:
        """X₀, as float32."""
        n = self.size
        return self._entries(n * n, n * n).astype(np.float32).reshape(n, n)

    def first_rows(self, rows: np.ndarray | list[int]) -> np.ndarray:
        """Some rows of X₀, as float32, without making the rest."""
        n = self.size
        return np.stack([self._entries(n * n + int(r) * n, n) for r in rows]).astype(np.float32)

    def _entries(self, start: int, count: int) -> np.ndarray:
        """Entries start … start+count−1 of the seed's stream — B's n² row by row, then X₀'s —
        as uint8: the low four bits (0 to 15, residues mod P) of each byte of PCG64's 64-bit
        words, little-endian. PCG64 gives the same words on every platform and skips ahead
        in constant time, so any row is made alone."""
        first, last = start // 8, (start + count + 7) // 8
        generator = np.random.PCG64(self.seed)
        if first:
            generator.advance(first)
        raw = generator.random_raw(last - first).astype("<u8").view(np.uint8)
        offset = start - 8 * first
        return raw[offset:offset + count] & 0x0F


MAX_CHECKPOINTS = 32  # what a GPU challenge commits to: its stride grows with its rounds beyond


def timed_shape(reference_gflops: float, size: int, seconds: float) -> tuple[int, int, int]:
    """(size, rounds, stride) of a challenge that takes `seconds` at `reference_gflops`: the
    shape the oracle gives a GPU. A GPU answers the CPU's 2048 × 32 in about a millisecond
    (projected from the datasheets), which the round trip to its site would swamp, so its
    challenge is as long as the oracle's clock needs to time the GPU and not the network.
    Its rounds are committed every `stride`-th, at most MAX_CHECKPOINTS of them: the oracle
    recomputes `stride` rounds of a row for each row it checks, CELLS·stride·size² multiply-adds,
    1/size of the node's work per checkpoint sampled."""
    if reference_gflops <= 0 or seconds <= 0:
        raise ComputeError("a timed challenge needs a positive reference and a positive time.")
    rounds = max(1, math.ceil(seconds * reference_gflops * 1e9 / (2 * size**3)))
    stride = math.ceil(rounds / MAX_CHECKPOINTS)
    return size, stride * math.ceil(rounds / stride), stride


def step(x: np.ndarray, b: np.ndarray, rounds: int = 1) -> np.ndarray:
    """`rounds` rounds applied to the rows `x` (float32): what the verifier recomputes."""
    for _ in range(rounds):  # x·B holds exact integers below 2^24: their residues by integer division
        x = CUBES[(x @ b).astype(np.uint32) % np.uint32(P)].astype(np.float32)
    return x


# ── the verdict ───────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Verdict:
    measured_gflops: float
    reference_gflops: float
    ratio: float  # measured / reference
    misdeclared: bool  # ratio < MISDECLARED_RATIO
    reason: str


def judge(challenge: Challenge, seconds: float, declared_model: str) -> Verdict:
    """The throughput the oracle measured (the challenge's flops over its own `seconds`)
    against the reference for `declared_model`; raises ComputeError for a model the table lacks."""
    reference = reference_gflops(declared_model, challenge.precision)
    measured = challenge.flops / seconds / 1e9 if seconds > 0 else 0.0
    ratio = measured / reference
    misdeclared = ratio < MISDECLARED_RATIO
    p = challenge.precision
    if misdeclared:
        reason = (
            f"measured {measured:,.1f} {p} GFLOPS is {ratio:.2f}× the {reference:,.0f} GFLOPS reference "
            f"for {declared_model}; below {MISDECLARED_RATIO}× the declared model is misdeclared"
        )
    else:
        reason = f"ok: {measured:,.1f} {p} GFLOPS, {ratio:.2f}× the reference for {declared_model}"
    return Verdict(measured, reference, ratio, misdeclared, reason)


VRAM_SHARE = 0.9  # of the declared VRAM, allocated and written by a challenge's worker


@dataclass(frozen=True)
class Declared:
    """The hardware a provider's registered spec declares: what the node's answers are held to."""

    model: str  # "cpu" or a GPU model
    vram_gb: float = 0.0  # per GPU
    gpu_uuids: tuple[str, ...] = ()  # optional: the GPUs themselves, as NVML names them

    @property
    def gpu(self) -> bool:
        try:
            return normalize_model(self.model) != "cpu"
        except ComputeError:
            return False


def identity_problem(declared: Declared, ready: dict[str, Any]) -> str | None:
    """Why a readied worker's own account of its hardware contradicts the declared spec (one
    sentence), or None. A node declaring a GPU must run the challenge on one that NVML names
    as the declared model, with at least the declared memory, which it allocated and wrote
    (VRAM_SHARE of it), and, if the spec lists its GPUs' UUIDs, one of those."""
    if not declared.gpu:
        return None
    model = normalize_model(declared.model)
    if ready.get("device") != "cuda":
        return f"the node ran the challenge without a GPU, where the spec declares {model}"
    found = ready.get("identity") if isinstance(ready.get("identity"), dict) else None
    if found is None:
        return f"the node's GPU gave NVML no identity, where the spec declares {model}"
    try:
        named = normalize_model(str(found.get("name", "")))
    except ComputeError:
        named = None
    if named != model:
        return f"NVML names the node's GPU {str(found.get('name'))[:64]!r}, not the declared {model}"
    declared_mb = declared.vram_gb * 1e9 / (1 << 20)
    total_mb = as_number(found.get("memory_total_mb"))
    if declared_mb and total_mb < VRAM_SHARE * declared_mb:
        return f"NVML gives the node's GPU {total_mb:,.0f} MiB, under the declared {declared.vram_gb:g} GB"
    touched_mb = as_number(ready.get("vram_touched_mb"))
    if declared_mb and touched_mb < VRAM_SHARE * declared_mb * 0.999:
        return f"the node allocated {touched_mb:,.0f} MiB of the declared {declared.vram_gb:g} GB of VRAM"
    if declared.gpu_uuids and found.get("uuid") not in declared.gpu_uuids:
        return f"the node's GPU {str(found.get('uuid'))[:64]!r} is none of the GPUs its spec lists"
    return None


def as_number(value: Any) -> float:
    """A finite number a node sent, else 0 (JSON lets NaN and Infinity through)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return 0.0
    return number if math.isfinite(number) else 0.0
