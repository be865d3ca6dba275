"""Where a job's tensors live and in what precision they compute: the runners' and the Hugging
Face helpers' one place for it.

A job that holds a GPU computes on it or not at all: where CUDA sees none (a lease whose
devices the site did not bind, a node whose driver is gone), it fails, and says so, rather
than computing on the CPU while it is billed GPU-seconds."""

from __future__ import annotations

import os

import torch

from compute.errors import ComputeError
from core.hardware import cpu_model


def task_device(use_gpu: bool) -> torch.device:
    """Where a runner's Ray task computes: the GPU Ray gave it (a job with use_gpu), else the CPU.
    ComputeError when the task holds a GPU that CUDA does not show it."""
    if not use_gpu:
        return torch.device("cpu")
    require_cuda()
    return torch.device("cuda")


def require_cuda() -> None:
    """Raises ComputeError, in one sentence, where this process was given a GPU that CUDA cannot see."""
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        given = "CUDA_VISIBLE_DEVICES is " + (repr(visible) if visible is not None else "unset")
        raise ComputeError(f"the job holds a GPU but CUDA sees none where it runs ({given}); "
                           "the provider's node did not give it the GPU it reserved.")


def device_name(device: torch.device) -> str:
    """What the job computed on, as its metrics say it: the GPU's name, or the CPU's model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """bf16 autocast on `device` for precision "bf16"; a no-op context for "fp32"."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
