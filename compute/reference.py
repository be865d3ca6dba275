"""Reference fp32 matmul throughput per GPU model, for the benchmark challenge's verdict.

Peak figures are the vendors' datasheet FP32 (non-tensor-core) TFLOPS. A matmul of the
challenge's size reaches only part of peak, so the reference is peak × ACHIEVED_FRACTION
(0.5: dense SGEMM of n≈1024 reaches roughly half of datasheet peak, less on the Ada and
Ampere consumer parts whose peak counts dual-issue FP32). A node measuring under half its
declared model's reference (a quarter of peak) is flagged as misdeclared.
"""

from __future__ import annotations

import re

from compute.errors import ComputeError

ACHIEVED_FRACTION = 0.5

# Vendor peak FP32 TFLOPS (datasheets):
PEAK_FP32_TFLOPS = {
    "H100": 67.0,    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 67 TFLOPS FP32 (PCIe: 51)
    "A100": 19.5,    # NVIDIA A100 datasheet: 19.5 TFLOPS FP32 (SXM and PCIe)
    "L40S": 91.6,    # NVIDIA L40S datasheet: 91.6 TFLOPS FP32
    "L4": 30.3,      # NVIDIA L4 datasheet: 30.3 TFLOPS FP32
    "RTX4090": 82.6,  # NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090: 82.6 TFLOPS FP32
    "A10": 31.2,     # NVIDIA A10 datasheet: 31.2 TFLOPS FP32
    "T4": 8.1,       # NVIDIA T4 datasheet: 8.1 TFLOPS FP32
    "V100": 15.7,    # NVIDIA V100 datasheet, V100 SXM2: 15.7 TFLOPS FP32 (PCIe: 14)
}

# A machine without a GPU runs the challenge on one CPU core (the task asks for one CPU).
# One core of this project's 2-core AMD EPYC (AVX2 + FMA, no AVX-512) measures 69-86 GFLOPS
# on the challenge (bench/challenge.py, BENCHMARKS.md); 40 is what a modest, older AVX2 core
# reaches, so an honest CPU node passes (flagged only under 20).
CPU_REFERENCE_GFLOPS = 40.0

REFERENCE_GFLOPS = {model: tflops * 1000 * ACHIEVED_FRACTION for model, tflops in PEAK_FP32_TFLOPS.items()}
REFERENCE_GFLOPS["cpu"] = CPU_REFERENCE_GFLOPS
MODELS = tuple(REFERENCE_GFLOPS)


def normalize_model(name: str) -> str:
    """The table key for a model name as NVML or a provider writes it ("NVIDIA H100 80GB HBM3" → "H100")."""
    tokens = re.findall(r"[A-Z0-9]+", name.upper())
    # Whole tokens only ("NVIDIA L40" is not an L4), and adjacent pairs for "RTX 4090".
    for candidate in tokens + [a + b for a, b in zip(tokens, tokens[1:])]:
        if candidate == "CPU":
            return "cpu"
        if candidate in PEAK_FP32_TFLOPS:
            return candidate
    raise ComputeError(f"no reference throughput for GPU model {name!r}; declare one of {', '.join(MODELS)}.")


def reference_gflops(declared_model: str) -> float:
    """Fp32 matmul GFLOPS the challenge should measure on `declared_model`."""
    return REFERENCE_GFLOPS[normalize_model(declared_model)]
