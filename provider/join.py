"""A provider's other machines joining its site (docs/architecture.md §4): `swarm provider join`
is a face over `join_site`, `swarm provider leave` over `leave_site`.

A machine joins the site's Ray cluster as a node labelled `provider=<address>`, with a copy of
the site's token, only once the chain says the provider may serve work (`may_serve`):
registered, not tombstoned, not jailed, staked to the minimum its declared GPUs need. A refusal
is a `SwarmError` in one sentence that says what to do, and no node starts.
"""

from __future__ import annotations

from pathlib import Path

from compute import node
from ledger import stake
from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.stake import ProviderInfo
from ledger.units import format_amount, when


def may_serve(swarm: Swarm, address: str) -> ProviderInfo:
    """The provider's record, if the chain lets it serve work; else SwarmError saying why and what to do."""
    info = stake.provider_info(swarm, address)
    who = info.address
    if not info.registered:
        raise SwarmError(f"{who} is not registered; run `swarm provider register` first.")
    if info.tombstoned:
        raise SwarmError(f"{who} is tombstoned for fraud and can never serve again.")
    if info.jailed_until:
        if swarm.chain.timestamp() < info.jailed_until:
            raise SwarmError(f"{who} is jailed until {when(info.jailed_until)}; after that run "
                             "`swarm provider unjail`, then join.")
        raise SwarmError(f"{who} was jailed until {when(info.jailed_until)}; run `swarm provider unjail` "
                         "first.")
    if info.stake < info.min_stake:
        raise SwarmError(
            f"{who} has {format_amount(info.stake)} staked, below its minimum of "
            f"{format_amount(info.min_stake)}; stake {format_amount(info.min_stake - info.stake)} more with "
            "`swarm provider stake`."
        )
    if not swarm.read("StakingVault", "isEligible", who):
        raise SwarmError(f"The staking vault does not list {who} as eligible for work; see "
                         "`swarm provider status`.")
    return info


def join_site(swarm: Swarm, home: Path, ray_address: str, spec: node.NodeSpec) -> node.JoinedNode:
    """Starts a Ray node for `spec.provider` on this machine against the site's head at
    `ray_address` (HOST:PORT), with the token in `home`/ray/auth_token, once the chain says the
    provider may serve; returns once the node is alive. A machine that joined its site's mesh
    (`swarm provider mesh join`) binds the node to its mesh address, with pinned ports."""
    from provider.mesh import mesh_address

    node.parse_address(ray_address)
    may_serve(swarm, spec.provider)
    on_mesh = mesh_address(home)  # a machine on its site's mesh binds its node there, its ports pinned
    bound = node.binding(on_mesh) if on_mesh else None
    return node.join(node.RayHome.of(home), ray_address, spec, bound=bound)


def leave_site(home: Path, provider: str) -> node.JoinedNode | None:
    """Stops the node this machine runs for `provider` (its running work drains first); None if none runs."""
    return node.leave(node.RayHome.of(home), provider)
