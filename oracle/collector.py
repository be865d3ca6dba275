"""Telemetry the oracle measures itself through the providers' sites (docs/architecture.md §6):
liveness probes, many per epoch, and a benchmark challenge per provider per epoch, both
written to the ledger database as they are taken.

A probe asks a provider's site, with a request signed by a committee member's key, to run a
tiny task on each of its live nodes: one sample per node, up when its answer comes back
within the timeout, so uptime is measured per node. A site that does not answer, or a
provider with no site, is one sample down. A challenge is a chain of matrix rounds from a fresh random seed
(compute.challenge); the oracle checks the checksum against its own computation and the
throughput against the reference for the GPU model the provider declared.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from compute.challenge import Challenge, ChallengeResult, expected_checksum, verify
from compute.errors import ComputeError
from compute.site_client import SiteClient
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


def site_clients(engine: Engine, chain_id: int, home: Path, sign: Callable[[dict], bytes], market: str,
                 timeout_s: float = 30.0) -> Callable[[str], SiteClient | None]:
    """Signed clients for providers' sites, found from their registered hardware specs."""
    from compute.site_client import SiteAddress

    def site_of(provider: str) -> SiteClient | None:
        with Session(engine) as session:
            row = session.get(Provider, (chain_id, provider))
        if row is None:
            return None
        try:
            spec = load_spec(home, bytes.fromhex(row.spec_hash.removeprefix("0x")))
        except Exception:  # a spec this home does not hold
            return None
        if not spec.get("site_url") or not spec.get("site_fingerprint"):
            return None
        return SiteClient(SiteAddress(provider, spec["site_url"], spec["site_fingerprint"]), sign, chain_id, market,
                          timeout_s=timeout_s)

    return site_of


class Collector:
    """Writes probe samples and challenge results for one chain into the ledger database.

    `site_of` gives a signed client for a provider's site, or None when it registered none."""

    def __init__(self, engine: Engine, chain_id: int, site_of: Callable[[str], SiteClient | None],
                 probe_timeout_s: float, challenge_size: int, challenge_rounds: int,
                 challenge_timeout_s: float = 120.0) -> None:
        self.engine = engine
        self.chain_id = chain_id
        self.site_of = site_of
        self.probe_timeout_s = probe_timeout_s
        self.challenge_size = challenge_size
        self.challenge_rounds = challenge_rounds
        self.challenge_timeout_s = challenge_timeout_s
        self.devices = 0.0  # GPUs (or CPUs where none) of the live nodes the last probe round found

    def probe(self, providers: Sequence[str]) -> list[ProbeSample]:
        """Probes every provider's site at once: one sample per node, or one down sample for a
        site that did not answer."""
        if not providers:
            return []
        at = time.time()
        with ThreadPoolExecutor(max_workers=min(16, len(providers))) as pool:
            answers = list(pool.map(self._probe_site, providers))
        rows, devices = [], 0.0
        for provider, nodes in zip(providers, answers):
            if not nodes:
                rows.append(ProbeSample(chain_id=self.chain_id, provider=provider, at=at, ok=False,
                                        latency_s=self.probe_timeout_s))
                continue
            for node in nodes:
                gpus = int((node.get("gpu") or {}).get("gpus", 0))
                rows.append(ProbeSample(chain_id=self.chain_id, provider=provider, at=at, ok=bool(node["alive"]),
                                        latency_s=round(float(node.get("latency_s", self.probe_timeout_s)), 6),
                                        node_id=str(node["node_id"])[:64], gpus=gpus))
                if node["alive"]:
                    devices += float(node.get("gpus_declared") or 0) or float(node.get("cpus") or 0)
        self.devices = devices
        self._save(rows)
        return rows

    def _probe_site(self, provider: str) -> list[dict]:
        client = self.site_of(provider)
        if client is None:
            return []
        try:
            return list(client.probe(self.probe_timeout_s)["nodes"])
        except (ComputeError, KeyError, TypeError):
            return []

    def challenge(self, providers: Iterable[Watched]) -> list[ChallengeRecord]:
        """One challenge per provider, each from a new seed; a provider with no live node gets none."""
        rows = []
        for watched in providers:
            client = self.site_of(watched.address)
            if client is None:
                continue  # no site to challenge: the probes count it as down
            challenge = Challenge(seed=secrets.randbits(63), size=self.challenge_size, rounds=self.challenge_rounds)
            try:
                result = ChallengeResult(**client.challenge(asdict(challenge), self.challenge_timeout_s))
            except (ComputeError, TypeError, ValueError):
                continue  # the site did not answer: the probes already count it as down
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

