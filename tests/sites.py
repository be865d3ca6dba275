"""One local network of provider sites per test session, as `swarm cluster up` starts it:
providers A (dev account 1, a site of two nodes), B and C (accounts 2 and 3, one node each),
each `swarm provider serve` in a SWARM_HOME of its own with its own Ray cluster.

Chain state is reverted after every test, so a test registers its providers again with
`site_spec` (the site's URL and fingerprint in the hardware spec); the sites themselves
know jobs by their id and the block they were posted in, so a job id posted again after a
revert is a new lease.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from anvil import AnvilNode, dev_account
from core.starting import START_CEILING_S, NotStarted, Starting, first_line
from ledger.deploy import DeployResult

PROVIDER_A, PROVIDER_B, PROVIDER_C = (dev_account(i).address for i in (1, 2, 3))
NODES = {1: 2, 2: 1, 3: 1}  # dev account → its site's nodes


@dataclass
class SiteNetwork:
    home: Path
    rpc_url: str
    sites: dict = field(default_factory=dict)  # provider address → devnet.network.LocalSite

    def site_spec(self, provider: str, **declared) -> dict:
        """A hardware spec naming the provider's site: what a provider registers."""
        site = self.sites[provider]
        spec = {"gpu_model": "RTX4090", "gpus": 1, "vram_gb": 24} | declared
        return spec | {"site_url": site.url, "site_fingerprint": site.fingerprint}

    def kill(self, provider: str) -> None:
        from devnet.network import kill_site

        kill_site(self.sites[provider])

    def restart(self, provider: str) -> None:
        """A site killed by a test comes back at its own URL, with its own certificate."""
        from devnet.network import restart_site

        account = next(a for a in NODES if dev_account(a).address == provider)
        self.sites[provider] = restart_site(self.home, self.sites[provider], NODES[account])



_running: list[Path] = []


def release_site_network() -> None:
    """Stops the session's sites once their last test is done (tests/conftest.py)."""
    from devnet.network import stop_sites

    while _running:
        stop_sites(_running.pop())


@pytest.fixture(scope="session")
def site_network(deployed: DeployResult, anvil_node: AnvilNode, swarm_home: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteNetwork]:
    import shutil

    from devnet.network import start_sites

    home = tmp_path_factory.mktemp("site-network")
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    network = SiteNetwork(home, anvil_node.config.url)
    _running.append(home)
    try:
        for site in start_sites(home, NODES, anvil_node.config.url):
            network.sites[site.provider] = site
        yield network
    finally:
        release_site_network()


def served(process: subprocess.Popen, log: Path | None = None, ceiling_s: float = START_CEILING_S) -> dict:
    """The line `swarm provider serve --json` prints once it serves (its URL and fingerprint),
    waited for while the site lives and starts (core.starting). The test fails at once if the site
    exits, and if it is still starting at `ceiling_s`, with what it said: its standard error where
    that is a pipe, else the last line of `log`, where it goes."""
    import contextlib
    import json
    import os
    import signal

    try:
        line = first_line(Starting("the site", process, log), ceiling_s)
    except NotStarted as exc:
        with contextlib.suppress(ProcessLookupError):  # its group may have ended with it
            os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=30)
        pytest.fail(f"{exc} {(err or '')[-3000:]}".strip())
    return json.loads(line)


def stop_served(process) -> None:
    """Stops a site as its operator does (SIGTERM to its process group), then for good."""
    import os
    import signal

    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)

