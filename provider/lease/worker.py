"""Inside a lease's sandbox: the job on a Ray instance of the lease's own, or in this process.

`python -m provider.lease.worker WORK` reads the sandbox's copy of the lease's plan (without its
verdict key) from its environment, which the site set, and runs its job in WORK: a built-in
kind through `compute.dispatch.run_job`, a `ray` job through `compute.runners.program`. The
lease's Ray is one node with exactly the CPUs and GPUs the lease reserved, on a loopback the
sandbox does not share, so nothing the lease runs can reach the site's cluster, whose Ray API
would let it schedule work outside the sandbox. An `infer` or a `finetune` job, one task, and
a `train` job of one worker (`compute.dispatch.runs_in_place`) start no Ray: each runs in this
process (`compute.context.in_place`), its math on as many threads as the lease has CPUs, as Ray
sets them for a task or a worker. A built-in job's report (`run.json`) gives its
result directory and metrics; the launcher, outside, hashes the outputs and meters the units
itself.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute.context import in_place
from compute.dispatch import run_job, runs_in_place
from compute.node import WORKER_NICENESS, RayStart
from compute.placement import node_labels, node_resources
from compute.runners import program
from compute.runners.params import ProgramParams
from compute.runners.program import INTERNAL, PACKAGES
from core import logs
from provider.lease import HEAD_ADDRESS_ENV, NODE_ADDRESS_ENV, PLAN_ENV, RUN
from provider.lease.outcome import write_json
from provider.lease.plan import LeasePlan

if TYPE_CHECKING:  # Ray loads only for a job that runs on the lease's own Ray
    from ray._private.worker import RayContext

LEASE_OBJECT_STORE_BYTES = 80 * 2**20  # Ray's smallest is 75 MiB
# Of the memory a lease holds, the share its Ray's object store may use: Ray Data streams a
# dataset through it, and a store much smaller than the batches in flight spills to disk.
OBJECT_STORE_SHARE = 0.2
RAY_START_ATTEMPTS = 2  # the lease's own Ray, started again once if a loaded machine was too slow
# The lease's Ray collects no metrics, which no one reads from a Ray that lives only as long as the
# lease. (It keeps Ray's default for idle workers: every worker it keeps counts against the
# lease's memory.)
LEASE_RAY_CONFIG = {"enable_metrics_collection": False, "worker_niceness": WORKER_NICENESS}


def start_ray(plan: LeasePlan) -> RayContext:
    """The lease's own Ray instance: one node with exactly the lease's CPUs and GPUs, on the
    sandbox's loopback; its processes end with the sandbox."""
    import ray

    from compute.ray_private import init_local_node  # Ray: a job run in this process never loads it

    provider = plan.job.provider
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        start = RayStart()
        try:
            return init_local_node(num_cpus=max(1, math.ceil(plan.cpus)), num_gpus=math.ceil(plan.gpus),
                                   resources=node_resources(provider) if provider else None,
                                   labels=node_labels(provider) if provider else None,
                                   object_store_memory=object_store_bytes(plan), node_ip_address="127.0.0.1",
                                   temp_dir="/tmp/ray", system_config=LEASE_RAY_CONFIG)
        except Exception as exc:
            slow = start.slow(exc)  # Ray's deadline for its raylet passed while the raylet still started
            ray.shutdown()
            start.stop()
            if attempt == RAY_START_ATTEMPTS or not slow:
                raise
            print(f"the lease's Ray did not start in time ({exc}); starting it again", flush=True)
    raise AssertionError("unreachable")


LEASE_GCS_PORT = 6379  # the lease's Ray head, on its first node's address in the lease's network
GANG_WAIT_S = 60.0  # how long the first node waits for the lease's other nodes to join its Ray


def _ray_node_command(plan: LeasePlan, *where: str) -> list[str]:
    """`ray start` for a node of a lease across nodes: exactly the lease's share of a node, labelled
    and pinned to the provider as the site's own nodes are, with the lease's Ray settings."""
    import json

    provider = plan.job.provider
    command = [str(Path(sys.executable).with_name("ray")), "start", *where,
               "--num-cpus", str(max(1, math.ceil(plan.cpus))), "--num-gpus", str(math.ceil(plan.gpus)),
               "--object-store-memory", str(object_store_bytes(plan)), "--temp-dir", "/tmp/ray",
               "--disable-usage-stats"]
    if provider:
        command += ["--labels", ",".join(f"{k}={v}" for k, v in node_labels(provider).items()),
                    "--resources", json.dumps(node_resources(provider))]
    return command


def _ray_env() -> dict[str, str]:
    """The lease's Ray settings (LEASE_RAY_CONFIG) as Ray reads them from a node's environment."""
    return {f"RAY_{k}": str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in LEASE_RAY_CONFIG.items()}


def start_gang_head(plan: LeasePlan) -> str:
    """The lease's Ray head on its first node, at its address in the lease's network, waiting until
    every other node has joined (or GANG_WAIT_S has passed: the job then fails, said why); this
    process is connected to it as its driver. Returns the head's address."""
    import subprocess
    import time

    import ray

    address = f"{os.environ[HEAD_ADDRESS_ENV]}:{LEASE_GCS_PORT}"
    command = _ray_node_command(plan, "--head", "--node-ip-address", os.environ[HEAD_ADDRESS_ENV],
                                "--port", str(LEASE_GCS_PORT), "--include-dashboard", "false")
    subprocess.run(command, check=True, env=os.environ | _ray_env(), stdout=subprocess.DEVNULL)
    ray.init(address=address)
    deadline = time.monotonic() + GANG_WAIT_S
    while (alive := sum(1 for n in ray.nodes() if n.get("Alive"))) < plan.nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {alive} of the lease's {plan.nodes} nodes joined its Ray within "
                               f"{GANG_WAIT_S:.0f} s")
        time.sleep(0.2)
    print(f"the lease's Ray has its {plan.nodes} nodes", flush=True)
    return address


def join_gang(plan: LeasePlan) -> int:
    """A node of a lease across nodes other than the first: a node of the lease's Ray, joined to the
    first node's head over the lease's network (asked again until the head answers), until the
    lease ends."""
    import subprocess
    import time

    head = f"{os.environ[HEAD_ADDRESS_ENV]}:{LEASE_GCS_PORT}"
    command = _ray_node_command(plan, "--address", head, "--node-ip-address", os.environ[NODE_ADDRESS_ENV],
                                "--block")
    deadline = time.monotonic() + GANG_WAIT_S
    while True:
        started = time.monotonic()
        code = subprocess.run(command, check=False, env=os.environ | _ray_env()).returncode
        if time.monotonic() - started > 30 or time.monotonic() > deadline:
            return code  # it ran (and the lease's Ray ended), or the head never answered
        time.sleep(1.0)


def object_store_bytes(plan: LeasePlan) -> int:
    return max(LEASE_OBJECT_STORE_BYTES, int(plan.memory_bytes * OBJECT_STORE_SHARE))


def run_built_in(plan: LeasePlan, work: Path) -> None:
    job = plan.in_lease(work)
    if runs_in_place(job):
        # As Ray sets it for a task or a Train worker: torch's threads are the lease's CPUs.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, math.ceil(plan.cpus))))
        with in_place(job.provider):
            result = run_job(job)
    else:
        import ray

        if plan.nodes > 1:
            start_gang_head(plan)
        else:
            start_ray(plan)
        try:
            result = run_job(job)
        except BaseException:
            ray.shutdown()
            raise
    write_json(work / RUN, {"result_dir": result.result_dir, "units": result.units,
                            "metrics": _jsonable(result.metrics)})


def run_program(plan: LeasePlan, work: Path) -> int:
    params = plan.job.params_of(ProgramParams)
    if plan.nodes > 1:
        return program.run(params, work, lambda: start_gang_head(plan), outputs=plan.outputs)
    return program.run(params, work, lambda: start_ray(plan).address_info["gcs_address"])


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
    logs.configure(libraries=False)  # the site's verbosity; what the lease prints stays the lease's
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["--join"]):
        print("usage: python -m provider.lease.worker WORK [--join]", file=sys.stderr)
        return 2
    work = Path(argv[0])
    plan = LeasePlan.decode(os.environ[PLAN_ENV])
    if argv[1:] == ["--join"]:
        if plan.program is not None:  # its workers here import its code and packages as the first node's do
            paths = (str(work / INTERNAL / PACKAGES), str(work), os.environ.get("PYTHONPATH", ""))
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            os.environ.update(plan.program.env)
        code = join_gang(plan)
    elif plan.program is not None:
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
