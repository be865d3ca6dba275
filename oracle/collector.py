"""Telemetry the oracle measures itself through the providers' sites (docs/architecture.md §6):
liveness probes, many per epoch, and a benchmark challenge per provider per epoch, both
written to the ledger database as they are taken.

A probe asks a provider's site, with a request signed by a committee member's key, to run a
tiny task on each of its live nodes: one sample per node, up when its answer comes back
within the timeout, so uptime is measured per node. A site that does not answer, or a
provider with no site, is one sample down. A challenge is a chain of matrix rounds from a fresh
random seed (compute.challenge) that the node commits to and proves by opening the rows the
oracle samples (compute.proof); the oracle times it itself — from sending the seed to
receiving the commitment — and judges that throughput against the reference for the GPU model
the provider declared. An answer that does not prove the challenge is a refuted challenge, one
that comes too late a challenge measured at 0 GFLOPS: never an error of the oracle's.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from compute.challenge import Challenge, Declared, as_number, identity_problem, judge, timed_shape
from compute.errors import ComputeError
from compute.proof import ProofError, check, opening_from_json, root_from_hex, sample
from compute.reference import precisions, reference_gflops
from core.errors import SwarmError
from ledger.indexer.models import Provider
from ledger.specs import load_spec
from oracle.records import ChallengeRecord, ProbeSample
from wire.client import SiteAddress, SiteClient, SiteUnreachable


@dataclass(frozen=True)
class Watched:
    """A provider the oracle watches: staked on chain, with the hardware it declared."""

    address: str
    declared_model: str
    vram_gb: float = 0.0
    gpu_uuids: tuple[str, ...] = ()

    @property
    def declared(self) -> Declared:
        return Declared(self.declared_model or "unknown", self.vram_gb, self.gpu_uuids)


def watched_providers(session: Session, chain_id: int, home: Path) -> list[Watched]:
    """Every provider with stake or unbonding stake at risk (the ledger's view)."""
    rows = session.exec(select(Provider).where(Provider.chain_id == chain_id)).all()
    found = []
    for row in rows:
        if row.stake == 0 and row.unbonding == 0:
            continue
        found.append(declared_hardware(home, row.address, row.spec_hash))
    return sorted(found, key=lambda w: w.address)


def declared_model(home: Path, spec_hash: str) -> str:
    """The GPU model in a provider's stored hardware spec ("" when this home lacks it)."""
    return declared_hardware(home, "", spec_hash).declared_model


def declared_hardware(home: Path, address: str, spec_hash: str) -> Watched:
    """What a provider's stored hardware spec declares: its GPU model, VRAM per GPU and, if it
    lists them, its GPUs' UUIDs (nothing when this home lacks the spec or it is malformed)."""
    spec = _stored_spec(home, spec_hash)
    if spec is None:
        return Watched(address, "")
    uuids = spec.get("gpu_uuids") or ()
    vram = spec.get("vram_gb") or 0.0
    return Watched(address, str(spec.get("gpu_model", "")),
                   float(vram) if isinstance(vram, int | float) and not isinstance(vram, bool) else 0.0,
                   tuple(str(u) for u in uuids) if isinstance(uuids, list) else ())


def _stored_spec(home: Path, spec_hash: str) -> dict[str, Any] | None:
    """The hardware spec stored under `spec_hash`, or None: this home lacks it, the file was
    altered, or it holds no JSON object. A bug in reading it is not one of these, and is raised."""
    try:
        spec = load_spec(home, bytes.fromhex(spec_hash.removeprefix("0x")))
    except (SwarmError, ValueError):  # not held here, altered, not JSON, or a hash that is not hex
        return None
    return spec if isinstance(spec, dict) else None


def site_addresses(engine: Engine, chain_id: int, home: Path) -> Callable[[str], SiteAddress | None]:
    """Where providers' sites are, from their registered hardware specs (None: no site)."""

    def address_of(provider: str) -> SiteAddress | None:
        with Session(engine) as session:
            row = session.get(Provider, (chain_id, provider))
        if row is None:
            return None
        spec = _stored_spec(home, row.spec_hash) or {}
        url, fingerprint = spec.get("site_url"), spec.get("site_fingerprint")
        if not (isinstance(url, str) and url and isinstance(fingerprint, str) and fingerprint):
            return None
        return SiteAddress(provider, url, fingerprint)

    return address_of


def site_clients(engine: Engine, chain_id: int, home: Path, sign: Callable[[dict], bytes], market: str,
                 timeout_s: float = 30.0) -> Callable[[str], SiteClient | None]:
    """Signed clients for providers' sites, found from their registered hardware specs."""
    address_of = site_addresses(engine, chain_id, home)

    def site_of(provider: str) -> SiteClient | None:
        address = address_of(provider)
        return None if address is None else SiteClient(address, sign, chain_id, market, timeout_s=timeout_s)

    return site_of


MAX_NODES = 4096  # node answers read from one site's probe; a site's further ones are dropped
MAX_DEVICES = 1024  # GPUs or CPUs one node may add to the network's capacity


def node_sample(chain_id: int, provider: str, at: float, node: Any,
                timeout_s: float) -> tuple[ProbeSample, float]:
    """One node's answer to a probe as a sample, with the devices it adds to the network's live
    capacity (its declared GPUs, else its CPUs). An answer that is not one, from a broken or
    hostile site, is the node down; a telemetry figure that is no plausible reading is None."""
    down = ProbeSample(chain_id=chain_id, provider=provider, at=at, ok=False, latency_s=timeout_s)
    if not isinstance(node, dict) or not isinstance(node.get("alive"), bool) \
            or not isinstance(node.get("node_id"), str):
        return down, 0.0
    gpu: dict[str, Any] = node["gpu"] if isinstance(node.get("gpu"), dict) else {}
    gpus = gpu.get("gpus")
    latency = reading(node.get("latency_s"), 0.0, timeout_s)
    row = ProbeSample(
        chain_id=chain_id,
        provider=provider,
        at=at,
        ok=node["alive"],
        node_id=node["node_id"][:64],
        latency_s=round(timeout_s if latency is None else latency, 6),
        gpus=gpus if type(gpus) is int and 0 <= gpus <= MAX_DEVICES else 0,
        **gpu_telemetry(gpu.get("devices")),
    )
    if not node["alive"]:
        return row, 0.0
    declared = reading(node.get("gpus_declared"), 0.0, MAX_DEVICES) or reading(
        node.get("cpus"), 0.0, MAX_DEVICES
    )
    return row, declared or 0.0


def gpu_telemetry(devices: Any) -> dict[str, Any]:
    """A node's GPUs as NVML read them (compute.nvml.DeviceReading, as a site sends them) in the
    probe sample's four figures: mean utilization, memory used summed, the hottest GPU's
    temperature and power summed — each over the GPUs that gave a plausible reading."""
    if not isinstance(devices, list):
        devices = []
    devices = [d for d in devices[:MAX_DEVICES] if isinstance(d, dict)]

    def each(key: str, low: float, high: float) -> list[float]:
        return [v for v in (reading(d.get(key), low, high) for d in devices) if v is not None]

    utilization, memory = each("utilization_pct", 0.0, 100.0), each("memory_used_mb", 0.0, 1 << 24)
    temperature, power = each("temperature_c", -50.0, 200.0), each("power_w", 0.0, 10_000.0)
    return {"gpu_utilization_pct": sum(utilization) / len(utilization) if utilization else None,
            "gpu_memory_used_mb": sum(memory) if memory else None,
            "gpu_temperature_c": max(temperature) if temperature else None,
            "gpu_power_w": sum(power) if power else None}


def reading(value: Any, low: float, high: float) -> float | None:
    """A number a site sent, if it is one within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if low <= value <= high else None  # NaN compares false: None


class Collector:
    """Writes probe samples and challenge results for one chain into the ledger database.

    `site_of` gives a signed client for a provider's site, or None when it registered none."""

    def __init__(self, engine: Engine, chain_id: int, site_of: Callable[[str], SiteClient | None],
                 probe_timeout_s: float, challenge_size: int, challenge_rounds: int,
                 challenge_timeout_s: float = 120.0, gpu_challenge_size: int = 8192,
                 gpu_challenge_s: float = 2.0) -> None:
        self.engine = engine
        self.chain_id = chain_id
        self.site_of = site_of
        self.probe_timeout_s = probe_timeout_s
        self.challenge_size = challenge_size
        self.challenge_rounds = challenge_rounds
        self.challenge_timeout_s = challenge_timeout_s
        self.gpu_challenge_size = gpu_challenge_size
        self.gpu_challenge_s = gpu_challenge_s
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
        for provider, nodes in zip(providers, answers, strict=True):
            if not nodes:
                rows.append(ProbeSample(chain_id=self.chain_id, provider=provider, at=at, ok=False,
                                        latency_s=self.probe_timeout_s))
                continue
            for node in nodes[:MAX_NODES]:
                row, found = node_sample(self.chain_id, provider, at, node, self.probe_timeout_s)
                rows.append(row)
                devices += found
        self.devices = devices
        self._save(rows)
        return rows

    def _probe_site(self, provider: str) -> list[dict]:
        client = self.site_of(provider)
        if client is None:
            return []
        try:
            return list(client.probe(self.probe_timeout_s)["nodes"])
        except (SwarmError, KeyError, TypeError):  # down, refusing, or answering nonsense
            return []

    def challenge(self, providers: Iterable[Watched]) -> list[ChallengeRecord]:
        """One challenge per provider, each from a new seed. A site that is down, refuses to
        ready a worker or has none free gets no record (the probes judge whether it is up);
        one that took the challenge gets one whatever it answers."""
        rows = []
        for watched in providers:
            client = self.site_of(watched.address)
            if client is None:
                continue  # no site to challenge: the probes count it as down
            try:
                wanted = precisions(watched.declared_model)
            except ComputeError:  # a model the reference table does not know
                wanted = ("fp32",)
            for precision in wanted:  # fp32, and a GPU's tensor-core precision
                row = self._challenge_site(client, watched, precision)
                if row is not None:
                    rows.append(row)
        self._save(rows)
        return rows

    def shape(self, declared: Declared, precision: str) -> tuple[int, int, int]:
        """(size, rounds, stride) of a provider's challenge: the configured one for a CPU node;
        for a GPU, gpu_challenge_s at its declared model's reference in `precision`
        (compute.challenge.timed_shape)."""
        if declared.gpu:
            try:
                reference = reference_gflops(declared.model, precision)
            except ComputeError:
                reference = 0.0
            if reference > 0:
                return timed_shape(reference, self.gpu_challenge_size, self.gpu_challenge_s)
        return self.challenge_size, self.challenge_rounds, 1

    def _challenge_site(
        self, client: SiteClient, watched: Watched, precision: str = "fp32"
    ) -> ChallengeRecord | None:
        """Readies a worker, times seed → root, samples the cells, checks the openings, and holds
        the worker's account of its GPU to the declared spec."""
        declared = watched.declared
        size, rounds, stride = self.shape(declared, precision)
        challenge = Challenge(seed=secrets.randbits(63), size=size, rounds=rounds, stride=stride,
                              precision=precision)
        vram_mb = declared.vram_gb * 1e9 / (1 << 20) if declared.gpu else 0.0
        try:
            worker = client.challenge_ready(challenge.params(), self.challenge_timeout_s, vram_mb)
            ticket = str(worker["ticket"])
        except (SwarmError, ValueError, KeyError, TypeError):
            return None
        device, gpus = str(worker.get("device", ""))[:16], worker.get("gpus", 0)  # a dict: it had a ticket
        problem = identity_problem(declared, worker)
        found: dict[str, Any] = worker["identity"] if isinstance(worker.get("identity"), dict) else {}
        record = partial(
            ChallengeRecord,
            chain_id=self.chain_id,
            provider=watched.address,
            at=time.time(),
            declared_model=(watched.declared_model or "unknown")[:32],
            seed=challenge.seed,
            precision=precision,
            challenge_size=challenge.size,
            challenge_rounds=challenge.rounds,
            challenge_stride=challenge.stride,
            device=device,
            gpus=gpus if type(gpus) is int else 0,
            identity_ok=problem is None,
            gpu_name=str(found.get("name", ""))[:96],
            gpu_uuid=str(found.get("uuid", ""))[:96],
            gpu_memory_mb=as_number(found.get("memory_total_mb")),
            vram_touched_mb=as_number(worker.get("vram_touched_mb")),
        )
        if problem is not None:
            # The worker's own account contradicts the spec: judged 0 whatever it computes, so no
            # seed is sent (a CPU claiming an H100 would otherwise grind at the H100's challenge),
            # and the worker is let go at once, opened for nothing.
            with contextlib.suppress(SwarmError, ValueError):  # it ends by itself soon after anyway
                client.challenge_open(ticket, [], self.challenge_timeout_s)
            return record(proof_ok=True, outcome="misidentified", seconds=0.0, measured_gflops=0.0,
                          reference_gflops=0.0, ratio=0.0, reason=f"{problem}; no seed sent: judged 0"[:500])
        answer, seconds = None, self.challenge_timeout_s
        try:
            answer, seconds = client.challenge_commit(ticket, challenge.seed, self.challenge_timeout_s)
        except SiteUnreachable:
            pass  # no answer in time: late
        except (SwarmError, ValueError) as exc:  # a refusal or a garbled answer instead of a root
            answer = {"error": str(exc)}
        # The node's own timings of its rounds and its commitment: recorded, never judged.
        reported = answer if isinstance(answer, dict) else {}
        record = partial(record, node_rounds_s=as_number(reported.get("rounds_s")),
                         node_commit_s=as_number(reported.get("commit_s")))
        if answer is None or seconds > self.challenge_timeout_s:
            return record(
                proof_ok=True,
                outcome="late",
                seconds=seconds,
                measured_gflops=0.0,
                reference_gflops=0.0,
                ratio=0.0,
                reason=f"no commitment within {self.challenge_timeout_s:g} s: measured as 0 GFLOPS",
            )
        try:
            root = root_from_hex(answer.get("root") if isinstance(answer, dict) else None)
            cells = sample(challenge)
            opened = client.challenge_open(ticket, cells, self.challenge_timeout_s)
            openings = opened.get("openings") if isinstance(opened, dict) else None
            if not isinstance(openings, list):
                raise ProofError("the node sent no openings")
            check(challenge, root, cells, [opening_from_json(o) for o in openings])
        except (ProofError, SwarmError, ValueError) as exc:
            # A refusal, no answer or a garbled one where an opening was due: no proof either.
            return record(proof_ok=False, outcome="refuted", seconds=seconds, measured_gflops=0.0,
                          reference_gflops=0.0, ratio=0.0, reason=f"proof refuted: {exc}"[:500])
        try:
            verdict = judge(challenge, seconds, watched.declared_model or "unknown")
            measured, reference, ratio, reason = (
                verdict.measured_gflops,
                verdict.reference_gflops,
                verdict.ratio,
                verdict.reason,
            )
        except ComputeError as exc:  # a model the reference table does not know
            measured, reference, ratio, reason = challenge.flops / seconds / 1e9, 0.0, 0.0, str(exc)
        return record(proof_ok=True, outcome="passed", seconds=seconds, measured_gflops=measured,
                      reference_gflops=reference, ratio=ratio, reason=reason)

    def _save(self, rows: list) -> None:
        save(self.engine, rows)


def save(engine: Engine, rows: list) -> None:
    """Writes the oracle's measurement rows, which stay readable after (their ids filled in)."""
    if not rows:
        return
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
        for row in rows:
            session.refresh(row)
            session.expunge(row)

