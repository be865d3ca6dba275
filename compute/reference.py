"""Reference matmul throughput per GPU model and precision, for the benchmark challenge's verdict.

Two precisions per GPU model: fp32 (every model) and the half-precision tensor-core matmul
buyers train in, with fp32 accumulation — bf16 where the model has it, fp16 on T4 and V100,
which have no bf16. A CPU has fp32 only. Peak figures are the vendors' datasheet TFLOPS,
dense (without sparsity). A matmul of the challenge's size reaches only part of peak, so the
reference is peak × ACHIEVED_FRACTION (0.5: dense SGEMM of n≈1024 reaches roughly half of
datasheet peak, less on the Ada and Ampere consumer parts whose peak counts dual-issue FP32).
A node measuring under half its declared model's reference (a quarter of peak) in any
precision is flagged as misdeclared.

A GPU model measured on the challenge takes its reference from that measurement instead:
the node's throughput at the oracle's shape (bench/gpu.py, `make bench-gpu`) × GPU_MARGIN.
So far that is the H200 alone; the other GPU references are projections from datasheets. The
CPU reference is one core of the machine that runs the oracle, timed on the challenge by
`make cpu-reference` (oracle/cpu_reference.py), × CPU_MARGIN. Where that measurement is
missing there is no CPU reference, and the oracle refuses to start (CpuReferenceMissing)
rather than judge CPU nodes against a number nobody measured.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from compute.errors import ComputeError
from core.hardware import MODELS, model_of

ACHIEVED_FRACTION = 0.5

# Vendor peak FP32 TFLOPS (datasheets):
PEAK_FP32_TFLOPS = {
    "H100": 67.0,    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 67 TFLOPS FP32 (PCIe: 51)
    "H200": 67.0,    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 67 TFLOPS FP32 (NVL: 60)
    "A100": 19.5,    # NVIDIA A100 datasheet: 19.5 TFLOPS FP32 (SXM and PCIe)
    "L40S": 91.6,    # NVIDIA L40S datasheet: 91.6 TFLOPS FP32
    "L4": 30.3,      # NVIDIA L4 datasheet: 30.3 TFLOPS FP32
    "RTX4090": 82.6,  # NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090: 82.6 TFLOPS FP32
    "A10": 31.2,     # NVIDIA A10 datasheet: 31.2 TFLOPS FP32
    "T4": 8.1,       # NVIDIA T4 datasheet: 8.1 TFLOPS FP32
    "V100": 15.7,    # NVIDIA V100 datasheet, V100 SXM2: 15.7 TFLOPS FP32 (PCIe: 14)
}

# A machine without a GPU runs the challenge on one CPU core (the task asks for one CPU). What
# one core of the oracle's machine measures is a build output of its checkout, like the
# contracts' artifacts: under build/, git-ignored since each machine measures its own core, and
# not under SWARM_HOME, since every oracle on the machine (a devnet's, each test's) shares it.
CPU_MEASUREMENT = Path(__file__).resolve().parents[1] / "build" / "cpu-reference.json"
# The reference is half that core: an honest node on a core like the oracle's measures 2× the
# reference, and is flagged (under 0.5×) only at a quarter of that core — a core four times
# slower, or four challenges on one core. The 40 GFLOPS once hard-coded was about half of this
# project's own core, so the margin keeps the clearance honest nodes had.
CPU_MARGIN = 0.5

# Vendor peak half-precision tensor-core TFLOPS with fp32 accumulation, dense, and the precision:
PEAK_TENSOR_TFLOPS = {
    "H100": ("bf16", 989.4),   # H100 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (PCIe: 1,513)
    "H200": ("bf16", 989.4),   # H200 datasheet, SXM: 1,979 TFLOPS BF16 with sparsity (NVL: 1,671)
    "A100": ("bf16", 312.0),   # A100 datasheet: 312 TFLOPS BF16 (624 with sparsity)
    "L40S": ("bf16", 362.05),  # L40S datasheet: 362.05 TFLOPS BF16 (733 with sparsity)
    "L4": ("bf16", 121.0),     # L4 datasheet: 242 TFLOPS BF16 with sparsity
    "RTX4090": ("bf16", 165.2),  # Ada whitepaper, RTX 4090: 165.2 TFLOPS BF16 with FP32 accumulate
    "A10": ("bf16", 125.0),    # A10 datasheet: 125 TFLOPS BF16 (250 with sparsity)
    "T4": ("fp16", 65.0),      # T4 datasheet: 65 TFLOPS mixed precision (FP16/FP32); no bf16
    "V100": ("fp16", 125.0),   # V100 datasheet, SXM2: 125 TFLOPS tensor (FP16/FP32); no bf16
}

# Measured on the challenge at the oracle's shape (bench/gpu.py --runs 3, the node's throughput:
# rounds and the commitment on the GPU; medians of 3), TFLOPS per precision:
MEASURED_TFLOPS = {
    # NVIDIA H200 (141 GB, NVML: "NVIDIA H200"), torch 2.11 with CUDA 13.0, driver 580, 2026-11-28:
    # fp32 8192 × 62 / 2 → 39.36 (1.18 × the datasheet projection), bf16 8192 × 928 / 29 → 463.0 (0.94 ×).
    "H200": {"fp32": 39.36, "bf16": 463.0},
}
# A measured model's reference is 0.8 of what one board measured: the H200 NVL's datasheet peaks
# are 0.84 (bf16) and 0.90 (fp32) of the SXM's, and boards, clocks and cooling differ, so an
# honest H200 of either kind measures about 1.05–1.25 × the reference; one flagged as
# misdeclared (under 0.5 ×) computes under 0.4 × the board measured.
GPU_MARGIN = 0.8

PRECISIONS = ("fp32", "bf16", "fp16")


def _reference(model: str, precision: str, peak_tflops: float) -> float:
    measured = MEASURED_TFLOPS.get(model, {}).get(precision)
    return measured * 1000 * GPU_MARGIN if measured else peak_tflops * 1000 * ACHIEVED_FRACTION


REFERENCE_GFLOPS = {model: _reference(model, "fp32", tflops) for model, tflops in PEAK_FP32_TFLOPS.items()}
TENSOR_REFERENCE_GFLOPS = {model: _reference(model, precision, tflops)
                           for model, (precision, tflops) in PEAK_TENSOR_TFLOPS.items()}


class CpuReferenceMissing(ComputeError):
    """This machine holds no measurement of its CPU core, so there is no CPU reference."""


def normalize_model(name: str) -> str:
    """The table key for a model name as NVML or a provider writes it ("NVIDIA H100 80GB HBM3" → "H100")."""
    model = model_of(name)
    if model is None:
        raise ComputeError(f"no reference throughput for GPU model {name!r}; declare one of "
                           f"{', '.join(MODELS)}.")
    return model


def reference_gflops(declared_model: str, precision: str = "fp32") -> float:
    """Matmul GFLOPS the challenge should measure on `declared_model` in `precision`."""
    model = normalize_model(declared_model)
    if precision == "fp32":
        return cpu_reference_gflops() if model == "cpu" else REFERENCE_GFLOPS[model]
    if model in PEAK_TENSOR_TFLOPS and PEAK_TENSOR_TFLOPS[model][0] == precision:
        return TENSOR_REFERENCE_GFLOPS[model]
    raise ComputeError(
        f"{model} has no {precision} reference; its precisions are {', '.join(precisions(model))}."
    )


def precisions(declared_model: str) -> tuple[str, ...]:
    """The precisions the oracle challenges a model in: fp32, and its tensor-core precision."""
    model = normalize_model(declared_model)
    return ("fp32", PEAK_TENSOR_TFLOPS[model][0]) if model in PEAK_TENSOR_TFLOPS else ("fp32",)


def cpu_reference_gflops() -> float:
    """The CPU reference: this machine's measured core × CPU_MARGIN, read once per process."""
    return _cpu_reference(CPU_MEASUREMENT)


@functools.cache
def _cpu_reference(path: Path) -> float:
    return read_cpu_measurement(path) * CPU_MARGIN


def read_cpu_measurement(path: Path = CPU_MEASUREMENT) -> float:
    """The GFLOPS one core measured on the challenge, as oracle/cpu_reference.py wrote them to
    `path`; CpuReferenceMissing, in one sentence that names the fix, when there is no such figure."""
    fix = f"run `make cpu-reference` (a few seconds on one core), which writes {path}"
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        raise CpuReferenceMissing(
            f"The CPU reference has not been measured on this machine: {fix}."
        ) from None
    except (OSError, ValueError) as exc:
        raise CpuReferenceMissing(f"The CPU measurement {path} cannot be read ({exc}): {fix}.") from None
    gflops = found.get("gflops") if isinstance(found, dict) else None
    if isinstance(gflops, bool) or not isinstance(gflops, (int, float)) or not math.isfinite(gflops) \
            or gflops <= 0:
        raise CpuReferenceMissing(f"The CPU measurement {path} holds no positive GFLOPS figure: {fix}.")
    return float(gflops)
