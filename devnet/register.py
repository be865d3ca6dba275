"""The local network's providers on chain (`swarm cluster up --register`): each dev provider
registers with its site, a one-CPU spec naming the site's URL and certificate, and stakes the
minimum that spec needs — through `ledger.operator.Provider`, so with the same checks as
`swarm provider register` and `swarm provider stake`. Devnets only: the providers are anvil's
dev accounts."""

from __future__ import annotations

from collections.abc import Iterable

from devnet.network import LocalSite
from ledger.client import Swarm
from ledger.config import Settings
from ledger.errors import SwarmError
from ledger.operator import Provider, Registered
from ledger.signer import open_signer
from ledger.stake import HardwareSpec


def site_spec(site: LocalSite) -> HardwareSpec:
    """What a local site offers: one 1-CPU node, no GPU, served at its URL with its certificate."""
    return HardwareSpec("cpu", 1, 1, site_url=site.url, site_fingerprint=site.fingerprint)


def check_devnet(swarm: Swarm) -> None:
    """Refuses a chain that is not a devnet, where the dev accounts are no one's to use."""
    if not swarm.chain.is_devnet:
        raise SwarmError(f"--register uses anvil's dev accounts, which exist only on a devnet, and chain "
                         f"{swarm.chain.chain_id} is not one; register each provider with "
                         "`swarm provider register`.")


def register_sites(swarm: Swarm, settings: Settings, sites: Iterable[LocalSite]) -> list[Registered]:
    """Registers each site's provider with the site (declaring it anew if already registered)
    and stakes what its minimum still lacks; returns each registration."""
    check_devnet(swarm)
    done = []
    for site in sites:
        provider = Provider(swarm, open_signer(swarm, settings.home, account=site.account), settings)
        done.append(provider.declare_anew(site_spec(site)))
        provider.stake_to_minimum()
    return done
