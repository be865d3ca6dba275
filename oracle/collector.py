"""Telemetry the oracle measures itself on the Ray workers (docs/architecture.md §6): liveness probes,
many per epoch, and a benchmark challenge per provider per epoch, both written to the
ledger database as they are taken.

A probe is a tiny task pinned to the provider's nodes; it counts as up when an answer comes
back within the timeout. A challenge is a chain of matrix rounds from a fresh random seed
(compute.challenge); the oracle checks the checksum against its own computation and the
throughput against the reference for the GPU model the provider declared.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from compute.challenge import Challenge, expected_checksum, run_on_provider, verify
from compute.errors import ComputeError
from compute.placement import provider_capacity
from compute.telemetry import probe_all
from ledger.indexer.models import Provider
from ledger.services import ChallengeRecord, ProbeSample
from ledger.specs import load_spec


@dataclass(frozen=True)
class Watched:
    """A provider the oracle watches: staked on chain, with the GPU model it declared."""

    address: str
    declared_model: str


def watched_providers(session: Session, chain_id: int, home: Path) -> list[Watched]:
    """Every provider with stake or unbonding stake at risk (the ledger's view)."""
    rows = session.exec(select(Provider).where(Provider.chain_id == chain_id)).all()
    found = []
    for row in rows:
        if row.stake == 0 and row.unbonding == 0:
            continue
        found.append(Watched(row.address, declared_model(home, row.spec_hash)))
    return sorted(found, key=lambda w: w.address)


def declared_model(home: Path, spec_hash: str) -> str:
    """The GPU model in a provider's stored hardware spec ("" when this home lacks it)."""
    try:
        spec = load_spec(home, bytes.fromhex(spec_hash.removeprefix("0x")))
    except Exception:  # a spec this home does not hold, or not a hardware spec
        return ""
    return str(spec.get("gpu_model", ""))


class Collector:
    """Writes probe samples and challenge results for one chain into the ledger database."""

    def __init__(self, engine: Engine, chain_id: int, probe_timeout_s: float, challenge_size: int,
                 challenge_rounds: int, challenge_timeout_s: float = 120.0) -> None:
        self.engine = engine
        self.chain_id = chain_id
        self.probe_timeout_s = probe_timeout_s
        self.challenge_size = challenge_size
        self.challenge_rounds = challenge_rounds
        self.challenge_timeout_s = challenge_timeout_s

    def probe(self, providers: Sequence[str]) -> list[ProbeSample]:
        """Probes every provider at once and records one sample each."""
        if not providers:
            return []
        at = time.time()
        results = probe_all(list(providers), self.probe_timeout_s)
        rows = [ProbeSample(chain_id=self.chain_id, provider=r.provider, at=at, ok=r.alive,
                            latency_s=round(r.latency_s, 6), node_id=r.node_id,
                            gpus=r.gpu.gpus if r.gpu is not None else 0) for r in results]
        self._save(rows)
        return rows

    def challenge(self, providers: Iterable[Watched]) -> list[ChallengeRecord]:
        """One challenge per provider, each from a new seed; a provider with no live node gets none."""
        rows = []
        for watched in providers:
            if provider_capacity(watched.address).nodes == 0:
                continue  # no live node to challenge: the probes count it as down
            challenge = Challenge(seed=secrets.randbits(63), size=self.challenge_size, rounds=self.challenge_rounds)
            try:
                result = run_on_provider(watched.address, challenge, self.challenge_timeout_s)
            except ComputeError:
                continue  # no node answered: the probes already count it as down
            model = watched.declared_model or "unknown"
            try:
                verdict = verify(challenge, result, model)
                reference, reason, measured = verdict.reference_gflops, verdict.reason, verdict.measured_gflops
                checksum_ok, ratio = verdict.checksum_ok, verdict.ratio
            except ComputeError as exc:  # a model the reference table does not know
                checksum_ok = result.checksum == expected_checksum(challenge)
                # The challenge's own flop count, as verify() does: the node's figure is not trusted.
                measured = challenge.flops / result.seconds / 1e9 if result.seconds > 0 else 0.0
                reference, ratio, reason = 0.0, 0.0, str(exc)
            rows.append(ChallengeRecord(
                chain_id=self.chain_id, provider=watched.address, at=time.time(), declared_model=model[:32],
                seed=challenge.seed, checksum_ok=checksum_ok, measured_gflops=measured,
                reference_gflops=reference, ratio=ratio, device=result.device, gpus=result.gpus, reason=reason,
            ))
        self._save(rows)
        return rows

    def _save(self, rows: list) -> None:
        if not rows:
            return
        with Session(self.engine) as session:
            session.add_all(rows)
            session.commit()
            for row in rows:
                session.refresh(row)
                session.expunge(row)

