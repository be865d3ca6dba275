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
from compute.dataplane import join
from compute.lease import LeasePlan
from compute.node import RayHome
from compute.site import Site, listen, make_app, serve
from compute.site_auth import LEASE_ACTIONS, NonceBook, Refused, SiteRequest, authorize
from compute.site_tls import SiteIdentity, make_identity
from ledger.client import Swarm
from ledger.results import result_typed_data
from ledger.site_authority import ChainAuthority
from ledger.tx import Sender
from market.spec import DATASET_PARAM, JOB_REF, MODEL_PARAM, JobSpec, SpecError, job_namespace, validate_spec

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


def plan_lease(spec_bytes: bytes, job_id: int, number: int, provider: str, namespace: str, lease_storage: Path,
               storage: str = "", now: float | None = None) -> LeasePlan:
    """The lease a job's spec asks for; ValueError names what is wrong with the spec."""
    now = time.time() if now is None else now
    try:
        raw = json.loads(spec_bytes)
        spec: JobSpec = validate_spec(raw, now=float(raw.get("deadline", 1)) - 1)
    except (ValueError, SpecError, AttributeError) as exc:
        raise ValueError(f"the job's spec cannot be read: {exc}") from None
    r = spec.resources
    cpus, gpus = r.workers * r.cpus_per_worker, r.workers * r.gpus_per_worker
    memory = max(MIN_LEASE_MEMORY_BYTES, int(r.workers * r.memory_gb * 2**30)) + LEASE_RAY_OVERHEAD_BYTES
    wall = max(1.0, spec.deadline - now)
    if spec.kind == "ray":
        # The results go to the buyer's output, under the job's compute id.
        program = spec.program() | {"result": join(spec.output, namespace + str(job_id))}
        return LeasePlan(job_id=job_id, number=number, job=None, cpus=cpus, gpus=gpus, memory_bytes=memory,
                         wall_seconds=wall, max_units=spec.max_units, max_processes=PROGRAM_PROCESSES,
                         program=program)
    # A directory of the market's is where the job's runs live (and resume from); a URI is copied.
    runs = storage if storage and "://" not in storage else str(lease_storage)
    job = spec.to_compute_job(str(job_id), provider, storage=runs, now=now, namespace=namespace)
    model = spec.model if isinstance(spec.model, str) else ""
    inputs = (namespace + model[len(JOB_REF):],) if model.startswith(JOB_REF) else ()
    # What the buyer brings is copied into the lease and checked against its pin: the lease sees
    # nothing else of the host, and the runner reads the copy.
    if spec.unpinned():
        raise ValueError(f"{', '.join(spec.unpinned())} is not pinned by its sha256; post it with "
                         "`swarm job post`, which pins it")
    params, files = dict(job.params), []
    for field, pinned in spec.brought().items():
        name = MODEL_PARAM[spec.kind] if field == "model" else DATASET_PARAM[spec.kind]
        target = f"inputs/{name}"
        files.append((pinned.uri, pinned.sha256, target))
        # A file keeps its name in the lease (its suffix says its format); a directory is the target.
        leaf = pinned.uri.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        params[name] = str(lease_storage.parent / target / (leaf if Path(leaf).suffix else ""))
    job = replace(job, params=params)
    return LeasePlan(job_id=job_id, number=number, job=asdict(job), cpus=cpus, gpus=gpus, memory_bytes=memory,
                     wall_seconds=wall, max_units=spec.max_units, inputs=inputs, files=tuple(files), storage=storage)


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

    def planner(job_id: int, spec: bytes, number: int, lease_storage: Path, storage: str) -> LeasePlan:
        try:
            return plan_lease(spec, job_id, number, provider, namespace, lease_storage, storage)
        except ValueError as exc:
            raise Refused(400, f"Job {job_id}: {exc}") from None

    def signer(job_id: int, result_hash: bytes, units: int) -> bytes:
        return sender.sign_typed_data(result_typed_data(chain_id, market, job_id, result_hash, units))

    site = Site(root, provider, state.dashboard, planner, signer, hidden=(str(home),))
    authority = ChainAuthority(swarm)
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

