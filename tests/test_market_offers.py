"""What the market offers a pass's jobs: each provider at its declared price, or at the market's
default where it declared none, and the pass's summary says so only when some provider did; what
each site says of its machines, and what a job of several nodes holds and is matched to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from ledger.db import open_ledger
from ledger.indexer.models import Provider
from ledger.specs import store_spec
from ledger.units import ONE
from market.matcher import Machine, match
from market.migrations import MARKET
from market.offers import Capacity, build_offers, job_needs, job_request
from market.service import MarketConfig, TickReport
from market.sites import capacity_of
from market.spec import validate_spec
from oracle.migrations import ORACLE

pytestmark = pytest.mark.light

PRICED, UNPRICED = "0x" + "11" * 20, "0x" + "22" * 20


def test_a_provider_without_a_declared_price_is_offered_at_the_default_and_counted(tmp_path: Path,
                                                                                   capsys) -> None:
    from scripts.market import _summary

    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    config = MarketConfig()
    with Session(engine) as session:
        for address, price in ((PRICED, {"price_per_unit": str(5 * 10**14)}), (UNPRICED, {})):
            digest = store_spec(tmp_path, {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1} | price)
            session.add(Provider(chain_id=1, address=address, spec_hash="0x" + digest.hex(), gpus=1,
                                 stake=2_000 * ONE, unbonding=0, release_time=0, jailed_until=0,
                                 slashed_total=0, registered_block=1, updated_block=1))
        session.commit()
        capacity = {a: Capacity(cpus=2, memory_gb=4) for a in (PRICED, UNPRICED)}
        offers = {o.address: o for o in build_offers(session, 1, tmp_path, 1_000 * ONE, capacity, {},
                                                     config.default_price_per_unit)}
    engine.dispose()
    assert (offers[PRICED].priced, offers[PRICED].price_per_unit) == (True, 5 * 10**14)
    default = config.default_price_per_unit
    assert (offers[UNPRICED].priced, offers[UNPRICED].price_per_unit) == (False, default)

    _summary({"assigned": 1}, TickReport(unpriced=0), config)
    assert "declared no price" not in capsys.readouterr().out, "every provider declared one: no word of it"
    _summary({"assigned": 1}, TickReport(unpriced=1), config)
    assert "1 provider(s) declared no price and ask the market's default, 0.001 SWARM per unit." in (
        capsys.readouterr().out.replace("\n", " "))


# ── machines and nodes ─────────────────────────────────────────────────────────────────

NOW = 1_800_000_000
SPEC: dict[str, Any] = {"kind": "train", "model": "mlp", "dataset": "synthetic-classification",
        "resources": {"nodes": 3, "workers": 2, "gpus_per_worker": 1, "cpus_per_worker": 4, "memory_gb": 8},
        "max_price_per_unit": "0.001", "max_units": 100, "deadline": "1h"}
BOX = {"cpus": 16.0, "gpus": 2.0, "memory_gb": 64.0}  # holds one node of SPEC: 8 CPUs, 2 GPUs, 16 GB


def info(count: int, **changes) -> dict:
    """A site's `/v1/info` capacity as provider.agent.Agent.capacity reports it."""
    return {"nodes": count, "cpus": 16.0 * count, "gpus": 2.0 * count, "memory_gb": 64.0 * count,
            "node_cpus": 16.0, "node_gpus": 2.0, "machines": [BOX] * count, "across_nodes": True} | changes


def readable(raw: Any) -> Capacity:
    """The capacity a site's info reports, which must be readable."""
    capacity = capacity_of(raw)
    assert capacity is not None, raw
    return capacity


def test_a_job_of_several_nodes_holds_each_nodes_share_and_is_requested_so() -> None:
    spec = validate_spec(SPEC, now=NOW)
    assert job_needs(spec) == Capacity(cpus=3 * 8, gpus=3 * 2, memory_gb=3 * 16)
    request = job_request(9, spec)
    assert (request.nodes, request.workers) == (3, 2)
    assert (request.total_cpus, request.total_gpus, request.total_memory_gb) == (24, 6, 48)
    one = validate_spec(SPEC | {"resources": {**SPEC["resources"], "nodes": 1}}, now=NOW)
    assert job_needs(one) == Capacity(cpus=8, gpus=2, memory_gb=16) and job_request(9, one).nodes == 1


def test_a_sites_machines_and_whether_it_runs_across_them_are_read_from_its_info() -> None:
    read = capacity_of(info(3))
    assert read is not None and read.machines == (Machine(16, 2, 64),) * 3 and read.across_nodes
    old = capacity_of({k: v for k, v in info(3).items() if k not in ("machines", "across_nodes")})
    assert old == Capacity(48, 6, 192, 16, 2), "an older site: machines unknown, not across machines"
    assert (old.machines, old.across_nodes) == (None, False)


@pytest.mark.parametrize("changes", [
    {"machines": "many"}, {"machines": [BOX, "box"]}, {"machines": [BOX | {"gpus": -1}]},
    {"machines": [BOX | {"cpus": float("inf")}]}, {"machines": [BOX | {"memory_gb": True}]},
    {"machines": [BOX] * 5_000},
])
def test_a_site_listing_its_machines_malformed_is_taken_as_not_saying(changes: dict) -> None:
    read = capacity_of(info(3, **changes))
    assert read is not None and read.machines is None and read.cpus == 48


def test_a_site_whose_totals_cannot_be_read_offers_nothing_and_across_nodes_must_be_true() -> None:
    assert capacity_of(info(3, cpus="lots")) is None and capacity_of(info(3, gpus=None)) is None
    assert capacity_of(["not", "a", "mapping"]) is None
    assert readable(info(3, across_nodes="yes")).across_nodes is False


def test_a_job_of_several_nodes_is_offered_only_the_site_with_a_machine_for_each_node(tmp_path: Path) -> None:
    """From the sites' info through the ledger's offers to the matcher: of three sites with the
    same free totals, only the one that runs across machines and has three that hold a node
    takes it; what the market's running jobs hold comes off the totals, the machines stay."""
    wide, single, old = "0x" + "33" * 20, "0x" + "44" * 20, "0x" + "55" * 20
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    with Session(engine) as session:
        for address in (wide, single, old):
            digest = store_spec(tmp_path, {"gpu_model": "cpu", "gpus": 8, "vram_gb": 1})
            session.add(Provider(chain_id=1, address=address, spec_hash="0x" + digest.hex(), gpus=8,
                                 stake=2_000 * ONE, unbonding=0, release_time=0, jailed_until=0,
                                 slashed_total=0, registered_block=1, updated_block=1))
        session.commit()
        capacity = {wide: readable(info(4)), single: readable(info(4, across_nodes=False)),
                    old: readable({k: v for k, v in info(4).items() if k != "machines"})}
        spec = validate_spec(SPEC, now=NOW)
        offers = build_offers(session, 1, tmp_path, 1, capacity, {}, 10**15)
        busy = build_offers(session, 1, tmp_path, 1, capacity, {wide: job_needs(spec)}, 10**15)
    engine.dispose()
    result = match([job_request(1, spec)], offers)
    assert [(a.job_id, a.provider) for a in result.assignments] == [(1, wide)]
    held = {o.address: o for o in busy}[wide]
    assert (held.gpus, held.cpus, held.machines) == (8 - 6, 64 - 24, (Machine(16, 2, 64),) * 4)
    explanation = match([job_request(1, spec)], busy).unmatched[1]
    assert explanation.ruled_out["nodes"] == 2 and explanation.ruled_out["capacity"] == 1
