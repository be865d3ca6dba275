"""The hardware a provider declares: the GPU models Swarm knows, by the names the chain's
hardware spec carries (`ledger.stake.HardwareSpec`) and the oracle's references are kept under
(`compute.reference`, one figure per model and precision), and `cpu` for a machine without one;
and the CPU model of the machine this runs on, as a job's metrics and a challenge's worker name it."""

from __future__ import annotations

import itertools
import platform
import re

GPU_MODELS = ("H100", "H200", "A100", "L40S", "L4", "RTX4090", "A10", "T4", "V100")
CPU = "cpu"
MODELS = (*GPU_MODELS, CPU)


def model_of(name: str) -> str | None:
    """The model a name denotes, as NVML or a provider writes it ("NVIDIA H100 80GB HBM3" → "H100");
    None for a model Swarm does not know."""
    tokens = re.findall(r"[A-Z0-9]+", name.upper())
    # Whole tokens only ("NVIDIA L40" is not an L4), and adjacent pairs for "RTX 4090".
    for candidate in tokens + [a + b for a, b in itertools.pairwise(tokens)]:
        if candidate == CPU.upper():
            return CPU
        if candidate in GPU_MODELS:
            return candidate
    return None


def cpu_model() -> str:
    """This machine's CPU model, as the kernel names it ("AMD EPYC 7763 64-Core Processor")."""
    try:  # Linux names the CPU model here; platform.processor() often says only "x86_64"
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"
