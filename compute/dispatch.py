"""Running a built-in job (`compute.jobs.ComputeJob`) with its kind's runner.

`run_job` validates the job before any Ray work — zero workers, more workers than the
provider's nodes have — then runs it on that provider's nodes only. A job whose work is one
process (`runs_in_place`: one task, or a train run of one worker) may instead run in the
caller's own process, within `compute.context.in_place`, which a lease is: on one of the
provider's nodes with the devices the job holds. Only the runner of the job's kind is imported:
finetune's brings in peft, tune's Ray Tune and Optuna, every one torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from compute.context import in_place_provider
from compute.errors import InvalidJob
from compute.jobs import BUILT_IN, ONE_TASK_KINDS, ComputeJob, JobResult, validate
from compute.placement import ProviderCapacity, provider_capacity
from compute.runners.params import TrainParams

Runner = Callable[[ComputeJob], JobResult]


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


def runs_in_place(job: ComputeJob) -> bool:
    """Whether a lease runs `job` in its own process, with no Ray to start: a one-task kind, or a
    train run of one worker (`compute.runners.train.one_process`)."""
    if job.kind in ONE_TASK_KINDS:
        return True
    if job.kind != TrainParams.KIND:
        return False
    # Here, not above: the train runner loads torch and Ray Train, which only a train job's dispatch needs.
    from compute.runners.train import one_process

    return one_process(job)


def run_job(job: ComputeJob) -> JobResult:
    """Validates a built-in `job`, then runs it on its provider's nodes (or in place) and returns its
    result. A `ray` job is a buyer's program, which runs in a lease (`provider.lease.worker`)."""
    if job.kind not in BUILT_IN:
        raise InvalidJob(
            f"job {job.job_id} is a {job.kind} job, which runs in a lease, not on a cluster's nodes."
        )
    validate(job)
    here = in_place_provider()
    if here is None:
        check_capacity(job)
    elif here != job.provider or not runs_in_place(job):
        raise InvalidJob(
            f"job {job.job_id} is a {job.kind} job of {job.workers} worker(s) for {job.provider}; only "
            f"{' and '.join(ONE_TASK_KINDS)} jobs and train jobs of one worker run in place, on their "
            "provider's node."
        )
    run: Runner = importlib.import_module(f"compute.runners.{job.kind}").run
    return run(job)
