"""A job of several nodes through the real market, on the session's network of sites
(tests/sites.py): provider A's site has two nodes and runs leases across them (its devnet
home's shared directory), B's and C's one each.

The buyer posts the repository's digits example (examples/digits) as a `ray` job of two nodes:
the market offers it to A alone, A's site runs the lease on both its machines, the job completes
on chain with units for both nodes, and the buyer's result verifies against the chain's
resultHash. The same job on one machine learns the digits as well.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from anvil import dev_account
from ledger import stake
from ledger.client import Swarm
from ledger.jobs import JobStatus, job_info
from ledger.specs import store_spec
from market.service import MarketService
from provider.lease.network import node_address
from provider.lease.outcome import Outcome
from tests.sites import PROVIDER_A, PROVIDER_B, PROVIDER_C, SiteNetwork
from tests.test_market_service import (  # noqa: F401 -- the fixtures are the market service's own
    BUYER,
    MILLI,
    drive,
    in_state,
    lease_dir,
    ledger_engine,
    post,
    providers,
    record,
    service,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits"
# B and C, one machine each, ask less than A: only what a job of two nodes needs sends it to A.
CHEAPER = {PROVIDER_B: MILLI // 10, PROVIDER_C: MILLI // 5}


def digits_job(storage: Path, data: Path, nodes: int, **over) -> dict:
    """examples/digits/job.yaml as a buyer posts it, its Ray Train script given a worker on each node."""
    return {
        "kind": "ray", "code": str(EXAMPLE / "code"), "inputs": {"digits": str(data)},
        "output": str(storage / "results"),
        "resources": {"nodes": nodes, "workers": 1, "cpus_per_worker": 1, "memory_gb": 3},
        "max_price_per_unit": "0.001", "max_units": 1_200, "deadline": "1h",
        "params": {"entrypoint": f"python train.py --data inputs/digits --workers {nodes} --epochs 4"},
    } | over


@pytest.fixture
def digits(tmp_path: Path) -> Path:
    from compute.data import write_digits

    path = tmp_path / "digits.parquet"
    write_digits(path)
    return path


@pytest.fixture
def cheaper(swarm: Swarm, swarm_home: Path, site_network: SiteNetwork, providers: dict[str, int]) -> None:  # noqa: F811
    """B and C declare prices under A's."""
    for account, address in ((2, PROVIDER_B), (3, PROVIDER_C)):
        spec = site_network.site_spec(address, price_per_unit=str(CHEAPER[address]))
        stake.update_spec(swarm, swarm.sender(dev_account(account).key), store_spec(swarm_home, spec), 1)


def test_a_two_node_job_runs_across_the_two_machines_of_the_one_site_with_them_and_learns_as_one_machine_does(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, site_network: SiteNetwork,  # noqa: F811
    cheaper: None, digits: Path, tmp_path: Path,
) -> None:
    from market.buyer import Buyer

    (across,) = post(swarm, swarm_home, digits_job(tmp_path, digits, nodes=2))
    (alone,) = post(swarm, swarm_home, digits_job(tmp_path, digits, nodes=1))
    drive(service, lambda: all(in_state(ledger_engine, j, "completed", "failed")() for j in (across, alone)),
          timeout=900)
    for job_id in (across, alone):
        assert job_info(swarm, job_id).status == JobStatus.COMPLETED, record(ledger_engine, job_id).error
    info = job_info(swarm, across)
    assert info.provider == PROVIDER_A, "the one site with a machine for each node, though B and C ask less"
    assert job_info(swarm, alone).provider == PROVIDER_B, "one node: the cheapest site"

    # The buyer's results, each checked (its outputs and its log) against the chain's resultHash.
    buyer = Buyer(swarm, swarm.sender(dev_account(BUYER).key), swarm_home, str(ledger_engine.url))
    results = {job_id: buyer.result(job_id) for job_id in (across, alone)}
    learned = {job_id: json.loads((r.path / "outputs" / "metrics.json").read_text())
               for job_id, r in results.items()}
    assert learned[across]["epoch"] == 4 and learned[across]["val_accuracy"] > 0.9, learned
    assert learned[across]["val_accuracy"] == pytest.approx(learned[alone]["val_accuracy"], abs=0.03), (
        "two machines learn what one does")
    assert (results[across].path / "outputs" / "model.pt").stat().st_size > 10_000

    # Its two ranks trained on the lease's two nodes, as the verified log says, and it was metered
    # on both nodes for as long as it ran.
    log = (results[across].path / "log").read_text()
    assert "validation accuracy" in log
    ranks = {rank: ip for ip, rank in re.findall(r"\(ip=([\d.]+), pid=\d+\) world_rank=(\d)", log)}
    # Ray Train gives rank 0 to either node: one rank on each is what counts.
    assert set(ranks) == {"0", "1"} and set(ranks.values()) == {node_address(0), node_address(1)}, log[-3000:]
    outcome = Outcome.read(lease_dir(swarm, site_network, PROVIDER_A, across))
    assert outcome is not None
    assert outcome.units == info.units_used == math.ceil(record(ledger_engine, across).units), "charged"
    assert 2 * outcome.seconds - 2 <= outcome.units <= 2 * outcome.seconds + 2, "metered on both nodes"


def test_a_two_node_job_is_never_offered_to_a_site_of_one_node(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine,  # noqa: F811
    cheaper: None, digits: Path, tmp_path: Path,
) -> None:
    """At a price only B and C take, a job of two nodes matches no one: their sites have one node."""
    (job_id,) = post(swarm, swarm_home, digits_job(tmp_path, digits, nodes=2, max_price_per_unit="0.0003"))
    report = service.tick()
    assert "nodes ruled out the most, 2 of 3 providers" in report.unmatched[job_id], report.unmatched
    assert job_info(swarm, job_id).status == JobStatus.POSTED
