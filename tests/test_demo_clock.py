"""After the demo the devnet's clock runs ahead of the wall clock (its epochs moved it on and
nothing moves it back): `swarm chain status` says by how much, on a chain of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil import AnvilConfig, AnvilNode
from anvil.node import free_port


@pytest.fixture
def own_chain(tmp_path: Path) -> Iterator[tuple[AnvilNode, dict[str, str]]]:
    """A fresh anvil whose clock no other test has moved, and the environment that reaches it."""
    node = AnvilNode(AnvilConfig(home=tmp_path, port=free_port()))
    node.start()
    env = {"SWARM_HOME": str(tmp_path), "SWARM_ANVIL_PORT": str(node.config.port),
           "SWARM_RPC_URL": node.config.url}
    yield node, env
    node.stop()


def test_chain_status_says_how_far_the_chain_clock_runs_ahead_once_it_was_moved_on(cli, own_chain) -> None:
    node, env = own_chain
    aligned = cli("chain", "status", "--json", env=env)
    assert aligned.code == 0, aligned.stderr
    assert abs(json.loads(aligned.stdout)["clock_ahead_s"]) <= 2
    shown = cli("chain", "status", env=env)
    assert "anvil:" in shown.stdout and "clock" not in shown.stdout, shown.stdout

    node.rpc.increase_time(46 * 60)  # what the demo's epochs leave behind
    ahead = json.loads(cli("chain", "status", "--json", env=env).stdout)["clock_ahead_s"]
    assert 46 * 60 - 2 <= ahead <= 46 * 60 + 2, ahead
    shown = cli("chain", "status", env=env)
    assert shown.code == 0, shown.stderr
    assert ("The chain's clock runs 46 min ahead of this machine's; deadlines given as a duration (1h) "
            "count from the chain's clock.") in " ".join(shown.stdout.split()), shown.stdout


def test_chain_status_of_a_stopped_devnet_tells_no_clock(cli, tmp_path: Path) -> None:
    port = free_port()
    env = {"SWARM_HOME": str(tmp_path), "SWARM_ANVIL_PORT": str(port), "SWARM_RPC_URL": f"http://127.0.0.1:{port}"}
    stopped = cli("chain", "status", "--json", env=env)
    assert stopped.code == 0, stopped.stderr
    assert json.loads(stopped.stdout)["clock_ahead_s"] is None
