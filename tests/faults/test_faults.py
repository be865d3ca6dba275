"""Fault injection (kill -9 of anvil, the market service, the oracle, providers' sites) over
seeded runs of a small network; after each run the chain must balance to the wei.

`make test` runs one seed (SWARM_FAULT_SEEDS, default 1); `make faults` runs all 20;
SWARM_FAULT_SEEDS=21-60 runs those seeds. The mesh seeds (SWARM_MESH_FAULT_SEEDS: `make faults`
runs 5, `make test` none, since tests/test_mesh_lease.py kills a machine under a lease there) run
the same faults with provider C's site on two machines of a mesh, and the machine under a
running lease killed as well.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.network import Network


def _seeds(text: str) -> range:
    """`N`: seeds 1 to N; `A-B`: seeds A to B."""
    first, _, last = text.partition("-")
    return range(int(first), int(last) + 1) if last else range(1, int(first) + 1)


SEEDS = _seeds(os.environ.get("SWARM_FAULT_SEEDS", "1"))
MESH_SEEDS = _seeds(os.environ.get("SWARM_MESH_FAULT_SEEDS", "0"))
JOBS = 3
FAULTS = 4
WINDOW_S = 20.0


@pytest.mark.parametrize("seed", SEEDS)
def test_the_network_loses_nothing_under_kill_9(seed: int, tmp_path: Path) -> None:
    _run(Network(tmp_path, seed))


if MESH_SEEDS:  # defined only where seeds are asked for: no run reports it skipped
    @pytest.mark.parametrize("seed", MESH_SEEDS)
    def test_the_network_loses_nothing_when_a_mesh_sites_machine_dies_under_a_lease(
            seed: int, tmp_path: Path) -> None:
        _run(Network(tmp_path, seed, mesh=True))


def _run(network: Network) -> None:
    try:
        try:
            network.start()
            supply = network.swarm.token.functions.totalSupply().call()
            job_ids = network.post_jobs(JOBS)
            network.start_market()
            network.start_oracle()
            network.inject(FAULTS, WINDOW_S)
            network.settle(job_ids, timeout_s=240)
        finally:
            network.stop()
        assert network.anvil is not None
        network.anvil.start()  # from its final state, for the audit
        try:
            network.audit(job_ids, supply)
        finally:
            network.anvil.stop()
    finally:
        network.release()
    assert len(network.log) == FAULTS + network.mesh, network.log
    if network.mesh:
        assert "killed mid-lease" in " ".join(network.log), network.log
