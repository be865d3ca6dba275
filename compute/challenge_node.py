"""A node's side of the benchmark challenge (`compute.challenge`): computing its rounds, committing
to them on the device that computed them, and the worker a site places on one of its nodes.

The definition, the verdict and the oracle's check are `compute.challenge` and `compute.proof`,
which import nothing of this module: the oracle never runs a node's side. A CPU node's worker
computes the rounds with numpy's BLAS (`compute.challenge.step`, the verifier's own function)
and commits with hashlib (`compute.proof.Prover`); only a GPU node's imports torch, and Triton
with it (`compute.sha256`, whose kernel hashes the commitment where the rounds ran), so a
challenge does not cost a CPU node the seconds of CPU that loading torch takes. torch and Triton
are therefore imported in the functions that use them, and Ray too, which `oracle.cpu_reference`
does without when it times the worker in its own process.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from compute.challenge import VRAM_SHARE, Challenge, P, step
from compute.errors import ComputeError, ProviderFault
from compute.nvml import gpu_snapshot, identity
from compute.placement import provider_capacity, task_options
from compute.proof import Opening, Prover, leaf_tag, open_cells, opening_as_json
from core.hardware import cpu_model

# ── the rounds ────────────────────────────────────────────────────────────────────


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
    size uint8, on `device` (what `DeviceProver` commits to). Asynchronous: the rounds may
    still be running when it returns."""
    import torch

    b_gpu = torch.from_numpy(challenge.b()).to(device)
    x_gpu = torch.from_numpy(challenge.first()).to(device)
    product = _product(challenge.precision, device, b_gpu)
    n = challenge.size
    kept = torch.empty((challenge.checkpoints, n, n), dtype=torch.uint8, device=device)
    for r in range(1, challenge.rounds + 1):
        y = torch.fmod(product(x_gpu), P)  # exact: see compute.challenge's docstring
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


# ── the commitment on the device ──────────────────────────────────────────────────


class DeviceProver:
    """A GPU node's side: the checkpoints committed to on the device that computed them. Each
    row's leaf and the tree above are hashed there (compute.sha256), to the root `Prover`
    would give; only the root, and then the rows opened with their paths, leave the device."""

    def __init__(self, challenge: Challenge, checkpoints: Any) -> None:
        """`checkpoints`: a torch tensor, checkpoints × size × size uint8, on its device."""
        from compute import sha256  # Triton and torch: only a GPU node commits here

        n = challenge.size
        if tuple(checkpoints.shape) != (challenge.checkpoints, n, n):
            raise ValueError(
                f"a proof of this challenge needs {challenge.checkpoints} checkpoints of {n}×{n}"
            )
        self.challenge = challenge
        self.checkpoints = checkpoints
        self.levels = sha256.merkle_levels(sha256.digest_words(_leaf_messages(challenge, checkpoints)))
        (self.root,) = sha256.to_host(self.levels[-1])

    def open(self, cells: list[tuple[int, int]]) -> list[Opening]:
        import torch

        n = self.challenge.size
        wanted = sorted({(k - 1) * n + i for k, i in cells} | {(k - 2) * n + i for k, i in cells if k > 1})
        inside = [index for index in wanted if 0 <= index < self.challenge.checkpoints * n]
        at = torch.tensor(inside, dtype=torch.long, device=self.checkpoints.device)
        rows = self.checkpoints.reshape(-1, n)[at].cpu().numpy()  # only the rows opened leave the device
        data = {index: row.tobytes() for index, row in zip(inside, rows, strict=True)}
        paths = _device_paths(self.levels, inside)
        return open_cells(self.challenge, cells, data.__getitem__, paths.__getitem__)


def _leaf_messages(challenge: Challenge, checkpoints: Any) -> Any:
    """Every row's leaf message, on the checkpoints' device, as `compute.proof.leaf` hashes it —
    the header (LEAF_TAG, the challenge, the checkpoint, the row) and the row's bytes — in the
    padded buffer compute.sha256 hashes."""
    import torch

    from compute import sha256  # Triton and torch: only a GPU node commits here

    count, n = challenge.checkpoints * challenge.size, challenge.size
    device = checkpoints.device
    tag = leaf_tag(challenge)
    start = len(tag) + 16  # the row's bytes, after the tag, the checkpoint and the row
    buffer = sha256.padded(count, start + n, device)
    buffer[:, :len(tag)] = torch.tensor(list(tag), dtype=torch.uint8).to(device)
    checkpoint = torch.arange(1, challenge.checkpoints + 1, device=device).repeat_interleave(n)
    row = torch.arange(n, device=device).repeat(challenge.checkpoints)
    buffer[:, len(tag):len(tag) + 8] = _big_endian(checkpoint)
    buffer[:, len(tag) + 8:start] = _big_endian(row)
    buffer[:, start:start + n] = checkpoints.reshape(count, n)
    return buffer


def _big_endian(values: Any) -> Any:
    """Non-negative int64 values (a torch tensor) as 8 big-endian bytes each."""
    import torch

    shifts = torch.arange(56, -1, -8, device=values.device)
    return ((values[:, None] >> shifts) & 0xFF).to(torch.uint8)


def _device_paths(levels: list[Any], indices: list[int]) -> dict[int, list[bytes]]:
    """The Merkle path (`compute.proof.merkle_path`) of each leaf index, from a tree on the
    device: the siblings each level holds, copied to the host one level at a time."""
    import torch

    from compute import sha256  # Triton and torch: only a GPU node commits here

    paths: dict[int, list[bytes]] = {index: [] for index in indices}
    for depth, level in enumerate(levels[:-1]):
        width = level.shape[1]
        siblings = {index: (index >> depth) ^ 1 for index in indices}
        present = sorted({s for s in siblings.values() if s < width})
        if not present:
            continue
        at = torch.tensor(present, dtype=torch.long, device=level.device)
        found = dict(zip(present, sha256.to_host(level[:, at]), strict=True))
        for index, sibling in siblings.items():
            if sibling < width:
                paths[index].append(found[sibling])
    return paths


# ── the worker ────────────────────────────────────────────────────────────────────


def device_name(device: str) -> str:
    """What the challenge computes on: the GPU's name ("cuda"), or the CPU's model."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_model()


class ChallengeWorker:
    """A node's side of one challenge, as a Ray actor the site places on one of its nodes:
    readied before the seed is sent (torch loaded, the device warmed, on a GPU the commitment's
    kernels compiled), then it computes and commits, keeps the checkpoints (on the GPU, where
    it has one), and opens the rows the oracle asks for."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.prover: Prover | DeviceProver | None = None  # once committed
        if device == "cuda":
            import torch

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
        if self.prover is None:
            raise ComputeError("nothing was committed to on this node: send the seed first.")
        return [opening_as_json(o) for o in self.prover.open(cells)]


def gpu_identity() -> dict[str, Any] | None:
    """NVML's identity of the GPU this process was given (the first CUDA_VISIBLE_DEVICES entry)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    found = identity(visible)
    return found.as_dict() if found is not None else None


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
