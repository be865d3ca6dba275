"""A provider's other machines joining its site (docs/architecture.md §4): `swarm provider join`
is a face over `join_site` (and, given the site's URL, `join_mesh` first), `swarm provider
leave` over `leave_site` and `leave_mesh`.

A machine joins the site's Ray cluster as a node labelled `provider=<address>`, with a copy of
the site's token, only once the chain says the provider may serve work (`may_serve`):
registered, not tombstoned, not jailed, staked to the minimum its declared GPUs need. A refusal
is a `UserError` in one sentence that says what to do, and no node starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from compute import node
from compute.node import MESH_GCS_PORT
from core.errors import UserError
from ledger import stake
from ledger.client import Swarm
from ledger.stake import ProviderInfo
from ledger.units import format_amount, when
from provider.mesh import HEAD, Interface, MeshMember, forget_address, mesh_address
from wire.client import SiteAddress


def may_serve(swarm: Swarm, address: str) -> ProviderInfo:
    """The provider's record, if the chain lets it serve work; else UserError saying why and what to do."""
    info = stake.provider_info(swarm, address)
    who = info.address
    if not info.registered:
        raise UserError(f"{who} is not registered; run `swarm provider register` first.")
    if info.tombstoned:
        raise UserError(f"{who} is tombstoned for fraud and can never serve again.")
    if info.jailed_until:
        if swarm.chain.timestamp() < info.jailed_until:
            raise UserError(f"{who} is jailed until {when(info.jailed_until)}; after that run "
                            "`swarm provider unjail`, then join.")
        raise UserError(f"{who} was jailed until {when(info.jailed_until)}; run `swarm provider unjail` "
                        "first.")
    if info.stake < info.min_stake:
        raise UserError(
            f"{who} has {format_amount(info.stake)} staked, below its minimum of "
            f"{format_amount(info.min_stake)}; stake {format_amount(info.min_stake - info.stake)} more with "
            "`swarm provider stake`."
        )
    if not swarm.read("StakingVault", "isEligible", who):
        raise UserError(f"The staking vault does not list {who} as eligible for work; see "
                        "`swarm provider status`.")
    return info


def join_site(swarm: Swarm, home: Path, ray_address: str, spec: node.NodeSpec) -> node.JoinedNode:
    """Starts a Ray node for `spec.provider` on this machine against the site's head at
    `ray_address` (HOST:PORT), with the token in `home`/ray/auth_token, once the chain says the
    provider may serve; returns once the node is alive. A machine that joined its site's mesh
    (`swarm provider mesh join`) binds the node to its mesh address, with pinned ports."""
    node.parse_address(ray_address)
    may_serve(swarm, spec.provider)
    on_mesh = mesh_address(home)  # a machine on its site's mesh binds its node there, its ports pinned
    bound = node.binding(on_mesh) if on_mesh else None
    return node.join(node.RayHome.of(home), ray_address, spec, bound=bound)


def join_site_mesh(swarm: Swarm, home: Path, site: SiteAddress, secret: str, name: str, endpoint: str | None,
                   interface: str, spec: node.NodeSpec,
                   ray_address: str | None = None) -> tuple[node.JoinedNode, dict[str, Any]]:
    """`join_site` over the site's mesh: once the chain says the provider may serve (a provider it
    refuses brings no interface up), the machine joins the mesh (`join_mesh`), then its node
    joins the head's Ray (at `ray_address`, by default the head's on the mesh); a node that does
    not start takes the mesh down again. The node, and the head's answer to the mesh join."""
    may_serve(swarm, spec.provider)
    meshed = join_mesh(home, site, secret, name, endpoint, interface)
    try:
        return join_site(swarm, home, ray_address or meshed["ray_address"], spec), meshed
    except BaseException:
        leave_mesh(home)  # nothing half-done: no interface without its node
        raise


def leave_site(home: Path, provider: str) -> node.JoinedNode | None:
    """Stops the node this machine runs for `provider` (its running work drains first); None if none runs."""
    return node.leave(node.RayHome.of(home), provider)


# ── the machine's mesh, brought up by `join` ────────────────────────────────────────

KEEPER_FILE = Path("mesh") / "keeper.json"  # under SWARM_HOME: the process keeping the peers


def join_mesh(home: Path, site: SiteAddress, secret: str, name: str, endpoint: str | None,
              interface: str) -> dict[str, Any]:
    """Brings this machine into its site's mesh as `name`, with its own key (made here, kept in
    `home`), then leaves a process keeping its peers as the head lists them (`swarm provider mesh
    join`, detached; `leave_mesh` stops it). Returns the head's answer, with `ray_address`: the
    head's Ray on the mesh, where the machine's node joins."""
    stop_keeper(home)  # one keeper a machine: a second `join` replaces the first's
    answer = MeshMember(home, site, secret, name, endpoint, Interface(interface)).join()
    head = next(p["address"] for p in answer["peers"] if p["name"] == HEAD)
    command = [sys.executable, "-m", "scripts.cli", "provider", "mesh", "join", site.url, "--fingerprint",
               site.fingerprint, "--name", name, "--interface", interface,
               *(["--endpoint", endpoint] if endpoint else [])]
    (home / KEEPER_FILE).parent.mkdir(parents=True, exist_ok=True)
    with (home / "mesh" / "keeper.log").open("a") as log:
        keeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                  start_new_session=True, env=os.environ.copy())
    (home / KEEPER_FILE).write_text(json.dumps({"pid": keeper.pid, "interface": interface, "name": name}))
    return answer | {"ray_address": f"{head}:{MESH_GCS_PORT}", "interface": interface}


def stop_keeper(home: Path) -> dict[str, Any] | None:
    """Stops the process keeping this machine's mesh peers, if one runs; what it kept, or None."""
    try:
        kept = json.loads((home / KEEPER_FILE).read_text())
    except (OSError, ValueError):
        return None
    pid = int(kept.get("pid", 0))
    if pid > 0 and _is_keeper(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _is_keeper(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_keeper(pid):
            os.kill(pid, signal.SIGKILL)
    (home / KEEPER_FILE).unlink(missing_ok=True)
    return kept


def _is_keeper(pid: int) -> bool:
    """Whether `pid` is still a mesh keeper (not a process that took its number after it ended)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and b"mesh" in command and b"join" in command


def leave_mesh(home: Path) -> str | None:
    """Takes this machine's mesh down (its keeper stopped, its interface removed), if `join`
    brought one up; the interface's name, or None. The head still lists the machine until
    `swarm provider mesh remove` cuts its key off."""
    kept = stop_keeper(home)
    if kept is None:
        return None
    Interface(kept["interface"]).down()
    forget_address(home)
    return str(kept["interface"])
