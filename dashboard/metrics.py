"""`/metrics`: the ledger as Prometheus series, read from the database at every scrape.

A collector of its own on a fresh CollectorRegistry, so the page never exports another
library's process metrics by accident and two apps in one process never clash. Token
amounts are floats of SWARM here; the JSON API keeps them exact in wei.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlmodel import Session, col, func, select

from dashboard.data import (
    JOB_STATUSES,
    OPEN_STATUSES,
    PROVIDER_STATES,
    Source,
    latest_gpu_telemetry,
    latest_scores,
    probe_counts,
    provider_state,
    tokens,
)
from ledger.db import database_errors
from ledger.indexer.models import Cursor, Job, Provider, SlashRow
from market.records import MARKET_STATES, MarketJob, MarketTransition
from oracle.records import ORACLE_STATES, OracleEpoch

# name (a counter's without its _total suffix) → help; docs/dashboard.md's table follows this list.
METRICS = {
    "swarm_ledger_indexed_block": "the last block the ledger has indexed",
    "swarm_providers": "registered providers by state (active, jailed, tombstoned)",
    "swarm_provider_stake_tokens": "a provider's active stake, in SWARM",
    "swarm_provider_uptime": "a provider's uptime in the latest epoch that scored it (0-1)",
    "swarm_provider_performance": "a provider's measured performance / the reference of its GPU model",
    "swarm_provider_reliability": "a provider's reliability (lower bound of its job outcomes' posterior)",
    "swarm_provider_reward_tokens": "a provider's cumulative oracle rewards, in SWARM",
    "swarm_jobs": "on-chain jobs by status",
    "swarm_market_jobs": "the market service's jobs by state",
    "swarm_escrow_tokens": "SWARM held in escrow by open jobs (posted, assigned, completed, disputed)",
    "swarm_market_transitions": "state changes the market service made, by the state entered",
    "swarm_oracle_epoch": "the latest epoch the oracle recorded",
    "swarm_oracle_epochs": "oracle epochs by state",
    "swarm_oracle_emission_tokens": "SWARM the oracle's epochs emitted as rewards",
    "swarm_network_utilization": "network utilization the latest epoch measured (0-1)",
    "swarm_slashes": "slashes StakingVault applied, by reason",
    "swarm_slashed_tokens": "SWARM taken by slashes, by reason",
    "swarm_probe_samples": "the oracle's liveness probes, by whether a node answered",
    "swarm_node_gpu_utilization_pct": "a node's GPU utilization at the newest probe, mean of its GPUs",
    "swarm_node_gpu_memory_used_mb": "a node's GPU memory in use at the newest probe, summed, in MiB",
    "swarm_node_gpu_temperature_c": "a node's hottest GPU at the newest probe, in °C (NVML)",
    "swarm_node_gpu_power_w": "a node's GPU power draw at the newest probe, over its GPUs, in watts (NVML)",
}

# ProbeSample field → the gauge it feeds, one series a node of a provider.
GPU_TELEMETRY = {"gpu_utilization_pct": "swarm_node_gpu_utilization_pct",
                 "gpu_memory_used_mb": "swarm_node_gpu_memory_used_mb",
                 "gpu_temperature_c": "swarm_node_gpu_temperature_c", "gpu_power_w": "swarm_node_gpu_power_w"}


class LedgerCollector(Collector):
    """Reads the ledger database afresh at each scrape."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        src = self.source
        with database_errors(src.database), Session(src.engine) as session:
            yield from self._chain(session, src.chain_id)
            yield from self._providers(session, src.chain_id)
            yield from self._jobs(session, src.chain_id)
            yield from self._oracle(session, src.chain_id)

    def _chain(self, session: Session, chain_id: int) -> Iterator[Metric]:
        cursor = session.get(Cursor, chain_id)
        yield _gauge("swarm_ledger_indexed_block", value=cursor.block_number if cursor else 0)

    def _providers(self, session: Session, chain_id: int) -> Iterator[Metric]:
        rows = session.exec(select(Provider).where(Provider.chain_id == chain_id)).all()
        states = Counter(provider_state(p) for p in rows)
        yield _by("swarm_providers", "state", {s: states.get(s, 0) for s in PROVIDER_STATES})
        yield _by("swarm_provider_stake_tokens", "provider", {p.address: tokens(p.stake) for p in rows})
        scores = latest_scores(session, chain_id)
        for name, field in (
            ("uptime", "uptime"),
            ("performance", "performance"),
            ("reliability", "reliability"),
        ):
            yield _by(f"swarm_provider_{name}", "provider", {a: getattr(s, field) for a, s in scores.items()})
        yield _by("swarm_provider_reward_tokens", "provider",
                  {a: tokens(s.cumulative_wei) for a, s in scores.items()}, counter=True)

    def _jobs(self, session: Session, chain_id: int) -> Iterator[Metric]:
        jobs = session.exec(select(Job.status, Job.escrow).where(Job.chain_id == chain_id)).all()
        statuses = Counter(status for status, _ in jobs)
        yield _by("swarm_jobs", "status", {s: statuses.get(s, 0) for s in JOB_STATUSES})
        market = Counter(session.exec(select(MarketJob.state).where(MarketJob.chain_id == chain_id)).all())
        yield _by("swarm_market_jobs", "state", {s: market.get(s, 0) for s in MARKET_STATES})
        yield _gauge("swarm_escrow_tokens", value=tokens(sum(e for s, e in jobs if s in OPEN_STATUSES)))
        moves = dict(session.exec(select(MarketTransition.to_state, func.count())
                                  .where(MarketTransition.chain_id == chain_id)
                                  .group_by(MarketTransition.to_state)).all())
        yield _by(
            "swarm_market_transitions", "to_state", {s: moves.get(s, 0) for s in MARKET_STATES}, counter=True
        )

    def _oracle(self, session: Session, chain_id: int) -> Iterator[Metric]:
        epochs = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == chain_id)
                              .order_by(col(OracleEpoch.epoch))).all()
        latest = epochs[-1] if epochs else None
        yield _gauge("swarm_oracle_epoch", value=latest.epoch if latest else 0)
        states = Counter(e.state for e in epochs)
        yield _by("swarm_oracle_epochs", "state", {s: states.get(s, 0) for s in ORACLE_STATES})
        yield _counter("swarm_oracle_emission_tokens", tokens(sum(e.emission_wei for e in epochs)))
        yield _gauge("swarm_network_utilization", value=latest.utilization if latest else 0.0)
        slashes = session.exec(
            select(SlashRow.reason, SlashRow.amount).where(SlashRow.chain_id == chain_id)
        ).all()
        counts: Counter[str] = Counter()
        taken: Counter[str] = Counter()
        for reason, amount in slashes:
            counts[reason] += 1
            taken[reason] += amount
        yield _by("swarm_slashes", "reason", dict(counts), counter=True)
        yield _by("swarm_slashed_tokens", "reason", {r: tokens(w) for r, w in taken.items()}, counter=True)
        probes = probe_counts(session, chain_id)
        yield _by("swarm_probe_samples", "ok", {"true": probes.get(True, 0), "false": probes.get(False, 0)},
                  counter=True)
        nodes = latest_gpu_telemetry(session, chain_id)
        for field, name in GPU_TELEMETRY.items():
            family = GaugeMetricFamily(name, METRICS[name], labels=["provider", "node"])
            for sample in nodes:
                if getattr(sample, field) is not None:
                    family.add_metric([sample.provider, sample.node_id or ""], getattr(sample, field))
            yield family


def _gauge(name: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], value=value)


def _counter(name: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, METRICS[name], value=value)


def _by(name: str, label: str, values: dict[str, float], counter: bool = False) -> Metric:
    family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, METRICS[name], labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([str(key)], value)
    return family


def registry(source: Source) -> CollectorRegistry:
    """A registry holding only the ledger's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector(source))
    return reg
