"""The GPU paths, on a real CUDA device: the challenge exact in every precision on the
tensor cores, the worker's NVML identity and VRAM touch, NVML telemetry with every field
read, and training, fine-tuning and inference on CUDA under bf16 autocast, placed by Ray on
a node that has the GPU.

Every test here is marked `gpu`: it runs wherever a CUDA device is present, and elsewhere
the run's summary says how many did not run and why (tests/conftest.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from anvil import dev_account
from compute.challenge import VRAM_SHARE, Challenge, Declared, identity_problem
from compute.challenge_node import checkpoints_of, gpu_identity, ready_worker, touch_vram
from compute.proof import check, opening_from_json, root_from_hex, sample
from compute.reference import normalize_model

pytestmark = pytest.mark.gpu

GPU_PROVIDER = dev_account(8).address
MIB = 1 << 20


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_challenge_is_exact_on_the_gpu_in_every_precision(precision: str) -> None:
    challenge = Challenge(seed=5, size=1024, rounds=4, precision=precision)
    on_gpu = checkpoints_of(challenge, "cuda")
    on_cpu = checkpoints_of(replace(challenge, precision="fp32"), "cpu")
    assert len(on_gpu) == 4 and all(np.array_equal(g, c) for g, c in zip(on_gpu, on_cpu, strict=True))


def test_the_half_precision_product_runs_on_the_tensor_cores_with_fp32_output() -> None:
    """The challenge's bf16 and fp16 rounds use cuBLAS's half-input, fp32-output GEMM; were it
    missing, they would fall back to fp32 and the GPU would be judged slow."""
    import torch

    b = torch.full((256, 256), 16.0, device="cuda")
    for half in (torch.bfloat16, torch.float16):
        out = torch.mm(b.to(half), b.to(half), out_dtype=torch.float32)
        assert out.dtype == torch.float32 and float(out[0, 0]) == 256 * 256.0  # exact, above half's range


def test_the_worker_reports_its_gpu_as_nvml_names_it_and_touches_the_declared_vram() -> None:
    import torch

    found = gpu_identity()
    assert found is not None and found["uuid"].startswith(("GPU-", "MIG-"))
    assert found["name"] == torch.cuda.get_device_name(0)
    total_mb = torch.cuda.get_device_properties(0).total_memory / MIB
    assert found["memory_total_mb"] == pytest.approx(total_mb, rel=0.01)
    assert touch_vram(1024) == pytest.approx(1024 * VRAM_SHARE, abs=1)
    assert touch_vram(total_mb * 4) == 0.0  # more than the GPU has: refused, reported as nothing
    declared_gb = total_mb * MIB / 1e9 * 0.95
    ready = {"device": "cuda", "identity": found, "vram_touched_mb": touch_vram(declared_gb * 1e9 / MIB)}
    assert (
        identity_problem(Declared(normalize_model(found["name"]), declared_gb, (found["uuid"],)), ready)
        is None
    )


def test_nvml_telemetry_reads_every_field_of_the_gpu() -> None:
    from compute.nvml import gpu_snapshot

    snapshot = gpu_snapshot()
    assert snapshot.gpus >= 1 and snapshot.error is None
    reading = snapshot.devices[0]
    assert reading.utilization_pct is not None and 0 <= reading.utilization_pct <= 100
    assert reading.memory_used_mb is not None and reading.memory_total_mb is not None
    assert 0 < reading.memory_used_mb <= reading.memory_total_mb
    assert reading.temperature_c is not None and 0 < reading.temperature_c < 110
    assert reading.power_w is not None and reading.power_w > 0


@pytest.fixture(scope="module")
def gpu_node(ray_cluster):
    """A node of the session's Ray cluster with this machine's GPU, for GPU_PROVIDER."""
    from compute.placement import node_labels, node_resources

    node = ray_cluster.cluster.add_node(num_cpus=2, num_gpus=1, labels=node_labels(GPU_PROVIDER),
                                        resources=node_resources(GPU_PROVIDER), object_store_memory=80 * MIB)
    ray_cluster.cluster.wait_for_nodes()
    yield node
    ray_cluster.cluster.remove_node(node)


def test_a_challenge_worker_on_a_gpu_node_proves_a_bf16_challenge(gpu_node) -> None:
    import ray

    challenge = Challenge(seed=11, size=2048, rounds=8, precision="bf16")
    worker, answer = ready_worker(GPU_PROVIDER, timeout_s=120, vram_mb=1024)
    try:
        assert answer["device"] == "cuda" and answer["gpus"] >= 1
        assert answer["identity"]["name"] and answer["vram_touched_mb"] == pytest.approx(
            1024 * VRAM_SHARE, abs=1
        )
        answer = ray.get(worker.commit.remote({**challenge.params(), "seed": challenge.seed}))
        root = answer["root"]
        assert answer["rounds_s"] > 0 and answer["commit_s"] > 0, "the node times both"
        cells = sample(challenge)
        openings = ray.get(worker.open.remote(cells))
    finally:
        ray.kill(worker)
    check(challenge, root_from_hex(root), cells, [opening_from_json(o) for o in openings])


def test_train_finetune_infer_and_tune_run_on_cuda(gpu_node, tmp_path: Path) -> None:
    from compute.data import load_dataset
    from compute.dispatch import run_job
    from compute.jobs import ComputeJob

    def job(job_id: str, kind: str, **params) -> ComputeJob:
        return ComputeJob.of(
            job_id=job_id,
            kind=kind,
            provider=GPU_PROVIDER,
            storage=str(tmp_path),
            timeout_s=600,
            use_gpu=True,
            seed=3,
            params=params | {"precision": "bf16"},
        )

    import torch

    name = torch.cuda.get_device_name(0)
    trained = run_job(job("gpu-train", "train", model="mlp", samples=512, epochs=2))
    assert trained.unit == "gpu-seconds" and trained.metrics["compute_dtype"] == "bfloat16"
    assert trained.metrics["device_name"] == name
    tuned = run_job(job("gpu-finetune", "finetune", base_checkpoint=trained.result_dir, epochs=1))
    assert tuned.metrics["device"] == "cuda" and tuned.unit == "gpu-seconds"
    assert tuned.metrics["device_name"] == name
    inputs, _ = load_dataset("synthetic-classification", 9, n=64)
    np.save(tmp_path / "inputs.npy", inputs.numpy())
    inferred = run_job(
        job("gpu-infer", "infer", checkpoint=tuned.result_dir, dataset_path=str(tmp_path / "inputs.npy"))
    )
    assert inferred.metrics["device"] == "cuda" and inferred.metrics["count"] == 64
    assert inferred.metrics["device_name"] == name
    search = ComputeJob.of(job_id="gpu-tune", kind="tune", provider=GPU_PROVIDER, storage=str(tmp_path),
                           timeout_s=600, use_gpu=True, seed=3,
                           params={"model": "mlp", "samples": 256, "num_samples": 2,
                                   "max_epochs_per_trial": 1, "search_space": {"lr": {"grid": [1e-3, 1e-2]}}})
    searched = run_job(search)
    assert searched.unit == "gpu-seconds" and searched.metrics["device_name"] == name
