"""Watching pinned work: a job whose provider has no live node left, or that runs past its
timeout, is stopped within a few seconds instead of waiting for nodes that will not come.

Ray would otherwise keep a job pending forever: its work is pinned to the provider's
nodes, and no other node may take it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import ray

from compute.context import in_place_provider
from compute.errors import ComputeError, JobTimedOut, ProviderFault
from compute.jobs import ComputeJob
from compute.placement import provider_capacity, provider_resource, task_options
from compute.ray_private import ControllerCallback, abort_train_controller, placement_group

POLL_S = 1.0
ABORT_GRACE_S = 10.0
T = TypeVar("T")


def provider_gone(provider: str) -> bool:
    """True when the cluster lists no live node for `provider` (a failed read counts as alive)."""
    try:
        return provider_capacity(provider).nodes == 0
    except Exception:  # noqa: BLE001 -- the GCS may be briefly unreachable; the next poll decides
        return False


def lost_provider(job: ComputeJob) -> ProviderFault:
    return ProviderFault(
        job.provider,
        f"job {job.job_id} stopped: provider {job.provider} has no live nodes left; "
        "post the job again to run it on another provider.",
    )


def timed_out(job: ComputeJob) -> JobTimedOut:
    return JobTimedOut(
        f"job {job.job_id} ran past its timeout of {job.timeout_s:g} s and was stopped; "
        "raise timeout_s or make the job smaller."
    )


def failure_for(job: ComputeJob, started: float) -> ComputeError | None:
    """Why a job's work stopped, if the provider or the clock explains it."""
    if provider_gone(job.provider):
        return lost_provider(job)
    if time.monotonic() - started >= job.timeout_s:
        return timed_out(job)
    return None


class ProviderWatch(ControllerCallback):
    """Runs inside the Ray Train controller and stops it once the provider has no live
    node or the job's deadline passes; the driver's `fit()` then raises, and the runner
    turns that into a ProviderFault or a timeout error.

    The controller blocks its own event loop while it waits for workers to be placed,
    so the watch runs on a thread. For a lost provider it ends the actor with `ray.kill`
    (its workers die with it) and removes the placement groups pinned to the provider,
    which could never be placed again. Past the deadline, when training is running, it
    asks for `abort()` first, which stops the workers and frees their resources.
    """

    def __init__(self, provider: str, deadline: float, poll_s: float = POLL_S) -> None:
        self.provider = provider
        self.deadline = deadline  # time.time() of the job's timeout
        self.poll_s = poll_s
        self._done: threading.Event | None = None

    def __getstate__(self) -> dict[str, Any]:  # sent to the controller before it starts: no Event yet
        return {k: v for k, v in self.__dict__.items() if k != "_done"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _done=None)

    def after_controller_start(self, train_run_context: Any) -> None:
        self._done = threading.Event()
        controller = ray.get_runtime_context().current_actor
        threading.Thread(target=self._watch, args=(controller, self._done), daemon=True,
                         name="swarm-provider-watch").start()

    def after_controller_finish(self, result: Any) -> None:
        if self._done is not None:
            self._done.set()

    def _watch(self, controller: Any, done: threading.Event) -> None:
        while not done.wait(self.poll_s):
            if provider_gone(self.provider):
                # Killed first, so that it cannot ask for a new placement group; the ones it
                # asked for can never be placed again, and Ray would keep them pending.
                ray.kill(controller, no_restart=True)
                release_placement_groups(self.provider)
                return
            if time.time() >= self.deadline:
                # Training (not placement) is running, so the controller can abort cleanly.
                stopping = abort_train_controller(controller)
                ray.wait([stopping], timeout=ABORT_GRACE_S)
                ray.kill(controller, no_restart=True)
                return


def release_placement_groups(provider: str) -> None:
    """Removes every placement group that asks for `provider`'s nodes."""
    resource = provider_resource(provider)
    for pg_id, table in ray.util.placement_group_table().items():
        if table["state"] != "REMOVED" and any(resource in b for b in table["bundles"].values()):
            ray.util.remove_placement_group(placement_group(pg_id))


def await_pinned(ref: ray.ObjectRef, job: ComputeJob, started: float) -> Any:
    """`ray.get(ref)` for a task pinned to the job's provider, stopped (and the task
    cancelled) if the provider loses its last node or the job's timeout passes."""
    while True:
        ready, _ = ray.wait([ref], timeout=POLL_S)
        if ready:
            try:
                return ray.get(ref)
            except (ray.exceptions.RayTaskError, ray.exceptions.WorkerCrashedError,
                    ray.exceptions.NodeDiedError, ray.exceptions.TaskCancelledError) as error:
                failure = failure_for(job, started)
                if failure is not None:
                    raise failure from error
                raise
        failure = failure_for(job, started)
        if failure is not None:
            ray.cancel(ref, force=True)
            raise failure


@functools.cache
def _remote(function: Callable[..., Any]) -> Any:
    return ray.remote(function)


def on_provider(function: Callable[..., T], job: ComputeJob, started: float, *args: Any) -> T:
    """`function(*args)`, the one task of `job`, on one of its provider's nodes with a GPU when
    the job uses one: a Ray task pinned there and watched (`await_pinned`), or, `in_place`
    (`compute.context`), called in this process, which its lease's sandbox times and stops."""
    if in_place_provider() is not None:
        return function(*args)
    options = task_options(job.provider, num_gpus=1 if job.use_gpu else 0)
    return await_pinned(_remote(function).options(**options).remote(*args), job, started)
