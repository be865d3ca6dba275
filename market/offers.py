"""What each provider offers the matcher this round, from the ledger and the providers' sites.

The ledger says who may take work (registered, staked above the minimum for the declared
GPUs, not jailed or tombstoned) and what each provider declared (GPU model, VRAM, asking
price, in its content-addressed hardware spec). The provider's site says what is really
there: the CPUs, GPUs and memory of its live nodes (`market.sites`). What the market's own running
jobs hold is taken off, so nothing is oversubscribed between rounds.

Score, measured performance and reliability come from the oracle's latest finalized epoch
(its `provider_scores`, oracle/records.py): performance is measured throughput ÷ the reference for
the declared model, reliability the lower bound of the Beta posterior over job outcomes
(it ranks providers of equal cost), and the score a job's `min_provider_score` is held
against is the provider's measured uptime. A provider the oracle has not scored yet is
offered with the neutral values of `Newcomer`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import BigInteger, Float, Integer, String, column, table
from sqlmodel import Session, select

from ledger.errors import SwarmError
from ledger.indexer.models import Provider
from ledger.specs import load_spec
from market.matcher import JobRequest, Machine, ProviderOffer
from market.spec import JobSpec

GB = 1024**3

# The oracle's tables as the market reads them: a read-only view of the columns it needs, since
# the oracle owns them (oracle/records.py) and the two packages meet only in the database.
ORACLE_EPOCHS = table("oracle_epochs", column("chain_id", BigInteger), column("epoch", BigInteger),
                      column("state", String))
PROVIDER_SCORES = table(
    "provider_scores", column("chain_id", BigInteger), column("epoch", BigInteger),
    column("provider", String), column("samples", Integer), column("uptime", Float),
    column("performance", Float), column("reliability", Float),
)


@dataclass(frozen=True)
class Newcomer:
    """How a provider with no oracle record yet is offered: an uninformed prior."""

    score: float = 0.5
    measured_perf: float = 1.0
    reliability: float = 0.5


@dataclass(frozen=True)
class Capacity:
    """A site's resources, summed over its live machines. A lease of one node runs on one
    machine, so the largest machine's CPUs and GPUs bound what it may ask; a lease of several
    takes one node's share of as many machines, so each machine's (`machines`, None where the
    site does not say) and whether the site runs leases across machines bound that. A sum or
    difference keeps the first's machines."""

    cpus: float = 0.0
    gpus: float = 0.0
    memory_gb: float = 0.0
    node_cpus: float = math.inf
    node_gpus: float = math.inf
    machines: tuple[Machine, ...] | None = None
    across_nodes: bool = False

    def __sub__(self, other: Capacity) -> Capacity:
        return replace(self, cpus=self.cpus - other.cpus, gpus=self.gpus - other.gpus,
                       memory_gb=self.memory_gb - other.memory_gb)

    def __add__(self, other: Capacity) -> Capacity:
        return replace(self, cpus=self.cpus + other.cpus, gpus=self.gpus + other.gpus,
                       memory_gb=self.memory_gb + other.memory_gb)


def job_needs(spec: JobSpec) -> Capacity:
    """What one run of a job holds on its provider while it runs: each of its nodes' share."""
    r = spec.resources
    return Capacity(r.nodes * (r.workers * r.cpus_per_worker), r.nodes * (r.workers * r.gpus_per_worker),
                    r.nodes * (r.workers * r.memory_gb))


def job_request(job_id: int, spec: JobSpec, replicas: int | None = None) -> JobRequest:
    r = spec.resources
    return JobRequest(
        job_id=job_id,
        workers=r.workers,
        gpus_per_worker=r.gpus_per_worker,
        gpu_model=r.gpu_model,
        vram_gb_per_worker=r.vram_gb_per_worker,
        cpus_per_worker=max(1, math.ceil(r.cpus_per_worker)),
        memory_gb=r.memory_gb,
        max_price_per_unit=spec.max_price_per_unit,
        min_score=spec.min_provider_score,
        priority=spec.priority,
        replicas=spec.replicas if replicas is None else replicas,
        nodes=r.nodes,
    )


def declared(home: Path, spec_hash: str) -> dict:
    """A provider's hardware spec, or {} when this SWARM_HOME does not hold it."""
    try:
        return load_spec(home, bytes.fromhex(spec_hash.removeprefix("0x")))
    except (SwarmError, ValueError):
        return {}


@dataclass(frozen=True)
class TrackRecord:
    score: float
    measured_perf: float
    reliability: float


def track_records(session: Session, chain_id: int) -> dict[str, TrackRecord]:
    """Each provider's scores in the oracle's latest finalized epoch."""
    epochs, scores = ORACLE_EPOCHS.c, PROVIDER_SCORES.c
    latest = session.exec(select(epochs.epoch).where(
        epochs.chain_id == chain_id, epochs.state == "finalized").order_by(epochs.epoch.desc())).first()
    if latest is None:
        return {}
    rows = session.exec(select(scores.provider, scores.uptime, scores.performance, scores.reliability).where(
        scores.chain_id == chain_id, scores.epoch == latest, scores.samples > 0, scores.performance > 0))
    return {provider: TrackRecord(uptime, performance, reliability)
            for provider, uptime, performance, reliability in rows}


def build_offers(
    session: Session,
    chain_id: int,
    home: Path,
    min_stake_per_gpu: int,
    capacity: Mapping[str, Capacity],
    busy: Mapping[str, Capacity],
    default_price: int,
    newcomer: Newcomer = Newcomer(),
    exclude: Iterable[str] = (),
    min_price: int = 0,
) -> list[ProviderOffer]:
    """One offer per registered provider, or per provider whose site reported capacity.

    A provider with a site but not registered on chain is offered as unstaked, so that
    an explanation counts it; one registered but with no live node offers no capacity.
    A price under the market's floor (`min_price`, JobMarket.minPricePerUnit), which the chain
    would refuse, is offered at the floor.
    """
    excluded = set(exclude)
    rows = {p.address: p for p in session.exec(select(Provider).where(Provider.chain_id == chain_id))}
    records = track_records(session, chain_id)
    offers = []
    for address in sorted(set(rows) | set(capacity)):
        if address in excluded:
            continue
        row = rows.get(address)
        spec = declared(home, row.spec_hash) if row is not None else {}
        free = capacity.get(address, Capacity()) - busy.get(address, Capacity())
        staked = row is not None and row.stake >= min_stake_per_gpu * row.gpus and row.stake > 0
        known = records.get(address) or TrackRecord(
            newcomer.score, newcomer.measured_perf, newcomer.reliability
        )
        offers.append(ProviderOffer(
            address=address,
            gpu_model=str(spec.get("gpu_model", "")),
            gpus=max(0, int(free.gpus)),
            vram_gb=float(spec.get("vram_gb", 0)),
            cpus=max(0, int(free.cpus)),
            memory_gb=max(0.0, free.memory_gb),
            node_cpus=free.node_cpus,
            node_gpus=free.node_gpus,
            machines=free.machines,
            across_nodes=free.across_nodes,
            price_per_unit=max(min_price, int(spec.get("price_per_unit", default_price))),
            priced=spec.get("price_per_unit") is not None,
            stake_ok=staked,
            jailed=row is not None and (row.tombstoned or row.jailed_until != 0),
            score=known.score,
            measured_perf=known.measured_perf,
            reliability=known.reliability,
        ))
    return offers
