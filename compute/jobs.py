"""What the market hands the compute side, what it gets back, and the dispatch between.

`run_job` validates a job before any Ray work — unknown kind, zero workers, more
workers than the provider's nodes have — then runs it on that provider's nodes only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
import os
from pathlib import Path
from typing import Any

from compute.errors import InvalidJob
from compute.placement import ProviderCapacity, provider_capacity

KINDS = ("train", "finetune", "infer", "tune")


@dataclass(frozen=True)
class ComputeJob:
    """One job for one provider. `params` are the kind's own settings (see each runner)."""

    job_id: str
    kind: str
    provider: str  # the provider's address; its nodes carry the label provider=<address>
    workers: int = 1
    seed: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    storage: str = ""  # result storage: a local directory or any pyarrow filesystem URI
    use_gpu: bool = False
    timeout_s: float = 3_600.0  # a job that runs longer is stopped and fails

    def result_dir(self) -> Path:
        """The local directory for this job's results (outputs/ plus bookkeeping).

        With a URI storage, checkpoints go to the URI and the outputs to $SWARM_HOME/results.
        """
        if self.storage and "://" not in self.storage:
            return Path(self.storage) / self.job_id
        return Path(os.environ.get("SWARM_HOME", ".swarm")) / "results" / self.job_id


@dataclass(frozen=True)
class JobResult:
    job_id: str
    kind: str
    provider: str
    metrics: dict[str, Any]
    result_dir: str
    result_hash: str  # 0x sha256 of the outputs' canonical manifest
    units: float  # GPU-seconds, or CPU-seconds where there is no GPU
    unit: str  # "gpu-seconds" | "cpu-seconds"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(job: ComputeJob) -> None:
    """Checks that need no cluster: kind, workers, ids."""
    if job.kind not in KINDS:
        raise InvalidJob(f"unknown job kind {job.kind!r}; choose one of {', '.join(KINDS)}.")
    if not isinstance(job.workers, int) or job.workers < 1:
        raise InvalidJob(f"workers must be at least 1, got {job.workers!r}.")
    if not job.job_id or "/" in job.job_id:
        raise InvalidJob(f"job id {job.job_id!r} must be non-empty and contain no '/'.")
    if job.timeout_s <= 0:
        raise InvalidJob(f"timeout must be positive, got {job.timeout_s}.")


def check_capacity(job: ComputeJob) -> ProviderCapacity:
    """Reads the cluster's node table (no tasks): the provider must have room for the workers."""
    capacity = provider_capacity(job.provider)
    if capacity.nodes == 0:
        raise InvalidJob(f"provider {job.provider} has no live nodes in the cluster; it must join first.")
    if job.workers > capacity.max_workers:
        raise InvalidJob(
            f"job {job.job_id} asks for {job.workers} workers but provider {job.provider} has room for "
            f"{capacity.max_workers} ({capacity.nodes} nodes); ask for at most {capacity.max_workers}."
        )
    return capacity


Runner = Callable[[ComputeJob], JobResult]


def run_job(job: ComputeJob) -> JobResult:
    """Validates `job`, then runs it on its provider's nodes and returns its result. Only the
    runner of its kind is imported (finetune's brings in peft, tune's Ray Tune and Optuna)."""
    import importlib

    validate(job)
    check_capacity(job)
    run: Runner = importlib.import_module(f"compute.runners.{job.kind}").run
    return run(job)
