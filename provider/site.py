"""A provider's site, put together (docs/architecture.md §4): the provider's own Ray cluster,
the agent (`compute.site`) serving it over HTTPS, the chain's authorization
(`ledger.site_authority`), the planning of a lease from a job's spec (`market.spec`) and the
signing of results with the provider's key (`ledger.results`).

`swarm provider serve` runs `run_site` in the foreground. The site's Ray cluster is started in
the provider's SWARM_HOME with a token of its own that never leaves the provider (its other
machines join with `swarm provider join`); an already running one is attached to.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from compute import cluster
from compute.dataplane import is_uri
from compute.lease import LeasePlan
from compute.node import RayHome
from compute.site import Site, listen, make_app, serve
from compute.site_auth import LEASE_ACTIONS, JobView, NonceBook, Refused, SiteRequest, authorize
from compute.site_tls import SiteIdentity, make_identity
from ledger.client import Swarm
from ledger.results import result_typed_data
from ledger.site_authority import ChainAuthority
from ledger.tx import Sender
from market.spec import (
    DATASET_PARAM, MODEL_PARAM, JobSpec, SpecError, borrowing_refused, job_namespace, validate_spec,
)

# What a lease's own Ray instance (its GCS, raylet and agents) adds to the memory the job asked for.
LEASE_RAY_OVERHEAD_BYTES = 3 * 2**30 // 2
MIN_LEASE_MEMORY_BYTES = 512 * 2**20
PROGRAM_PROCESSES = 256


@dataclass(frozen=True)
class SiteConfig:
    host: str = "127.0.0.1"
    port: int = 8443
    node_cpus: int = 1  # CPUs of each worker node, when the site starts its cluster
    nodes: int = 1  # worker nodes the site starts on this machine (more join with `swarm provider join`)
    node_gpus: int = 0
    object_store_bytes: int = 80 * 1024 * 1024


@dataclass(frozen=True)
class PriorResult:
    """The result a job builds on (`model: job:<id>`), as the chain vouches for it."""

    job_id: int
    location: str  # <its spec's output>/<its compute job id>
    result_hash: str  # 0x, the chain's resultHash: the manifest hash of its outputs


def plan_lease(spec_bytes: bytes, job_id: int, number: int, provider: str, namespace: str, lease_storage: Path,
               prior: PriorResult | None = None, now: float | None = None) -> LeasePlan:
    """The lease a job's spec asks for; ValueError names what is wrong with the spec. A job
    built on another's result (`job:<id>`) needs that result's `prior` (see `prior_result`)."""
    now = time.time() if now is None else now
    spec = _spec(spec_bytes, "the job's spec")
    r = spec.resources
    cpus, gpus = r.workers * r.cpus_per_worker, r.workers * r.gpus_per_worker
    memory = max(MIN_LEASE_MEMORY_BYTES, int(r.workers * r.memory_gb * 2**30)) + LEASE_RAY_OVERHEAD_BYTES
    wall = max(1.0, spec.deadline - now)
    result = spec.result_location(namespace, job_id)
    if spec.kind == "ray":
        # The results go to the buyer's output, under the job's compute id.
        return LeasePlan(job_id=job_id, number=number, job=None, cpus=cpus, gpus=gpus, memory_bytes=memory,
                         wall_seconds=wall, max_units=spec.max_units, max_processes=PROGRAM_PROCESSES,
                         program=spec.program(), result=result)
    if result is None:
        raise ValueError("the spec names no output, so its results would have nowhere to go; post it with "
                         "`swarm job post`, which gives it one")
    # What the buyer brings is copied into the lease and checked against its pin: the lease sees
    # nothing else of the host, and the runner reads the copy.
    if spec.unpinned():
        raise ValueError(f"{', '.join(spec.unpinned())} is not pinned by its sha256; post it with "
                         "`swarm job post`, which pins it")
    if spec.prior_job is not None and (prior is None or prior.job_id != spec.prior_job):
        raise ValueError(f"model job:{spec.prior_job} is a result the site was not shown; the market sends "
                         "that job's spec with the lease")
    # A local output is where the job's runs live (and resume from, on any site that shares the
    # directory); a URI's runs stay in the lease and are copied there when it ends.
    runs = spec.output if not is_uri(spec.output) else str(lease_storage)
    staged = str(lease_storage.parent / "inputs" / "prior") if prior else ""
    job = spec.to_compute_job(namespace + str(job_id), provider, storage=runs, now=now, prior_result=staged)
    params, files = dict(job.params), []
    for field, pinned in spec.brought().items():
        name = MODEL_PARAM[spec.kind] if field == "model" else DATASET_PARAM[spec.kind]
        target = f"inputs/{name}"
        files.append((pinned.uri, pinned.sha256, target))
        # A file keeps its name in the lease (its suffix says its format); a directory is the target.
        leaf = pinned.uri.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        params[name] = str(lease_storage.parent / target / (leaf if Path(leaf).suffix else ""))
    job = replace(job, params=params)
    earlier = ((f"job:{prior.job_id}", prior.location, prior.result_hash, "inputs/prior"),) if prior else ()
    return LeasePlan(job_id=job_id, number=number, job=asdict(job), cpus=cpus, gpus=gpus, memory_bytes=memory,
                     wall_seconds=wall, max_units=spec.max_units, files=tuple(files), result=result, prior=earlier)


def prior_result(spec_bytes: bytes, buyer: str, prior_spec: bytes | None, authority: ChainAuthority,
                 namespace: str) -> PriorResult | None:
    """The result the job builds on, checked by the site itself against the chain: the job has
    one, the spec the market sent for it is the one the chain pins, and the buyer may use it
    (its own, or one its buyer published). ValueError says why not."""
    from compute.site_auth import body_hash

    spec = _spec(spec_bytes, "the job's spec")
    prior_id = spec.prior_job
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
    earlier = _spec(prior_spec, f"the spec of job {prior_id}")
    if (why := borrowing_refused(spec, buyer, chain.buyer, earlier)) is not None:
        raise ValueError(why)
    location = earlier.result_location(namespace, prior_id)
    if location is None:
        raise ValueError(f"model job:{prior_id} names no output, so no site can read its result; build on a "
                         "job posted with one")
    return PriorResult(prior_id, location, "0x" + chain.result_hash.hex())


def _spec(spec_bytes: bytes, what: str) -> JobSpec:
    try:
        raw = json.loads(spec_bytes)
        return validate_spec(raw, now=float(raw.get("deadline", 1)) - 1)
    except (ValueError, SpecError, AttributeError) as exc:
        raise ValueError(f"{what} cannot be read: {exc}") from None


@dataclass
class RunningSite:
    site: Site
    identity: SiteIdentity
    url: str
    started_cluster: bool
    ray_home: RayHome


def open_site(swarm: Swarm, sender: Sender, home: Path, config: SiteConfig) -> tuple[RunningSite, object]:
    """Starts (or attaches to) the provider's Ray cluster and builds the agent; returns it and its app."""
    provider = sender.address
    root = home / "site"
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):  # the site's cluster is its own, with its own token
        os.environ.pop(name, None)
    identity = make_identity(root, config.host)
    ray_home = RayHome.of(home)
    state = cluster.running(ray_home)
    started = state is None
    if started:
        state = cluster.start(ray_home, cluster.ClusterSpec(
            providers=(provider,), node_cpus=config.node_cpus, node_gpus=config.node_gpus,
            object_store_bytes=config.object_store_bytes, nodes_per_provider=config.nodes))
    if not state.dashboard:
        raise Refused(500, f"The site's Ray cluster in {ray_home.root} has no dashboard, which leases need; "
                           "stop it with `swarm cluster down` and serve again.")
    cluster.connect(ray_home, state.address)
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    namespace = job_namespace(chain_id, market)

    authority = ChainAuthority(swarm)

    def planner(job: JobView, job_id: int, spec: bytes, number: int, lease_storage: Path,
                prior_spec: bytes | None) -> LeasePlan:
        try:
            prior = prior_result(spec, job.buyer, prior_spec, authority, namespace)
            return plan_lease(spec, job_id, number, provider, namespace, lease_storage, prior)
        except ValueError as exc:
            raise Refused(400, f"Job {job_id}: {exc}") from None

    def signer(job_id: int, result_hash: bytes, units: int) -> bytes:
        return sender.sign_typed_data(result_typed_data(chain_id, market, job_id, result_hash, units))

    site = Site(root, provider, state.dashboard, planner, signer, hidden=(str(home),))
    nonces = NonceBook(root / "nonces.db")

    def authorizer(request: SiteRequest, signature: bytes, spec_hash: bytes | None):
        signer = authorize(request, signature, site=provider, chain_id=chain_id, market=market, authority=authority,
                           nonces=nonces, now=int(time.time()), spec_hash=spec_hash)
        return signer, authority.job(request.job_id) if request.action in LEASE_ACTIONS else None

    url = f"https://{config.host}:{config.port}"
    running = RunningSite(site, identity, url, started, ray_home)
    return running, make_app(site, authorizer, chain_id, market)


def run_site(swarm: Swarm, sender: Sender, home: Path, config: SiteConfig,
             ready: Callable[[RunningSite], None] | None = None) -> None:
    """Serves the site until SIGTERM or SIGINT, then stops the cluster if it started it."""
    listener = listen(config.host, config.port)  # before the cluster's processes take free ports
    config = replace(config, port=listener.getsockname()[1])  # port 0: the one the system chose
    try:
        running, app = open_site(swarm, sender, home, config)
    except BaseException:
        listener.close()
        raise
    try:
        serve(app, listener, running.identity.certificate, running.identity.key,
              ready=(lambda: ready(running)) if ready else None)
    finally:
        import ray

        # The agent's own driver lets go first: one whose cluster is gone waits seconds to exit.
        ray.shutdown()
        if running.started_cluster:
            cluster.stop(running.ray_home)

