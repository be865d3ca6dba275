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
matrices (numpy) and the verdict. Only a GPU node's worker imports torch (and Triton, whose
kernel hashes the commitment where the rounds ran: compute.sha256); a CPU node's computes the
rounds with numpy's BLAS (`step`, the verifier's own function) and hashes with hashlib, so a
challenge does not cost the node the seconds of CPU that loading torch takes.
"""

from __future__ import annotations

import math
import platform
import time
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


# ── the node ──────────────────────────────────────────────────────────────────────


def checkpoints_of(challenge: Challenge, device: str = "cpu") -> list[np.ndarray]:
    """The checkpoints X_stride, X_2·stride, … X_rounds, each size × size uint8, computed on
    `device` ("cpu" or "cuda"), in the challenge's precision on a GPU that has it (else fp32:
    the same numbers, slower)."""
    if device != "cuda":
        x, b = challenge.first(), challenge.b()
        out: list[np.ndarray] = []
        for r in range(1, challenge.rounds + 1):
            x = step(x, b)
            if r % challenge.stride == 0:
                out.append(x.astype(np.uint8))
        return out
    return list(device_checkpoints(challenge, device).cpu().numpy())


def device_checkpoints(challenge: Challenge, device: str = "cuda") -> Any:
    """The checkpoints computed on a GPU and kept there: a torch tensor, checkpoints × size ×
    size uint8, on `device` (what compute.proof.DeviceProver commits to). Asynchronous: the
    rounds may still be running when it returns."""
    import torch

    b_gpu = torch.from_numpy(challenge.b()).to(device)
    x_gpu = torch.from_numpy(challenge.first()).to(device)
    product = _product(challenge.precision, device, b_gpu)
    n = challenge.size
    kept = torch.empty((challenge.checkpoints, n, n), dtype=torch.uint8, device=device)
    for r in range(1, challenge.rounds + 1):
        y = torch.fmod(product(x_gpu), P)  # exact: see the module's docstring
        x_gpu = torch.fmod(y * y * y, P)
        if r % challenge.stride == 0:
            kept[r // challenge.stride - 1] = x_gpu
    return kept


def _product(precision: str, device: str, b):
    """x ↦ x·B, with half-precision inputs on a GPU's tensor cores and fp32 accumulation and
    output (exact: entries ≤ 16 are exact in bf16 and fp16, sums < 2^24 in fp32), or fp32."""
    import torch

    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if device != "cuda" or half is None or (half is torch.bfloat16 and not torch.cuda.is_bf16_supported()):
        return lambda x: x @ b
    b_half = b.to(half)
    try:  # mm with out_dtype: cuBLAS's half-input, fp32-output GEMM
        torch.mm(b_half[:8, :8], b_half[:8, :8], out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError):
        return lambda x: x @ b
    return lambda x: torch.mm(x.to(half), b_half, out_dtype=torch.float32)


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
    readied before the seed is sent (torch loaded, the device warmed, on a GPU the commitment's
    kernels compiled), then it computes and commits, keeps the checkpoints (on the GPU, where
    it has one), and opens the rows the oracle asks for."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.prover: Any = None  # compute.proof.Prover (or DeviceProver, on a GPU), once committed
        if device == "cuda":
            import torch

            from compute.proof import DeviceProver

            warm = torch.ones(64, 64, device=device)
            (warm @ warm).sum().item()  # cuBLAS handles
            # Triton compiles the SHA-256 kernels on their first use (tens of seconds the first time
            # on a machine, then read from its cache): here, before the oracle's clock starts.
            DeviceProver(Challenge(seed=0, size=8, rounds=1), torch.zeros((1, 8, 8), dtype=torch.uint8,
                                                                          device=device))
        else:
            warm = np.ones((64, 64), dtype=np.float32)
            float((warm @ warm).sum())  # BLAS threads

    def ready(self, vram_mb: float = 0.0) -> dict[str, Any]:
        """The node, its device and, on a GPU, what NVML says it is and how much of the
        declared `vram_mb` this worker could allocate and write."""
        import ray

        from compute.nvml import gpu_snapshot

        answer = {"node_id": ray.get_runtime_context().get_node_id(), "device": self.device,
                  "device_name": device_name(self.device), "gpus": gpu_snapshot().gpus}
        if self.device == "cuda":
            answer |= {"identity": gpu_identity(), "vram_touched_mb": touch_vram(vram_mb)}
        return answer

    def commit(self, params: dict[str, Any]) -> dict[str, Any]:
        """Computes the rounds and commits to them: the Merkle root (hex), with the seconds the
        rounds (`rounds_s`) and the commitment (`commit_s`) took by this node's own clock — its
        account of where its time went, which the oracle records but never judges by: it times
        seed → root itself. A GPU hashes the rows where it computed them (compute.sha256)."""
        from compute.proof import DeviceProver, Prover

        challenge = Challenge(**params)
        started = time.perf_counter()
        if self.device == "cuda":
            import torch

            checkpoints = device_checkpoints(challenge, self.device)
            torch.cuda.synchronize()  # the rounds done, not only queued
            computed = time.perf_counter()
            self.prover = DeviceProver(challenge, checkpoints)  # the root copied back: the hashing done
        else:
            checkpoints = checkpoints_of(challenge)
            computed = time.perf_counter()
            self.prover = Prover(challenge, checkpoints)
        committed = time.perf_counter()
        return {"root": self.prover.root.hex(), "rounds_s": computed - started,
                "commit_s": committed - computed}

    def open(self, cells: list[tuple[int, int]]) -> list[dict[str, Any]]:
        from compute.proof import opening_as_json

        if self.prover is None:
            raise ComputeError("nothing was committed to on this node: send the seed first.")
        return [opening_as_json(o) for o in self.prover.open(cells)]


def gpu_identity() -> dict[str, Any] | None:
    """NVML's identity of the GPU this process was given (the first CUDA_VISIBLE_DEVICES entry)."""
    import os

    from compute.nvml import identity

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    found = identity(visible)
    return found.as_dict() if found is not None else None


VRAM_SHARE = 0.9  # of the declared VRAM, allocated and written by a challenge's worker


def touch_vram(vram_mb: float) -> float:
    """Allocates VRAM_SHARE of `vram_mb` MiB on the GPU, writes every byte and reads a sample
    back; the MiB it managed (0 when the allocation failed)."""
    import torch

    want = int(vram_mb * VRAM_SHARE) << 20
    if want <= 0:
        return 0.0
    try:
        block = torch.empty(want, dtype=torch.uint8, device="cuda")
        block.fill_(0xA5)
        ok = bool((block[:: 1 << 20] == 0xA5).all().item())
        del block
        torch.cuda.empty_cache()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return 0.0
    return want / (1 << 20) if ok else 0.0


def ready_worker(provider: str, timeout_s: float, vram_mb: float = 0.0) -> tuple[Any, dict[str, Any]]:
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
    ref = worker.ready.remote(vram_mb)
    ready, _ = ray.wait([ref], timeout=timeout_s)
    try:
        if not ready:
            raise ProviderFault(provider, f"no node of provider {provider} was free for a challenge within "
                                          f"{timeout_s:g} s.")
        return worker, ray.get(ref)
    except ray.exceptions.RayError as exc:
        ray.kill(worker)
        raise ProviderFault(
            provider, f"the challenge's worker failed to start: {str(exc).splitlines()[0]}"
        ) from exc
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
