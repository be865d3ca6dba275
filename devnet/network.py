"""A local network of provider sites for the demo and tests (docs/architecture.md §4):
`swarm cluster up --providers N` starts one site per dev account 1..N on this machine.

Each site is what a provider runs for real — `swarm provider serve` in a SWARM_HOME of its own
(`$SWARM_HOME/sites/<address>`), with its own Ray cluster, its own token and its own TLS
certificate, its agent on 127.0.0.1 — started detached in its own session, its output in the
site's `serve.log`. `sites.json` in the network's SWARM_HOME lists them. No token is shared:
each site's stays in its own home.

Every node of a local site runs on this machine, so any directory is one its machines share:
each site is served with `--shared-dir <its home>/shared`, and a site of several nodes, run as
root with WireGuard's tools, runs a lease across them as a site of several machines does.
A provider's machine runs one Ray cluster and a devnet's runs one per site, so each site's Ray
keeps its sessions in a temporary directory of its own (`RAY_TMPDIR`): in the one all share,
Ray's `auto` address — which Ray's job API gives a lease's driver, and a lease across nodes
connects its coordinator to — names whichever site's cluster started last.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from compute import cluster
from compute.errors import ComputeError
from compute.node import RayHome

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 90.0
STATE = "sites.json"
SHARED = "shared"  # in a site's home: the directory its nodes share


@dataclass(frozen=True)
class LocalSite:
    provider: str
    account: int  # the dev account that is its provider
    url: str
    fingerprint: str
    pid: int  # `swarm provider serve`'s
    home: str  # the site's own SWARM_HOME
    rpc_url: str = ""  # the chain it serves

    def as_dict(self) -> dict:
        return asdict(self)


def start_sites(home: Path, accounts: dict[int, int], rpc_url: str, timeout: float = START_TIMEOUT_S,
                ports: dict[int, int] | None = None) -> list[LocalSite]:
    """Starts a site for each dev account (account → its number of nodes); returns once all serve.

    `ports` fixes an account's port (a site started again in its home keeps its URL and its
    certificate, so its registration still holds); others get a free one, drawn where the
    site's own Ray cluster, started before the site listens, does not take it."""
    from anvil import dev_account
    from anvil.node import free_port

    ports = ports or {}
    if running_sites(home) and not ports:
        raise ComputeError(f"Local sites are already up (listed in {home / STATE}); stop them with "
                           "`swarm cluster down`.")
    deployments = home / "deployments"
    if not deployments.is_dir():
        raise ComputeError(
            "Sites serve one deployment: deploy the contracts first with `swarm chain deploy`."
        )
    started: list[tuple[int, str, Path, subprocess.Popen]] = []
    try:
        for account, nodes in accounts.items():
            address = dev_account(account).address
            site_home = home / "sites" / address
            site_home.mkdir(parents=True, exist_ok=True)
            (site_home / SHARED).mkdir(exist_ok=True)
            ray_tmp(site_home).mkdir(exist_ok=True)
            shutil.copytree(deployments, site_home / "deployments", dirs_exist_ok=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
                "SWARM_HOME": str(site_home), "SWARM_RPC_URL": rpc_url, "RAY_TMPDIR": str(ray_tmp(site_home))}
            with open(site_home / "serve.log", "ab") as log:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "scripts.cli",
                        "provider",
                        "serve",
                        "--account",
                        str(account),
                        "--port",
                        str(ports.get(account) or free_port()),
                        "--nodes",
                        str(nodes),
                        "--shared-dir",
                        str(site_home / SHARED),
                        "--json",
                    ],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                    cwd=Path(__file__).resolve().parent.parent,
                )
            started.append((account, address, site_home, process))
        sites = [_ready(account, address, site_home, process, timeout, rpc_url)
                 for account, address, site_home, process in started]
    except BaseException:
        for _, _, site_home, process in started:
            _stop(process.pid, site_home)
        raise
    kept = [s for s in running_sites(home) if s.account not in accounts]
    _write(home, kept + sites)
    return sites


def restart_site(home: Path, site: LocalSite, nodes: int = 1) -> LocalSite:
    """Starts a site that died again, in its own home and at its own port: the same URL and certificate."""
    _stop(site.pid, Path(site.home))
    port = int(site.url.rsplit(":", 1)[1])
    (again,) = start_sites(home, {site.account: nodes}, site.rpc_url, ports={site.account: port})
    return again


def running_sites(home: Path) -> list[LocalSite]:
    """The sites this home started whose agents still run."""
    path = home / STATE
    if not path.is_file():
        return []
    sites = [LocalSite(**raw) for raw in json.loads(path.read_text())]
    return [s for s in sites if _alive(s.pid)]


def stop_sites(home: Path) -> list[LocalSite]:
    """Stops every site this home started, and their Ray clusters."""
    path = home / STATE
    if not path.is_file():
        return []
    sites = [LocalSite(**raw) for raw in json.loads(path.read_text())]
    for site in sites:  # all at once: each stops its own Ray cluster, which takes seconds
        _signal(site.pid, signal.SIGTERM)
    for site in sites:
        _stop(site.pid, Path(site.home))
    path.unlink(missing_ok=True)
    return sites


def kill_site(site: LocalSite) -> None:
    """Kills a site at once, as a machine that dies: its agent and its Ray cluster."""
    _signal(site.pid, signal.SIGKILL)
    cluster.stop(RayHome.of(Path(site.home)))


def ray_tmp(site_home: Path) -> Path:
    """Where the site's Ray keeps its sessions: short, as the Unix sockets in them must be."""
    return Path("/tmp") / f"swarm-ray-{hashlib.sha256(str(site_home).encode()).hexdigest()[:12]}"


def _ready(account: int, address: str, site_home: Path, process: subprocess.Popen, timeout: float,
           rpc_url: str) -> LocalSite:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline().decode().strip() if ready else ""
    process.stdout.close()
    if not line:
        tail = (site_home / "serve.log").read_text(errors="replace").strip().splitlines()[-1:] or [
            "no output"
        ]
        raise ComputeError(f"The site of {address} did not start: {tail[0]} (see {site_home / 'serve.log'}).")
    try:
        served = json.loads(line)
        url, fingerprint = str(served["url"]), str(served["fingerprint"])
    except (ValueError, TypeError, KeyError):
        raise ComputeError(f"The site of {address} said {line[:120]!r} where its URL and fingerprint belong "
                           f"(see {site_home / 'serve.log'}).") from None
    return LocalSite(address, account, url, fingerprint, process.pid, str(site_home), rpc_url)


def _signal(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def _stop(pid: int, site_home: Path) -> None:
    _signal(pid, signal.SIGTERM)
    end = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    if _alive(pid):
        _signal(pid, signal.SIGKILL)
    cluster.stop(RayHome.of(site_home))  # a site killed before it could stop its cluster
    shutil.rmtree(ray_tmp(site_home), ignore_errors=True)


def _alive(pid: int) -> bool:
    import psutil

    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and "provider" in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _write(home: Path, sites: list[LocalSite]) -> None:
    path = home / STATE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([s.as_dict() for s in sites], indent=2))
    tmp.replace(path)
