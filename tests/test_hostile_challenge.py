"""Bad or hostile answers to the benchmark challenge, through the oracle's real collector
against a site served by the real `make_app` over pinned TLS and authorized on the session's
anvil: a wrong commitment, a wrong opening, garbage, another seed's answer, skipped work and
a late answer each end as a recorded challenge — refuted or late — and never as an error of
the oracle's; then the epoch gives each the slashing matrix's verdict.

The hostile site computes in its own process (no Ray): it is the node's answers that are
hostile, and the site's own code serves them.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import Session, select

from anvil import dev_account
from compute.challenge import Challenge, P, timed_shape
from compute.challenge_node import checkpoints_of
from compute.proof import Prover, opening_as_json
from compute.reference import reference_gflops
from ledger import stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import devnet_committee_keys
from ledger.specs import store_spec
from market.migrations import MARKET
from oracle.collector import MAX_DEVICES, Collector, Watched, node_sample
from oracle.config import load_config
from oracle.epoch import MIN_CHALLENGES, EpochRunner
from oracle.migrations import ORACLE
from oracle.records import ChallengeRecord, ProbeSample
from provider.agent import Agent
from provider.api import SiteParts, listen, make_app
from provider.auth import NonceBook
from provider.authority import ChainAuthority
from provider.identity import make_identity
from provider.site import ChainAuthorizer
from wire.client import SiteAddress, SiteClient

TIMEOUT_S = 30.0  # the collector's challenge timeout: generous, the machine may be busy
LATE_TIMEOUT_S = 2.0  # the collector's for a late node, which sleeps a second past it
SIZE, ROUNDS = 128, 8
GPU_SECONDS = 1e-6  # a GPU's challenge at SIZE: 8 rounds of an H100's fp32 reference, 120 of its bf16


class HostileSite(Agent):
    """A site whose node answers the challenge as `mode` says; the HTTP face is the real one."""

    def __init__(self, provider: str) -> None:  # no Ray: the node is this process
        self.provider = provider
        self.mode = "honest"
        self.provers: dict[str, tuple[dict, Prover | None]] = {}
        self.seeds: list[int] = []  # every seed it was sent
        self.let_go: list[str] = []  # tickets the oracle ended unopened
        self.nodes: list | None = None  # the probe's answer, when set

    def probe(self, timeout_s=10.0):
        if self.nodes is not None:
            return self.nodes
        return [{"node_id": "hostile-node", "alive": True, "latency_s": 0.01, "gpu": {"gpus": 0}, "cpus": 1.0,
                 "gpus_declared": 0.0}]

    def challenge_ready(self, params, timeout_s, vram_mb=0.0):
        ticket = secrets.token_hex(16)
        self.provers[ticket] = (params, None)
        if self.mode == "rtx4090":  # a real RTX 4090's own account of itself, which it cannot hide
            return {
                "ticket": ticket,
                "node_id": "hostile-node",
                "device": "cuda",
                "device_name": "NVIDIA GeForce RTX 4090",
                "gpus": 1,
                "vram_touched_mb": 0.0,
                "identity": {
                    "name": "NVIDIA GeForce RTX 4090",
                    "memory_total_mb": 24564.0,
                    "uuid": "GPU-4090",
                },
            }
        return {
            "ticket": ticket,
            "node_id": "hostile-node",
            "device": "cpu",
            "device_name": "hostile",
            "gpus": 0,
        }

    def challenge_commit(self, ticket, seed, timeout_s):
        params, _ = self.provers[ticket]
        self.seeds.append(seed)
        challenge = Challenge(seed=seed + (self.mode == "other-seed"), **params)
        started = time.perf_counter()
        checkpoints = checkpoints_of(challenge)
        if self.mode == "skipped":  # made up one checkpoint instead of computing it
            checkpoints[2] = (
                np.random.default_rng(0).integers(0, P, size=checkpoints[2].shape).astype(np.uint8)
            )
        computed = time.perf_counter()
        prover = Prover(challenge, checkpoints)
        self.provers[ticket] = (params, prover)
        if self.mode == "late":
            time.sleep(timeout_s + 1.0)
        root = {"wrong-root": secrets.token_hex(32), "garbage-root": "not a root"}.get(self.mode,
                                                                                       prover.root.hex())
        if self.mode == "garbage-times":  # its own timings, which the oracle records and never trusts
            return {"root": root, "rounds_s": "0.001", "commit_s": 10**400}
        return {"root": root, "rounds_s": computed - started, "commit_s": time.perf_counter() - computed}

    def challenge_open(self, ticket, cells, timeout_s):
        from starlette.responses import Response

        _, prover = self.provers.pop(ticket)
        if not cells:  # as the site's own agent does: ended unopened
            self.let_go.append(ticket)
            return {"openings": []}
        assert prover is not None
        openings = [opening_as_json(o) for o in prover.open(cells)]
        if self.mode == "wrong-opening":  # a row changed after the commitment
            data = bytearray(base64.b64decode(openings[0]["data"]))
            data[0] = (data[0] + 1) % P
            openings[0]["data"] = base64.b64encode(bytes(data)).decode()
        if self.mode == "garbage-openings":
            return Response(b"\xff\x00 garbage", media_type="application/octet-stream")
        if self.mode == "no-openings":
            return {"openings": "none today"}
        return {"openings": openings}


@dataclass
class Served:
    site: HostileSite
    client: SiteClient


@pytest.fixture
def serve_hostile(swarm: Swarm, tmp_path: Path) -> Iterator:
    """Serves a HostileSite for a provider over HTTPS; returns it with a committee member's client."""
    import uvicorn
    from eth_account import Account

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []
    authority = ChainAuthority(swarm)
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    member = Account.from_key(devnet_committee_keys()[0])

    def serve(provider: str) -> Served:
        site = HostileSite(provider)
        authorizer = ChainAuthorizer(provider, chain_id, market, authority,
                                     NonceBook(tmp_path / provider / "nonces.db"))
        app = make_app(SiteParts(provider, chain_id, market, site, authorizer))
        identity = make_identity(tmp_path / provider, "127.0.0.1")
        listener = listen("127.0.0.1", 0)
        port = listener.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               ssl_certfile=str(identity.certificate),
                                               ssl_keyfile=str(identity.key), log_config=None,
                                               access_log=False, lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        servers.append((server, thread))
        while not server.started:
            time.sleep(0.01)
        client = SiteClient(SiteAddress(provider, f"https://127.0.0.1:{port}", identity.fingerprint),
                            lambda message: bytes(member.sign_typed_data(full_message=message).signature),
                            chain_id, market)
        return Served(site, client)

    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def engine(tmp_path: Path):
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    yield engine
    engine.dispose()


def collector(engine, swarm: Swarm, sites: dict[str, Served], timeout_s: float = TIMEOUT_S) -> Collector:
    return Collector(
        engine,
        swarm.chain.chain_id,
        lambda p: sites[p].client if p in sites else None,
        probe_timeout_s=5.0,
        challenge_size=SIZE,
        challenge_rounds=ROUNDS,
        challenge_timeout_s=timeout_s,
        gpu_challenge_size=SIZE,
        gpu_challenge_s=GPU_SECONDS,
    )


HOSTILE = {  # mode → (outcome, what the record's reason says)
    "honest": ("passed", "GFLOPS"),
    "wrong-root": ("refuted", "is not the one committed to"),
    "garbage-root": ("refuted", "is not a 32-byte Merkle root"),
    "other-seed": ("refuted", "is not the one committed to"),
    "skipped": ("refuted", "the node did not compute it"),
    "wrong-opening": ("refuted", "is not the one committed to"),
    "garbage-openings": ("refuted", "with something that is not JSON"),
    "no-openings": ("refuted", "the node sent no openings"),
    "late": ("late", f"no commitment within {LATE_TIMEOUT_S:g} s: measured as 0 GFLOPS"),
    "garbage-times": ("passed", "GFLOPS"),
}


@pytest.mark.parametrize("mode", HOSTILE)
def test_every_bad_answer_is_a_recorded_failed_challenge_never_an_error(mode: str, swarm: Swarm, engine,
                                                                        serve_hostile) -> None:
    provider = dev_account(4).address
    served = serve_hostile(provider)
    served.site.mode = mode
    timeout_s = LATE_TIMEOUT_S if mode == "late" else TIMEOUT_S
    (row,) = collector(engine, swarm, {provider: served}, timeout_s).challenge([Watched(provider, "cpu")])
    outcome, says = HOSTILE[mode]
    assert (row.outcome, row.proof_ok) == (outcome, outcome != "refuted"), row.reason
    assert says in row.reason, row.reason
    if outcome != "passed":
        assert row.measured_gflops == 0.0
    else:
        assert row.measured_gflops == pytest.approx(Challenge(1, SIZE, ROUNDS).flops / row.seconds / 1e9)
    # The node's own timings, kept apart from the oracle's: numbers it sent, else 0.
    sent_times = mode not in ("late", "garbage-times")
    assert (row.node_rounds_s > 0 and 0 < row.node_commit_s < row.seconds) == sent_times
    assert sent_times or (row.node_rounds_s, row.node_commit_s) == (0.0, 0.0)
    with Session(engine) as session:  # written to the ledger as taken
        (saved,) = session.exec(select(ChallengeRecord)).all()
    assert (saved.outcome, saved.seed, saved.device) == (outcome, row.seed, "cpu")
    assert (saved.node_rounds_s, saved.node_commit_s) == (row.node_rounds_s, row.node_commit_s)
    assert (saved.challenge_size, saved.challenge_rounds, saved.challenge_stride) == (SIZE, ROUNDS, 1)


def test_a_site_that_is_down_or_refuses_gets_no_record(swarm: Swarm, engine, serve_hostile) -> None:
    """No answer to the readying at all is the probes' to judge (down), not the challenge's."""
    provider, stranger = dev_account(4).address, dev_account(6).address
    served = serve_hostile(provider)
    # a site that answers for someone else
    sites = {provider: served, stranger: Served(served.site, SiteClient(
        SiteAddress(stranger, served.client.site.url, served.client.site.fingerprint), served.client.sign,
        swarm.chain.chain_id, swarm.market.address))}
    assert (
        collector(engine, swarm, sites).challenge(
            [Watched(stranger, "cpu"), Watched(dev_account(7).address, "cpu")]
        )
        == []
    )


def test_a_gpu_that_says_it_is_another_model_is_recorded_misidentified(swarm: Swarm, engine,
                                                                      serve_hostile) -> None:
    """An RTX 4090 registered as an H100: challenged in fp32 and bf16, its worker's NVML name and
    memory contradict the spec in both records."""
    provider = dev_account(4).address
    served = serve_hostile(provider)
    served.site.mode = "rtx4090"
    rows = collector(engine, swarm, {provider: served}).challenge([Watched(provider, "H100", vram_gb=80)])
    assert [r.precision for r in rows] == ["fp32", "bf16"]
    # Each timed to the declared H100's reference in its precision, not the CPU's 128 × 8.
    assert [(r.challenge_size, r.challenge_rounds, r.challenge_stride) for r in rows] == [
        timed_shape(reference_gflops("H100", p), SIZE, GPU_SECONDS) for p in ("fp32", "bf16")]
    assert [r.challenge_rounds for r in rows] == [8, 120]
    for row in rows:  # judged 0 on its own account: no seed sent, nothing for it to time
        assert not row.identity_ok and row.proof_ok and row.outcome == "misidentified"
        assert (row.seconds, row.ratio, row.node_rounds_s) == (0.0, 0.0, 0.0)
        assert (row.gpu_name, row.gpu_uuid, row.gpu_memory_mb) == (
            "NVIDIA GeForce RTX 4090",
            "GPU-4090",
            24564.0,
        )
        assert row.reason.startswith(
            "NVML names the node's GPU 'NVIDIA GeForce RTX 4090', not the declared H100;"
        )
    assert served.site.seeds == [] and len(served.site.let_go) == 2, "no seed sent; each worker let go"


def test_the_epoch_tombstones_a_refuted_proof_and_slashes_a_late_or_misidentified_node(
    swarm: Swarm, swarm_home: Path, engine, serve_hostile,
) -> None:
    forger, sleeper, pretender = (dev_account(i).address for i in (4, 6, 7))
    for index, model in ((4, "cpu"), (6, "cpu"), (7, "H100")):
        sender = swarm.sender(dev_account(index).key)
        stake.register(
            swarm, sender, store_spec(swarm_home, {"gpu_model": model, "gpus": 1, "vram_gb": 80}), 1
        )
        stake.stake(swarm, sender, 2_000 * 10**18)
    sites = {p: serve_hostile(p) for p in (forger, sleeper, pretender)}
    for p, mode in ((forger, "wrong-opening"), (sleeper, "late"), (pretender, "rtx4090")):
        sites[p].site.mode = mode
    runner = EpochRunner(swarm, engine, swarm_home, load_config(), swarm.sender(dev_account(0).key),
                         devnet_committee_keys(), epoch_length_s=1.0)
    started = time.time()
    watched = [Watched(forger, "cpu"), Watched(sleeper, "cpu"), Watched(pretender, "H100", vram_gb=80)]
    oracle = collector(engine, swarm, sites)
    for _ in range(3):  # the epoch begins with its first probe; the nodes answer every one
        assert all(sample.ok for sample in oracle.probe([forger, sleeper, pretender]))
    for _ in range(MIN_CHALLENGES):
        oracle.challenge([w for w in watched if w.address != sleeper])
        collector(engine, swarm, sites, LATE_TIMEOUT_S).challenge(
            [w for w in watched if w.address == sleeper]
        )
    runner.indexer.sync()
    with Session(engine) as session:
        record = runner.aggregate(session, max(time.time(), started + 1.0))
        assert record is not None
        slashes = {s["provider"]: s for s in record.slashes}
    assert slashes[forger]["row"] == "fraud" and slashes[forger]["tombstone"]
    assert slashes[forger]["reason"] == "fraud: challenge proof refuted"
    assert slashes[sleeper]["row"] == "misrepresentation" and not slashes[sleeper]["tombstone"]
    assert slashes[pretender]["row"] == "misrepresentation" and not slashes[pretender]["tombstone"]


# ── probes ─────────────────────────────────────────────────────────────────────────


def h100_reading(index: int, utilization: float, used_mb: float, temperature: float,
                 power: float | None) -> dict:
    """A DeviceReading as compute.nvml makes it on an H100, as the site sends it."""
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "utilization_pct": utilization,
        "memory_used_mb": used_mb,
        "memory_total_mb": 81559.0,
        "temperature_c": temperature,
        "power_w": power,
    }


def test_a_gpu_nodes_telemetry_is_kept_with_its_probe(swarm: Swarm, engine, serve_hostile) -> None:
    """A node's NVML readings travel with its probe into the ledger: utilization averaged over
    its GPUs, memory and power summed, the hottest temperature; a field NVML could not read
    (None) is left out of its figure."""
    provider = dev_account(4).address
    served = serve_hostile(provider)
    devices = [h100_reading(0, 90.0, 40_000.0, 70.0, 600.0), h100_reading(1, 60.0, 20_000.0, 65.0, None)]
    served.site.nodes = [{"node_id": "gpu-node", "alive": True, "latency_s": 0.02, "cpus": 64.0,
                          "gpus_declared": 2.0, "gpu": {"gpus": 2, "devices": devices, "error": None}}]
    oracle = collector(engine, swarm, {provider: served})
    (row,) = oracle.probe([provider])
    assert row.ok and (row.node_id, row.gpus) == ("gpu-node", 2) and oracle.devices == 2.0
    assert (row.gpu_utilization_pct, row.gpu_memory_used_mb, row.gpu_temperature_c, row.gpu_power_w) == (
        75.0, 60_000.0, 70.0, 600.0)
    with Session(engine) as session:
        (saved,) = session.exec(select(ProbeSample)).all()
    assert (saved.gpu_utilization_pct, saved.gpu_power_w) == (75.0, 600.0)


def test_a_garbled_probe_answer_is_a_node_down_never_an_error(swarm: Swarm, engine, serve_hostile) -> None:
    provider = dev_account(4).address
    served = serve_hostile(provider)
    honest = {"node_id": "n", "alive": True, "latency_s": 0.01, "gpu": {"gpus": 0}, "cpus": 1.0}
    served.site.nodes = [
        "a string", 7, None, [], {}, {"alive": True}, {"node_id": "n", "alive": "yes"},
        honest | {"node_id": {"nested": 1}},
        honest | {"gpu": "x", "latency_s": "fast", "cpus": 10**30},  # answered: garbage figures are left out
        honest | {"gpu": {"gpus": "eight", "devices": [1, "x", {"utilization_pct": 1e308, "power_w": -5}]}},
    ]
    rows = collector(engine, swarm, {provider: served}).probe([provider])
    assert [r.ok for r in rows] == [False] * 8 + [True, True]
    for row in rows[8:]:
        assert row.gpus == 0 and row.gpu_utilization_pct is None and row.gpu_power_w is None
    assert rows[8].latency_s == 5.0  # no number: the probe's timeout


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=16), inner, max_size=4),
    max_leaves=12,
)
NODE_KEYS = st.sampled_from(["node_id", "alive", "latency_s", "gpu", "cpus", "gpus_declared"])
DEVICE = st.dictionaries(st.sampled_from(["utilization_pct", "memory_used_mb", "temperature_c", "power_w"]),
                         st.none() | st.booleans() | st.integers() | st.floats(), max_size=4)


@settings(max_examples=300, deadline=None)
@given(node=JSON | st.dictionaries(NODE_KEYS, JSON | st.builds(lambda d: {"gpus": 1, "devices": d},
                                                                     st.lists(DEVICE, max_size=4))))
def test_any_node_answer_is_one_sample_within_bounds(node) -> None:
    row, devices = node_sample(1, "0xprovider", 100.0, node, timeout_s=5.0)
    assert row.ok == (
        isinstance(node, dict) and node.get("alive") is True and isinstance(node.get("node_id"), str)
    )
    assert 0.0 <= row.latency_s <= 5.0 and 0 <= row.gpus <= MAX_DEVICES and 0.0 <= devices <= MAX_DEVICES
    assert row.gpu_utilization_pct is None or 0.0 <= row.gpu_utilization_pct <= 100.0
    assert row.gpu_temperature_c is None or -50.0 <= row.gpu_temperature_c <= 200.0
    for figure in (row.gpu_memory_used_mb, row.gpu_power_w):
        assert figure is None or 0.0 <= figure < float("inf")
