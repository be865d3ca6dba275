"""Where a job's tensors live and in what precision they compute: the runners' and the Hugging
Face helpers' one place for it."""

from __future__ import annotations

import torch


def task_device(use_gpu: bool) -> torch.device:
    """Where a runner's Ray task computes: the GPU Ray gave it (a job with use_gpu), else the CPU."""
    return torch.device("cuda") if use_gpu and torch.cuda.is_available() else torch.device("cpu")


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """bf16 autocast on `device` for precision "bf16"; a no-op context for "fp32"."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
