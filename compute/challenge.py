"""The benchmark challenge: from the oracle's random seed a node runs a fixed chain of
matmul rounds (on its GPU when it has one, else on one CPU core), commits to what it
computed, and proves it by opening the rows the oracle asks for (`compute.proof`). The
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

Nothing here imports torch or Ray until a node computes: the oracle uses only the seed's
matrices (numpy) and the verdict.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

import numpy as np

from compute.errors import ComputeError
from compute.reference import reference_gflops

P = 17  # the modulus: entries are 0..16
MAX_SIZE = (1 << 24) // ((P - 1) ** 2) - 1  # keeps every sum of a row·column product below 2^24
MISDECLARED_RATIO = 0.5  # measured under half the declared model's reference
CUBES = (np.arange(P) ** 3 % P).astype(np.uint8)  # an entry → its cube mod P


@dataclass(frozen=True)
class Challenge:
    """`rounds` rounds of `size` × `size`; the node commits to every `stride`-th round (its
    checkpoints), sized so one CPU core answers in about a second (bench/proof.py)."""

    seed: int
    size: int = 1024
    rounds: int = 32
    stride: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_SIZE:
            raise ComputeError(f"challenge size must be in 1..{MAX_SIZE} for exact sums, got {self.size}.")
        if self.rounds < 1:
            raise ComputeError(f"challenge rounds must be at least 1, got {self.rounds}.")
        if self.stride < 1 or self.rounds % self.stride:
            raise ComputeError(f"challenge stride must divide its {self.rounds} rounds, got {self.stride}.")
        if not 0 <= self.seed < 1 << 64:
            raise ComputeError(f"challenge seed must be in 0..2^64-1, got {self.seed}.")

    @property
    def flops(self) -> int:
        return 2 * self.size**3 * self.rounds

    @property
    def checkpoints(self) -> int:
        """The rounds committed to: stride, 2·stride, …, rounds."""
        return self.rounds // self.stride

    def params(self) -> dict[str, int]:
        """What a site needs to ready a node for this challenge: everything but the seed."""
        return {"size": self.size, "rounds": self.rounds, "stride": self.stride}

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


def step(x: np.ndarray, b: np.ndarray, rounds: int = 1) -> np.ndarray:
    """`rounds` rounds applied to the rows `x` (float32): what the verifier recomputes."""
    for _ in range(rounds):
        x = CUBES[np.fmod(x @ b, P).astype(np.uint8)].astype(np.float32)
    return x


# ── the node ──────────────────────────────────────────────────────────────────────


def checkpoints_of(challenge: Challenge, device: str = "cpu") -> list[np.ndarray]:
    """The checkpoints X_stride, X_2·stride, … X_rounds, each size × size uint8, computed on
    `device` ("cpu" or "cuda")."""
    import torch

    b = torch.from_numpy(challenge.b()).to(device)
    x = torch.from_numpy(challenge.first()).to(device)
    out = []
    for r in range(1, challenge.rounds + 1):
        y = torch.fmod(x @ b, P)  # exact: see the module's docstring
        x = torch.fmod(y * y * y, P)
        if r % challenge.stride == 0:
            out.append(x.to(torch.uint8))
    return [m.cpu().numpy() for m in out]


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    try:  # Linux names the CPU model here; platform.processor() often says only "x86_64"
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


class ChallengeWorker:
    """A node's side of one challenge, as a Ray actor the site places on one of its nodes:
    readied before the seed is sent (torch loaded, the device warmed), then it computes and
    commits, keeps the checkpoints, and opens the rows the oracle asks for."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self.prover = None
        warm = torch.ones(64, 64, device=device)
        (warm @ warm).sum().item()  # BLAS threads, cuBLAS handles

    def ready(self) -> dict[str, Any]:
        import ray

        from compute.nvml import gpu_snapshot

        return {"node_id": ray.get_runtime_context().get_node_id(), "device": self.device,
                "device_name": device_name(self.device), "gpus": gpu_snapshot().gpus}

    def commit(self, params: dict[str, Any]) -> str:
        from compute.proof import Prover

        challenge = Challenge(**params)
        self.prover = Prover(challenge, checkpoints_of(challenge, self.device))
        return self.prover.root.hex()

    def open(self, cells: list[tuple[int, int]]) -> list[dict[str, Any]]:
        from compute.proof import opening_as_json

        if self.prover is None:
            raise ComputeError("nothing was committed to on this node: send the seed first.")
        return [opening_as_json(o) for o in self.prover.open(cells)]


def ready_worker(provider: str, timeout_s: float) -> tuple[Any, dict[str, Any]]:
    """A ChallengeWorker on one of `provider`'s nodes — its GPU when it has GPUs, else one CPU
    core — and what it says of itself once ready; ProviderFault if none is placed and ready
    within `timeout_s`. The caller ends it with `ray.kill`."""
    import ray

    from compute.errors import ProviderFault
    from compute.placement import provider_capacity, task_options

    use_gpu = provider_capacity(provider).gpus >= 1
    worker = ray.remote(ChallengeWorker).options(
        **task_options(provider, num_cpus=1, num_gpus=1 if use_gpu else 0), max_restarts=0,
    ).remote("cuda" if use_gpu else "cpu")
    ref = worker.ready.remote()
    ready, _ = ray.wait([ref], timeout=timeout_s)
    try:
        if not ready:
            raise ProviderFault(provider, f"no node of provider {provider} was free for a challenge within "
                                          f"{timeout_s:g} s.")
        return worker, ray.get(ref)
    except ray.exceptions.RayError as exc:
        ray.kill(worker)
        raise ProviderFault(provider, f"the challenge's worker failed to start: {str(exc).splitlines()[0]}") from exc
    except ProviderFault:
        ray.kill(worker)
        raise


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
    reference = reference_gflops(declared_model)
    measured = challenge.flops / seconds / 1e9 if seconds > 0 else 0.0
    ratio = measured / reference
    misdeclared = ratio < MISDECLARED_RATIO
    if misdeclared:
        reason = (f"measured {measured:,.1f} GFLOPS is {ratio:.2f}× the {reference:,.0f} GFLOPS reference "
                  f"for {declared_model}; below {MISDECLARED_RATIO}× the declared model is misdeclared")
    else:
        reason = f"ok: {measured:,.1f} GFLOPS, {ratio:.2f}× the reference for {declared_model}"
    return Verdict(measured, reference, ratio, misdeclared, reason)
