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

Starting sites waits for them together, for as long as each lives and starts (`core.starting`):
one that exits fails the start at once with its exit status and the last line of its
`serve.log`, one still starting after the ceiling with that line; every site started is then
stopped, and the error that ended the start is the one raised.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from anvil import dev_account
from anvil.node import free_port
from compute import cluster
from compute.errors import ComputeError
from compute.node import RayHome
from core.starting import START_CEILING_S, Starting, first_lines, wait_exit

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


def start_sites(home: Path, accounts: dict[int, int], rpc_url: str, ceiling_s: float = START_CEILING_S,
                ports: dict[int, int] | None = None) -> list[LocalSite]:
    """Starts a site for each dev account (account → its number of nodes); returns once all serve.

    Each is waited for while it lives and starts, up to `ceiling_s` (core.starting). `ports`
    fixes an account's port (a site started again in its home keeps its URL and its
    certificate, so its registration still holds); others get a free one, drawn where the
    site's own Ray cluster, started before the site listens, does not take it."""
    ports = ports or {}
    if running_sites(home) and not ports:
        raise ComputeError(f"Local sites are already up (listed in {home / STATE}); stop them with "
                           "`swarm cluster down`.")
    deployments = home / "deployments"
    if not deployments.is_dir():
        raise ComputeError(
            "Sites serve one deployment: deploy the contracts first with `swarm chain deploy`."
        )
    started: list[tuple[int, Path, Starting]] = []
    try:
        for account, nodes in accounts.items():
            address = dev_account(account).address
            site_home = home / "sites" / address
            process = _serve(account, nodes, site_home, deployments, rpc_url, ports.get(account))
            started.append((account, site_home, Starting(f"the site of {address}", process,
                                                         site_home / "serve.log")))
        lines = first_lines([starting for _, _, starting in started], ceiling_s)
        sites = [_served(account, dev_account(account).address, site_home, starting, line, rpc_url)
                 for (account, site_home, starting), line in zip(started, lines, strict=True)]
    except BaseException as error:
        for _, site_home, starting in started:
            _stop_quietly(starting.process.pid, site_home, error)
        raise
    finally:
        for _, _, starting in started:
            if starting.process.stdout is not None:
                starting.process.stdout.close()
    kept = [s for s in running_sites(home) if s.account not in accounts]
    _write(home, kept + sites)
    return sites


def _serve(account: int, nodes: int, site_home: Path, deployments: Path, rpc_url: str,
           port: int | None) -> subprocess.Popen:
    """`swarm provider serve` for `account` in its own home, detached, its `--json` line on a pipe."""
    site_home.mkdir(parents=True, exist_ok=True)
    (site_home / SHARED).mkdir(exist_ok=True)
    ray_tmp(site_home).mkdir(exist_ok=True)
    shutil.copytree(deployments, site_home / "deployments", dirs_exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "SWARM_HOME": str(site_home), "SWARM_RPC_URL": rpc_url, "RAY_TMPDIR": str(ray_tmp(site_home))}
    with open(site_home / "serve.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", str(account),
             "--port", str(port or free_port()), "--nodes", str(nodes),
             "--shared-dir", str(site_home / SHARED), "--json"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )


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


def _served(account: int, address: str, site_home: Path, starting: Starting, line: str,
            rpc_url: str) -> LocalSite:
    """The site that printed `line`, its URL and fingerprint, once it serves."""
    try:
        served = json.loads(line)
        url, fingerprint = str(served["url"]), str(served["fingerprint"])
    except (ValueError, TypeError, KeyError):
        raise ComputeError(f"The site of {address} said {line[:120]!r} where its URL and fingerprint belong "
                           f"(see {starting.log}).") from None
    return LocalSite(address, account, url, fingerprint, starting.process.pid, str(site_home), rpc_url)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _stop(pid: int, site_home: Path) -> None:
    _signal(pid, signal.SIGTERM)
    if _alive(pid) and not wait_exit(pid, STOP_TIMEOUT_S):
        _signal(pid, signal.SIGKILL)
    cluster.stop(RayHome.of(site_home))  # a site killed before it could stop its cluster
    shutil.rmtree(ray_tmp(site_home), ignore_errors=True)


def _stop_quietly(pid: int, site_home: Path, error: BaseException) -> None:
    """`_stop` while `error` is on its way: what this stop cannot do is added to `error` as a note,
    never raised in its place."""
    try:
        _stop(pid, site_home)
    except Exception as exc:  # noqa: BLE001 -- the error that ended the start is the one to report
        error.add_note(f"stopping the site in {site_home} failed too: {exc!r}")


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
