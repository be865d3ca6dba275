"""The benchmark challenge: from the oracle's random seed, a node runs a fixed chain of
matmuls (on its GPU when it has one, else on one CPU core) and returns a checksum of the
result and the time it took; the verifier recomputes the checksum and compares the
throughput with the reference for the GPU model the provider declared.

Exact on any hardware: the matrices hold integers in [0, P) stored as float32, so every
product (≤ 16·16) and every sum (≤ size·256 < 2^24) is an integer float32 represents
exactly, whatever the summation order, the BLAS or the GPU (TF32 and fp16 inputs are exact
too: the entries need 5 bits). Each round is X ← cube(A·X mod P) mod P; cubing permutes
the residues mod 17 (gcd(3, 16) = 1) and is not linear, so no shortcut like computing A^R
by squaring reaches the last matrix without doing every round.

The node reports its own time; the verdict trusts it. The checksum proves the work was
done, not how fast.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import ray
import torch

from compute.errors import ComputeError, ProviderFault
from compute.nvml import gpu_snapshot
from compute.placement import provider_capacity, task_options
from compute.reference import reference_gflops

P = 17  # the modulus: entries are 0..16
MAX_SIZE = (1 << 24) // ((P - 1) ** 2) - 1  # keeps every sum of a row·column product below 2^24
MISDECLARED_RATIO = 0.5  # measured under half the declared model's reference
CUBES = (np.arange(P) ** 3 % P).astype(np.uint8)  # an entry → its cube mod P


@dataclass(frozen=True)
class Challenge:
    """Sized so one CPU core answers in about a second (bench/challenge.py)."""

    seed: int
    size: int = 1024
    rounds: int = 32

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_SIZE:
            raise ComputeError(f"challenge size must be in 1..{MAX_SIZE} for exact sums, got {self.size}.")
        if self.rounds < 1:
            raise ComputeError(f"challenge rounds must be at least 1, got {self.rounds}.")

    @property
    def flops(self) -> int:
        return 2 * self.size**3 * self.rounds

    def matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """A and X₀ from the seed (see `_entries`), as float32."""
        n = self.size
        entries = self._entries(0, 2 * n * n).astype(np.float32)
        return entries[:n * n].reshape(n, n), entries[n * n:].reshape(n, n)

    def rows_of_a(self, rows: np.ndarray) -> np.ndarray:
        """Some rows of A, as float32, without making the rest: what a verifier needs."""
        n = self.size
        return np.stack([self._entries(int(r) * n, n) for r in rows]).astype(np.float32)

    def first(self) -> np.ndarray:
        """X₀ alone, as float32."""
        n = self.size
        return self._entries(n * n, n * n).astype(np.float32).reshape(n, n)

    def _entries(self, start: int, count: int) -> np.ndarray:
        """Entries start … start+count−1 of the seed's stream — A's n² row by row, then X₀'s —
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


@dataclass(frozen=True)
class ChallengeResult:
    checksum: str  # sha256 of the last matrix as little-endian int32
    seconds: float  # the rounds alone, timed on the node
    flops: int
    throughput_gflops: float
    device: str  # "cuda" | "cpu"
    device_name: str
    gpus: int  # what NVML reports on the node
    node_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    checksum_ok: bool
    measured_gflops: float
    reference_gflops: float
    ratio: float  # measured / reference
    misdeclared: bool  # ratio < MISDECLARED_RATIO
    reason: str

    @property
    def passed(self) -> bool:
        return self.checksum_ok and not self.misdeclared


def _round(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = torch.fmod(a @ x, P)  # fmod is exact in IEEE arithmetic; entries are non-negative
    return torch.fmod(y * y * y, P)


def _checksum(x: torch.Tensor) -> str:
    return hashlib.sha256(x.to(torch.int32).cpu().numpy().astype("<i4").tobytes()).hexdigest()


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    try:  # Linux names the CPU model here; platform.processor() often says only "x86_64"
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


def run_challenge(challenge: Challenge, device: str = "cpu") -> ChallengeResult:
    """Runs the rounds on `device` ("cpu" or "cuda") and times them (setup untimed)."""
    a_np, x_np = challenge.matrices()
    a, x = torch.from_numpy(a_np).to(device), torch.from_numpy(x_np).to(device)
    _round(a[:64, :64], x[:64, :64])  # warm-up: BLAS threads, cuBLAS handles
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(challenge.rounds):
        x = _round(a, x)
    _synchronize(device)
    seconds = time.perf_counter() - started
    return ChallengeResult(
        checksum=_checksum(x),
        seconds=seconds,
        flops=challenge.flops,
        throughput_gflops=challenge.flops / seconds / 1e9,
        device=device,
        device_name=_device_name(device),
        gpus=gpu_snapshot().gpus,
    )


@ray.remote(max_retries=0)
def _challenge_task(challenge: Challenge, device: str) -> ChallengeResult:
    result = run_challenge(challenge, device)
    return ChallengeResult(**(asdict(result) | {"node_id": ray.get_runtime_context().get_node_id()}))


def run_on_provider(provider: str, challenge: Challenge, timeout_s: float) -> ChallengeResult:
    """Runs the challenge on one of `provider`'s nodes: on a GPU if it has any, else one CPU core."""
    use_gpu = provider_capacity(provider).gpus >= 1
    options = task_options(provider, num_cpus=1, num_gpus=1 if use_gpu else 0)
    ref = _challenge_task.options(**options).remote(challenge, "cuda" if use_gpu else "cpu")
    ready, _ = ray.wait([ref], timeout=timeout_s)
    if not ready:
        ray.cancel(ref, force=True)
        raise ProviderFault(provider, f"provider {provider} did not answer the challenge within {timeout_s:g} s.")
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        raise ProviderFault(provider, f"provider {provider} failed the challenge: {str(exc).splitlines()[0]}") from exc


@functools.lru_cache(maxsize=8)
def expected_checksum(challenge: Challenge) -> str:
    """The verifier's own answer, computed on this machine's CPU."""
    return run_challenge(challenge, "cpu").checksum


def verify(challenge: Challenge, result: ChallengeResult, declared_model: str) -> Verdict:
    """Checks the checksum and the throughput against the reference for `declared_model`."""
    reference = reference_gflops(declared_model)
    checksum_ok = result.checksum == expected_checksum(challenge)
    # Throughput from the challenge's own flop count: the node's `flops` field is not trusted.
    measured = challenge.flops / result.seconds / 1e9 if result.seconds > 0 else 0.0
    ratio = measured / reference
    misdeclared = ratio < MISDECLARED_RATIO
    if not checksum_ok:
        reason = "checksum mismatch: the node did not compute the challenge"
    elif result.seconds <= 0:
        reason = f"reported time {result.seconds} s is not positive"
    elif misdeclared:
        reason = (f"measured {measured:,.1f} GFLOPS is {ratio:.2f}× the {reference:,.0f} GFLOPS reference "
                  f"for {declared_model}; below {MISDECLARED_RATIO}× the declared model is misdeclared")
    else:
        reason = f"ok: {measured:,.1f} GFLOPS, {ratio:.2f}× the reference for {declared_model}"
    return Verdict(checksum_ok, measured, reference, ratio, misdeclared, reason)
