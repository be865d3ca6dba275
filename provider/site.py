"""A provider's site, put together (docs/architecture.md §4): the provider's own Ray cluster,
the agent (`provider.agent`) serving it over HTTPS (`provider.api`), the chain's authorization
(`ChainAuthorizer`: `provider.auth`, `provider.authority`), the planning of a lease from a
job's posted spec (`ChainPlanner`: `provider.lease.plan`, which reads it as `compute.order`
does) and the signing of results with the provider's key (`ChainSigner`: `ledger.results`),
under the job's provider and price read from the chain right before
(`provider.authority.terms_to_sign`). A lease assigned under the provider's declared asking
price is not started.

`swarm provider serve` runs `run_site` in the foreground. The site's Ray cluster is started in
the provider's SWARM_HOME with a token of its own that never leaves the provider (its other
machines join with `swarm provider join`); an already running one is attached to.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from compute import cluster
from compute.errors import InvalidJob
from compute.node import RayHome, ensure_token
from compute.order import job_namespace
from core.errors import Refused, UserError
from ledger import serving as chain_serving
from ledger import stake
from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.results import failure_typed_data, result_typed_data
from ledger.specs import load_spec
from ledger.tx import Sender
from provider.agent import Agent
from provider.api import SiteParts, listen, make_app, serve
from provider.auth import Authority, JobView, NonceBook, authorize
from provider.authority import ChainAuthority, terms_to_sign
from provider.identity import SiteIdentity, make_identity
from provider.lease.plan import LeasePlan, plan_lease, prior_result, read_order
from provider.lease.sandbox import lease_root
from provider.mesh import NETWORK, HeadMesh
from provider.receipts import ReceiptBook
from provider.serving import Redeemer, ServingLeases
from wire.request import LEASE_ACTIONS, SiteRequest

if TYPE_CHECKING:
    from starlette.types import ASGIApp

DRIVER_SHUTDOWN_S = 5.0  # how long a stopping site waits for its own Ray driver to let go

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SiteConfig:
    host: str = "127.0.0.1"
    port: int = 8443
    node_cpus: int = 1  # CPUs of each worker node, when the site starts its cluster
    nodes: int = 1  # worker nodes the site starts on this machine (more join with `swarm provider join`)
    node_gpus: int = 0
    object_store_bytes: int = 80 * 1024 * 1024
    mesh_endpoint: str | None = None  # HOST:PORT where the site's machines reach the head's mesh; None: none
    mesh_network: str = NETWORK
    # A directory every machine of the site mounts at this same path (a network file system; any
    # directory when all its nodes are on this machine): where a lease across nodes keeps its
    # checkpoints and outputs. None: the site runs no lease across nodes.
    shared_dir: Path | None = None
    # Serving: what a buyer may owe in receipts before it signs a voucher (wei), and when the site
    # redeems a buyer's latest voucher: once it adds this much, or this long after the last time.
    serving_cap: int = 10 * 10**18
    redeem_least: int = 10**18
    redeem_every_s: float = 300.0
    serving_idle_s: float = 1800.0  # a serving lease nobody calls for this long is stopped


@dataclass
class RunningSite:
    agent: Agent
    identity: SiteIdentity
    url: str
    started_cluster: bool
    ray_home: RayHome
    mesh: HeadMesh | None = None
    serving: ServingLeases | None = None
    redeemer: Redeemer | None = None


def open_site(swarm: Swarm, sender: Sender, home: Path, config: SiteConfig) -> tuple[RunningSite, ASGIApp]:
    """Starts (or attaches to) the provider's Ray cluster and builds the agent; returns it and its app."""
    provider = sender.address
    root = home / "site"
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):  # the site's cluster is its own, with its own token
        os.environ.pop(name, None)
    if os.geteuid() != 0:  # a site of an ordinary user gives its leases users of their own too
        lease_root(["true"])  # ComputeError, naming the fix, when it cannot
    identity = make_identity(root, config.host)
    ray_home = RayHome.of(home)
    # The mesh's join secret is the cluster's token, which a machine of the site holds already;
    # the cluster's head and nodes then bind the head's mesh address, their ports pinned.
    mesh = (HeadMesh(home, ensure_token(ray_home).read_text().strip(), config.mesh_endpoint,
                     config.mesh_network) if config.mesh_endpoint else None)
    state = cluster.running(ray_home)
    started = state is None
    if state is None:
        state = cluster.start(ray_home, cluster.ClusterSpec(
            providers=(provider,), node_cpus=config.node_cpus, node_gpus=config.node_gpus,
            object_store_bytes=config.object_store_bytes, nodes_per_provider=config.nodes,
            node_ip=mesh.coordinator.head.address if mesh else None))
    if not state.dashboard:
        raise UserError(f"The site's Ray cluster in {ray_home.root} has no dashboard, which leases need; "
                        "stop it with `swarm cluster down` and serve again.")
    cluster.connect(ray_home, state.address)
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    authority = ChainAuthority(swarm)
    planner = ChainPlanner(swarm, home, provider, authority, job_namespace(chain_id, market))
    signer = ChainSigner(swarm, sender)
    site = Agent(root, provider, state.dashboard, planner, signer.result, hidden=(str(home),),
                failure_signer=signer.failure, shared=config.shared_dir)
    authorize = ChainAuthorizer(provider, chain_id, market, authority, NonceBook(root / "nonces.db"))
    serving, redeemer = _serving(swarm, sender, home, site, config)
    url = f"https://{config.host}:{config.port}"
    running = RunningSite(site, identity, url, started, ray_home, mesh, serving, redeemer)
    return running, make_app(SiteParts(provider, chain_id, market, site, authorize, mesh, serving))


@dataclass(frozen=True)
class ChainPlanner:
    """A lease's plan from its job's posted spec (`provider.agent.Planner`), under what the chain
    shows: a job assigned under the provider's asking price is refused (409); a spec, or a job it
    builds on, that cannot be run is the buyer's `InvalidJob` (400)."""

    swarm: Swarm
    home: Path
    provider: str
    authority: ChainAuthority
    namespace: str

    def __call__(self, job: JobView, job_id: int, spec: bytes, number: int,
                 prior_spec: bytes | None) -> LeasePlan:
        asking = asking_price(self.swarm, self.home, self.provider)
        if asking is not None and job.price_per_unit < asking:
            raise Refused(409, f"Job {job_id} is assigned at {job.price_per_unit} wei per unit, under this "
                               f"provider's asking price of {asking} wei; the site does not run it.")
        try:
            order = read_order(spec, "the job's spec")
            prior = prior_result(order, job.buyer, prior_spec, self.authority, self.namespace)
            return plan_lease(order, job_id, number, self.provider, self.namespace, prior)
        except ValueError as exc:
            raise InvalidJob(f"Job {job_id}: {exc}") from None


@dataclass(frozen=True)
class ChainSigner:
    """The provider's word on a lease's outcome, signed with its key under the job's provider and
    price as the chain holds them right before (`provider.authority.terms_to_sign`, which raises
    WontSign for an assignment the site did not agree to)."""

    swarm: Swarm
    sender: Sender

    def result(self, job_id: int, agreed_price: int, result_hash: bytes, units: int) -> bytes:
        """A `provider.agent.ResultSigner`: the lease succeeded with `result_hash` after `units`."""
        chain_id, market = self.swarm.chain.chain_id, self.swarm.market.address
        terms = terms_to_sign(self.swarm, self.sender.address, job_id, agreed_price)
        return self.sender.sign_typed_data(result_typed_data(chain_id, market, terms, result_hash, units))

    def failure(self, job_id: int, agreed_price: int, units: int) -> bytes:
        """A `provider.agent.FailureSigner`: the lease failed by its job's fault after `units`."""
        chain_id, market = self.swarm.chain.chain_id, self.swarm.market.address
        terms = terms_to_sign(self.swarm, self.sender.address, job_id, agreed_price)
        return self.sender.sign_typed_data(failure_typed_data(chain_id, market, terms, units))


@dataclass(frozen=True)
class ChainAuthorizer:
    """The site's `provider.api.Authorizer`: the signer of a request this site may serve now, as
    the chain says (`provider.auth.authorize`, each nonce served once), and what the chain says of
    a lease's job; `Refused` otherwise."""

    provider: str
    chain_id: int
    market: str
    authority: Authority
    nonces: NonceBook

    def __call__(self, request: SiteRequest, signature: bytes,
                 spec_hash: bytes | None) -> tuple[str, JobView | None]:
        signer = authorize(request, signature, site=self.provider, chain_id=self.chain_id, market=self.market,
                           authority=self.authority, nonces=self.nonces, now=int(time.time()),
                           spec_hash=spec_hash)
        return signer, self.authority.job(request.job_id) if request.action in LEASE_ACTIONS else None


def _serving(swarm: Swarm, sender: Sender, home: Path, site: Agent,
             config: SiteConfig) -> tuple[ServingLeases | None, Redeemer | None]:
    """The site's serving leases, their receipt book and its redeemer; none on a deployment made
    before the serving escrow."""
    if chain_serving.CONTRACT not in swarm.deployment.addresses:
        return None, None
    provider = sender.address
    book = ReceiptBook(home / "site" / "serving" / "receipts.db", chain_serving.domain_of(swarm), provider,
                       config.serving_cap, lambda buyer: chain_serving.account(swarm, buyer, provider))
    redeemer = Redeemer(book, lambda voucher: chain_serving.redeem(swarm, sender, voucher),
                        lambda buyer: chain_serving.account(swarm, buyer, provider), config.redeem_least,
                        config.redeem_every_s)
    leases = ServingLeases(site, book, home, config.serving_idle_s)
    leases.resume()  # what a site that died was serving, served again
    return leases, redeemer


def asking_price(swarm: Swarm, home: Path, provider: str) -> int | None:
    """The price per unit (wei) the provider's registered hardware spec asks, as stored in its
    SWARM_HOME by `swarm provider register`; None when it declares none or is not stored here."""
    spec_hash = stake.provider_info(swarm, provider).spec_hash
    try:
        price = load_spec(home, spec_hash).get("price_per_unit")
    except SwarmError:
        return None
    return None if price is None else int(price)


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
        # A worker on each node before the oracle's first probe, which would otherwise wait for one
        # to start: on a busy machine longer than a probe's timeout, and the site's first epoch
        # would count it down. What it answers is not kept.
        running.agent.probe()
        if running.redeemer is not None:
            import threading

            threading.Thread(target=running.redeemer.run, daemon=True, name="swarm-redeemer").start()
        if running.serving is not None:
            import threading

            threading.Thread(target=_stop_idle_leases, args=(running.serving,), daemon=True,
                             name="swarm-serving-idle").start()
        serve(app, listener, running.identity.certificate, running.identity.key,
              ready=(lambda: ready(running)) if ready else None)
    finally:
        if running.redeemer is not None:
            running.redeemer.stop()
            _redeem_before_leaving(running.redeemer)
        _let_go_of_ray()
        if running.started_cluster:
            cluster.stop(running.ray_home)


def _stop_idle_leases(serving: ServingLeases, period_s: float = 10.0) -> None:
    """Stops the serving leases nobody calls, every `period_s`, while the site runs (each one
    stopped is logged as it stops)."""
    while True:
        time.sleep(min(period_s, serving.idle_s / 4))
        try:
            serving.stop_idle()
        except Exception as exc:  # noqa: BLE001 -- tried again next round
            log.warning("serving: could not stop idle leases (%s); trying again in %.0f s", exc, period_s)


def _redeem_before_leaving(redeemer: Redeemer) -> None:
    """A stopping site redeems every voucher it holds, so what buyers signed is paid now; if the
    chain is away it says so, and the next start redeems them."""
    try:
        redeemer.once(force=True)
    except Exception as exc:  # noqa: BLE001 — the chain may be down; the vouchers stay in the book
        log.warning("serving: the vouchers could not be redeemed before stopping (%s); the next start "
                    "redeems them.", exc)


def _let_go_of_ray() -> None:
    """Disconnects the agent's own Ray driver, waiting DRIVER_SHUTDOWN_S at most. One whose
    cluster is gone waits seconds to exit; on a mesh site, whose GCS is at the mesh address and
    whose WireGuard interface ends with the same SIGTERM, closing its GCS subscriber waits
    minutes. Then the driver is left behind, and Ray's own shutdown at exit with it."""
    import atexit
    import threading

    import ray
    from ray._private import worker

    letting_go = threading.Thread(target=ray.shutdown, daemon=True, name="swarm-ray-shutdown")
    letting_go.start()
    letting_go.join(DRIVER_SHUTDOWN_S)
    if letting_go.is_alive():
        atexit.unregister(worker.shutdown)

