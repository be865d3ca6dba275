"""Inside a lease's sandbox: the job on a Ray instance of the lease's own, or in this process.

`python -m provider.lease.worker WORK` reads the sandbox's copy of the lease's plan (without its
verdict key) from its environment, which the site set, and runs its job in WORK: a built-in
kind through `compute.jobs.run_job`, a `ray` job through `compute.runners.program`. The
lease's Ray is one node with exactly the CPUs and GPUs the lease reserved, on a loopback the
sandbox does not share, so nothing the lease runs can reach the site's cluster, whose Ray API
would let it schedule work outside the sandbox. An `infer` or a `finetune` job, one task, and
a `train` job of one worker (`compute.jobs.runs_in_place`) start no Ray: each runs in this
process (`compute.jobs.in_place`), its math on as many threads as the lease has CPUs, as Ray
sets them for a task or a worker. A built-in job's report (`run.json`) gives its
result directory and metrics; the launcher, outside, hashes the outputs and meters the units
itself.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from compute.node import WORKER_NICENESS
from provider.lease import PLAN_ENV, RUN
from provider.lease.outcome import write_json
from provider.lease.plan import LeasePlan

LEASE_OBJECT_STORE_BYTES = 80 * 2**20  # Ray's smallest is 75 MiB
# Of the memory a lease holds, the share its Ray's object store may use: Ray Data streams a
# dataset through it, and a store much smaller than the batches in flight spills to disk.
OBJECT_STORE_SHARE = 0.2
RAY_START_ATTEMPTS = 2  # the lease's own Ray, started again once if a loaded machine was too slow
# The lease's Ray collects no metrics, which no one reads from a Ray that lives only as long as the
# lease. (It keeps Ray's default for idle workers: every worker it keeps counts against the
# lease's memory.)
LEASE_RAY_CONFIG = {"enable_metrics_collection": False, "worker_niceness": WORKER_NICENESS}


def start_ray(plan: LeasePlan) -> Any:
    """The lease's own Ray instance: one node with exactly the lease's CPUs and GPUs, on the
    sandbox's loopback; its processes end with the sandbox."""
    import ray

    from compute.placement import node_labels, node_resources
    from compute.ray_private import init_local_node

    provider = plan.job.provider
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            return init_local_node(num_cpus=max(1, math.ceil(plan.cpus)), num_gpus=math.ceil(plan.gpus),
                                   resources=node_resources(provider) if provider else None,
                                   labels=node_labels(provider) if provider else None,
                                   object_store_memory=object_store_bytes(plan), node_ip_address="127.0.0.1",
                                   temp_dir="/tmp/ray", system_config=LEASE_RAY_CONFIG)
        except Exception as exc:  # Ray gives its raylet 30 s to register, which a loaded machine can miss
            ray.shutdown()
            if attempt == RAY_START_ATTEMPTS or "timed out during startup" not in str(exc):
                raise
            print(f"the lease's Ray did not start in time ({exc}); starting it again", flush=True)
    raise AssertionError("unreachable")


def object_store_bytes(plan: LeasePlan) -> int:
    return max(LEASE_OBJECT_STORE_BYTES, int(plan.memory_bytes * OBJECT_STORE_SHARE))


def run_built_in(plan: LeasePlan, work: Path) -> None:
    from compute.jobs import in_place, run_job, runs_in_place

    job = plan.in_lease(work)
    if runs_in_place(job):
        # As Ray sets it for a task or a Train worker: torch's threads are the lease's CPUs.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, math.ceil(plan.cpus))))
        with in_place(job.provider):
            result = run_job(job)
    else:
        import ray

        start_ray(plan)
        try:
            result = run_job(job)
        except BaseException:
            ray.shutdown()
            raise
    write_json(work / RUN, {"result_dir": result.result_dir, "units": result.units,
                            "metrics": _jsonable(result.metrics)})


def run_program(plan: LeasePlan, work: Path) -> int:
    from compute.runners import program

    assert plan.program is not None
    return program.run(plan.program, work, lambda: start_ray(plan).address_info["gcs_address"])


def _jsonable(value: Any) -> Any:
    """Metrics as JSON has them: a number that is not finite is null, anything else not JSON its text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m provider.lease.worker WORK", file=sys.stderr)
        return 2
    work = Path(argv[0])
    plan = LeasePlan.decode(os.environ[PLAN_ENV])
    if plan.program is not None:
        code = run_program(plan, work)
    else:
        run_built_in(plan, work)
        code = 0
    # Done: the sandbox's PID namespace ends the lease's Ray with this process, at once, so the
    # result does not wait for a graceful shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
