"""Starting a local network of sites (devnet/network.py) when a site does not start: real
`swarm provider serve` processes that exit at once or wait, alive, for a chain that never answers.
None gets as far as its Ray cluster."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from anvil import dev_account
from anvil.node import free_port
from core.starting import ExitedWhileStarting, StartTimedOut
from devnet.network import STATE, start_sites
from tests.sites import served

pytestmark = pytest.mark.light


@pytest.fixture
def home(tmp_path: Path, swarm_home: Path, deployed) -> Path:
    """A network's home with the session's deployment, as `swarm cluster up` wants it."""
    shutil.copytree(swarm_home / "deployments", tmp_path / "deployments")
    return tmp_path


def _serving_from(site_home: Path) -> list[psutil.Process]:
    """The processes still running with `site_home` as their SWARM_HOME."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("SWARM_HOME") == str(site_home) \
                    and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_site_that_exits_while_starting_fails_the_start_at_once_and_its_neighbour_is_stopped(
        home: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # site 1 waits for it, alive, for as long as it is let
    began = time.monotonic()
    with pytest.raises(ExitedWhileStarting) as caught:
        start_sites(home, {1: 1, 2: 0}, nowhere)  # no site runs 0 nodes: site 2's command line refuses
    assert time.monotonic() - began < 60, "not at the ceiling: at its exit"
    site_2 = home / "sites" / dev_account(2).address
    assert caught.value.what == f"the site of {dev_account(2).address}"
    assert caught.value.returncode == 2
    assert "--nodes" in caught.value.last_lines[-1] and str(site_2 / "serve.log") in str(caught.value)
    assert _serving_from(home / "sites" / dev_account(1).address) == [], "the site still starting was stopped"
    assert not (home / STATE).exists()


def test_a_site_still_starting_at_the_ceiling_fails_with_its_last_line_and_is_stopped(home: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StartTimedOut) as caught:
        start_sites(home, {1: 1}, nowhere, ceiling_s=12)
    assert caught.value.last_lines[-1].startswith("waiting for the chain"), caught.value.last_lines
    assert "still had not started after 12 s, alive: waiting for the chain" in str(caught.value)
    assert _serving_from(home / "sites" / dev_account(1).address) == []
    assert not (home / STATE).exists()


def test_a_tests_site_that_exits_while_starting_fails_the_test_with_what_it_said() -> None:
    """tests/sites.py's `served`, which the site tests start their own sites with."""
    process = subprocess.Popen([sys.executable, "-m", "scripts.cli", "provider", "serve", "--nodes", "0",
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    with pytest.raises(pytest.fail.Exception) as caught:
        served(process)
    assert str(caught.value).startswith("The site exited while starting (exit status 2)")
    assert "Invalid value for '--nodes'" in str(caught.value)
