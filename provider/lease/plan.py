"""What a site decides to run for one job: the lease's plan.

The site reads the posted spec as an order (`compute.order`: the job contract's typed
parameters, the resources and the bounds) and plans the lease from it: the compute job, what
it may use, where its result goes, and what is copied into it and checked before it starts
(the buyer's pinned model and dataset, an earlier job's result). The plan names those inputs
by where they lie in the lease's own directory, relative to it, so it holds on whichever
machine of the site runs the lease; the worker in the sandbox places them there
(`LeasePlan.in_lease`). The plan is serialized once, with the job in the contract's own
versioned JSON, and read back as a stranger's.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute.errors import InvalidJob
from compute.jobs import ComputeJob
from compute.order import DATASET_PARAM, MODEL_PARAM, Order, prior_refused
from compute.runners.params import ProgramParams
from provider.lease import PLAN
from provider.lease.outcome import write_json
from provider.lease.sandbox import Limits
from wire.request import body_hash

if TYPE_CHECKING:
    from provider.authority import ChainAuthority

# What a lease's own Ray instance (its GCS, raylet and agents) adds to the memory the job asked for.
LEASE_RAY_OVERHEAD_BYTES = 3 * 2**30 // 2
MIN_LEASE_MEMORY_BYTES = 512 * 2**20
PROGRAM_PROCESSES = 256
# Ray's own processes (GCS, raylet, agents) and their threads count against the lease's
# process limit, as everything it starts does.
RAY_PROCESS_ALLOWANCE = 1024
PRIOR = "inputs/prior"  # where an earlier job's result is staged, under work/
LEASE_DISK_BYTES = 20 * 2**30  # what a lease's directory and log may hold, unless the site says otherwise
# A built-in job is billed for its workers' busy time, not its own Ray's start: the lease may hold
# its devices this much longer than its units before it is stopped at max_units.
BUILT_IN_START_S = 60.0


@dataclass(frozen=True)
class Fetch:
    """Something the launcher copies into the lease and checks before the work starts."""

    uri: str
    sha256: str  # its pin; for an earlier job's result, the chain's resultHash of its outputs
    target: str  # where it is staged, relative to the lease's work directory
    param: str  # the runner's parameter that reads it
    path: str  # what that parameter names, relative to work/: the target, or the one file in it
    prior: str = ""  # job:<id> when it is an earlier job's result (its outputs are staged)


@dataclass(frozen=True)
class LeasePlan:
    """What the site decided to run for one job."""

    job_id: int
    number: int  # the site's sequence number for this lease (its user's uid when root)
    job: ComputeJob  # the contract; its parameters name fetched inputs relative to work/
    cpus: float
    gpus: float
    memory_bytes: int
    wall_seconds: float
    max_units: int
    max_processes: int = 256
    disk_bytes: int = LEASE_DISK_BYTES
    hidden: tuple[str, ...] = ()  # the provider's SWARM_HOME, the leases directory
    attempt: int = 1
    result: str = ""  # where the results go: <the buyer's output>/<compute job id>, a directory or a URI
    fetch: tuple[Fetch, ...] = ()
    verdict_key: str = ""  # marks the launcher's verdict in the job's log; never shown to the lease
    # A lease across nodes: `nodes` of them, each with the CPUs, GPUs and memory above, each on a
    # machine of its own (provider.lease.gang), sharing the directory `shared` (the same path on
    # every machine of the site): the job's storage (its checkpoints) and a program's outputs.
    nodes: int = 1
    shared: str = ""

    @property
    def program(self) -> ProgramParams | None:
        """The buyer's own program, for a `ray` job."""
        return self.job.params if isinstance(self.job.params, ProgramParams) else None

    @property
    def local_result(self) -> Path | None:
        """A built-in job's result directory when the buyer's output is a directory here: the
        job then checkpoints into it, bound into the sandbox, so a job that another site sharing
        the directory takes over resumes from its last checkpoint; a URI is copied to instead."""
        if self.program is not None or not self.result or "://" in self.result:
            return None
        return Path(self.result)

    @property
    def unit_rate(self) -> float:
        """Units a second the lease uses while it runs: its GPUs, or else its CPUs, on every node."""
        return max(self.gpus if self.gpus > 0 else self.cpus, 0.001) * self.nodes

    @property
    def outputs(self) -> Path | None:
        """Where a program across nodes writes its results: in the directory its nodes share, so a
        result written on any node is the lease's (None: its own work directory's outputs/)."""
        return Path(self.shared) / "outputs" if self.nodes > 1 else None

    @property
    def unit_seconds(self) -> float:
        """How long the lease may hold its devices before its units reach max_units."""
        return self.max_units / self.unit_rate + (BUILT_IN_START_S if self.program is None else 0.0)

    def limits(self) -> Limits:
        return Limits(
            memory_bytes=self.memory_bytes,
            max_processes=self.max_processes + RAY_PROCESS_ALLOWANCE,
            wall_seconds=min(self.wall_seconds, self.unit_seconds),
            disk_bytes=self.disk_bytes,
        )

    def in_lease(self, work: Path) -> ComputeJob:
        """The job as it runs in the lease whose work directory is `work`: its fetched inputs
        named where they lie, its runs kept in the buyer's directory or in the lease."""
        storage = (self.local_result.parent if self.local_result
                   else Path(self.shared) / "storage" if self.nodes > 1 else work / "storage")
        job = replace(self.job, storage=str(storage))
        placed = {f.param: str(work / f.path) for f in self.fetch}
        return job.with_params(**placed) if placed else job

    def but(self, **changes: Any) -> LeasePlan:
        return replace(self, **changes)

    # ── its one serialization ──────────────────────────────────────────────────────
    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"job": self.job.to_dict()}

    @classmethod
    def from_dict(cls, raw: Any) -> LeasePlan:
        """Reads what `to_dict` wrote; InvalidJob when it is not a plan."""
        if not isinstance(raw, dict) or not isinstance(raw.get("fetch", []), list):
            raise InvalidJob("a lease's plan is a JSON object.")
        try:
            fetch = tuple(Fetch(**f) for f in raw.get("fetch", []))
            return cls(**(raw | {"job": ComputeJob.from_dict(raw.get("job")), "fetch": fetch,
                                 "hidden": tuple(raw.get("hidden", ()))}))
        except TypeError as exc:
            raise InvalidJob(f"a lease's plan has a field it should not: {exc}.") from None

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / PLAN, self.to_dict())

    @classmethod
    def read(cls, directory: Path) -> LeasePlan:
        return cls.from_dict(json.loads((directory / PLAN).read_text()))

    def encode(self) -> str:
        """The plan as one environment value (a program's entrypoint and env are at most 16 KiB)."""
        return base64.b64encode(zlib.compress(json.dumps(self.to_dict()).encode())).decode()

    @classmethod
    def decode(cls, text: str) -> LeasePlan:
        return cls.from_dict(json.loads(zlib.decompress(base64.b64decode(text))))


@dataclass(frozen=True)
class PriorResult:
    """The result a job builds on (`model: job:<id>`), as the chain vouches for it."""

    job_id: int
    location: str  # <its spec's output>/<its compute job id>
    result_hash: str  # 0x, the chain's resultHash: the manifest hash of its outputs


def plan_lease(order: Order, job_id: int, number: int, provider: str, namespace: str,
               prior: PriorResult | None = None, now: float | None = None) -> LeasePlan:
    """The lease a job's order asks for; ValueError names what is wrong with it. A job built on
    another's result (`job:<id>`) needs that result's `prior` (see `prior_result`)."""
    now = time.time() if now is None else now
    r = order.resources
    memory = max(MIN_LEASE_MEMORY_BYTES, int(r.workers * r.memory_gb * 2**30)) + LEASE_RAY_OVERHEAD_BYTES
    bounds: dict[str, Any] = {
        "job_id": job_id,
        "number": number,
        "cpus": r.cpus,
        "gpus": float(r.gpus),
        "memory_bytes": memory,
        "wall_seconds": order.run_seconds(now),  # the deadline's, or max_runtime when shorter
        "max_units": order.max_units,
        "result": order.result_location(namespace, job_id) or "",
        "nodes": r.nodes,
    }
    if order.unpinned():
        raise ValueError(f"{', '.join(order.unpinned())} is not pinned by its sha256; post it with "
                         "`swarm job post`, which pins it")
    job = order.job(namespace + str(job_id), provider, now=now)
    if order.kind == ProgramParams.KIND:  # its results go to the buyer's output, under the compute id
        return LeasePlan(job=job, max_processes=PROGRAM_PROCESSES, **bounds)
    if not bounds["result"]:
        raise ValueError("the spec names no output, so its results would have nowhere to go; post it with "
                         "`swarm job post`, which gives it one")
    if order.prior_job is not None and (prior is None or prior.job_id != order.prior_job):
        raise ValueError(f"model job:{order.prior_job} is a result the site was not shown; the market sends "
                         "that job's spec with the lease")
    # What the buyer brings is copied into the lease and checked against its pin: the lease sees
    # nothing else of the host, and the runner reads the copy.
    fetch = []
    for field, pinned in order.pinned().items():  # all it brings: what is not pinned was refused above
        param = MODEL_PARAM[order.kind] if field == "model" else DATASET_PARAM[order.kind]
        target = f"inputs/{param}"
        # A file keeps its name in the lease (its suffix says its format); a directory is the target.
        leaf = pinned.uri.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        fetch.append(Fetch(pinned.uri, pinned.sha256, target, param, f"{target}/{leaf}" if Path(leaf).suffix
                           else target))
    if prior is not None:
        fetch.append(Fetch(prior.location, prior.result_hash, PRIOR, MODEL_PARAM[order.kind], PRIOR,
                           prior=f"job:{prior.job_id}"))
    job = job.with_params(**{f.param: f.path for f in fetch}) if fetch else job
    return LeasePlan(job=job, fetch=tuple(fetch), **bounds)


def prior_result(order: Order, buyer: str, prior_spec: bytes | None, authority: ChainAuthority,
                 namespace: str) -> PriorResult | None:
    """The result the job builds on, checked by the site itself against the chain: the job has
    one, the spec the market sent for it is the one the chain pins, and the buyer may use it
    (its own, or one its buyer published). ValueError says why not."""
    prior_id = order.prior_job
    if prior_id is None:
        return None
    chain = authority.job(prior_id)
    if chain is None:
        raise ValueError(f"model job:{prior_id} names no job of this market; give the number of a job whose "
                         "result it uses")
    if chain.status not in ("completed", "disputed", "settled") or not any(chain.result_hash):
        raise ValueError(f"model job:{prior_id} has no result on chain (it is {chain.status}); post this job "
                         "once that one is completed")
    if prior_spec is None or body_hash(prior_spec) != chain.spec_hash:
        raise ValueError(f"the spec of job {prior_id} that came with the lease is not the one the chain pins")
    earlier = read_order(prior_spec, f"the spec of job {prior_id}")
    if (why := prior_refused(prior_id, buyer, chain.buyer, earlier.publish)) is not None:
        raise ValueError(why)
    location = earlier.result_location(namespace, prior_id)
    if location is None:
        raise ValueError(f"model job:{prior_id} names no output, so no site can read its result; build on a "
                         "job posted with one")
    return PriorResult(prior_id, location, "0x" + chain.result_hash.hex())


def read_order(spec: bytes, what: str) -> Order:
    """The order in a posted spec's bytes, read without a clock (its deadline bounds the lease);
    ValueError says why not."""
    try:
        return Order.read(spec)
    except InvalidJob as exc:
        raise ValueError(f"{what} cannot be read: {_clause(str(exc))}") from None


def _clause(text: str) -> str:
    return text.strip().rstrip(".")
