"""Units a job used: GPU-seconds, or CPU-seconds where there is no GPU.

A unit is one device (a GPU, or else a CPU) busy for one second. A job's units are the
sum over its workers of the wall time each spent working — measured inside the worker,
so time spent queueing for a node or starting Ray is not billed. Work lost when a node
dies (after the last checkpoint) is not billed either: runners count checkpointed work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

GPU_SECONDS = "gpu-seconds"
CPU_SECONDS = "cpu-seconds"


def unit_name(use_gpu: bool) -> str:
    return GPU_SECONDS if use_gpu else CPU_SECONDS


@dataclass(frozen=True)
class Usage:
    amount: float
    unit: str


def usage(busy_seconds: Iterable[float], use_gpu: bool, devices_per_worker: float = 1.0) -> Usage:
    """Units for workers that were busy `busy_seconds` each, with `devices_per_worker` devices."""
    return Usage(round(sum(busy_seconds) * devices_per_worker, 6), unit_name(use_gpu))


class BusyTimer:
    """Wall time a worker spends inside `with timer:` blocks, summed over the blocks."""

    def __init__(self, already: float = 0.0) -> None:
        self.seconds = already
        self._started: float | None = None

    def __enter__(self) -> Self:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        started, self._started = self._started, None
        if started is not None:  # always, after __enter__
            self.seconds += time.perf_counter() - started
