"""`swarm cluster up|down|status`: a local network of provider sites for the demo and tests —
one site per provider, each its own Ray cluster and agent, the providers being anvil's dev
accounts. `swarm provider nodes` shows one site's Ray nodes."""

from __future__ import annotations

import click

from compute import cluster as local
from scripts.common import console, emit, json_option, settings, table


@click.group()
def cluster() -> None:
    """Run a local network of provider sites (demo and tests)."""


@cluster.command()
@click.option("--providers", "count", type=click.IntRange(1, local.MAX_PROVIDERS), default=3,
              show_default=True, help="Providers: dev accounts 1..N, a site of one 1-CPU node each.")
@click.option("--register", is_flag=True,
              help="Devnet only: register each provider with its site (a CPU spec) and stake its minimum.")
@json_option
def up(count: int, register: bool, as_json: bool) -> None:
    """Start a site for each of N providers on this machine; returns once all serve.

    Each site is `swarm provider serve` in a SWARM_HOME of its own ($SWARM_HOME/sites/ADDRESS):
    its own Ray cluster and token, its agent on 127.0.0.1 over HTTPS.
    """
    from provider.network import start_sites

    s = settings()
    sites = start_sites(s.home, {i: 1 for i in range(1, count + 1)}, s.rpc_url)
    if register:
        _register(sites)
    payload = {"sites": [site.as_dict() for site in sites]}

    def human() -> None:
        console.print(table("Provider sites", ["provider", "url", "certificate sha256"],
                            [(x.provider, x.url, x.fingerprint) for x in sites]))
        if not register:
            console.print("Register each with `swarm provider register --site-url URL --site-fingerprint SHA256 …`, "
                          "or start them with --register on a devnet; stop them with `swarm cluster down`.")

    emit(as_json, payload, human)


def _register(sites) -> None:
    """Registers (or re-declares) each dev provider with its site and stakes its minimum."""
    from ledger import stake
    from ledger.errors import SwarmError
    from ledger.specs import store_spec
    from ledger.stake import HardwareSpec
    from scripts.common import dev_sender, open_swarm

    swarm = open_swarm()
    if not swarm.chain.is_devnet:
        raise SwarmError("--register uses anvil's dev accounts, which exist only on a devnet; register each "
                         "provider with `swarm provider register`.")
    for site in sites:
        sender = dev_sender(swarm, site.account)
        spec = HardwareSpec("cpu", 1, 1, None, None, site.url, site.fingerprint)
        digest = store_spec(settings().home, spec.as_dict())
        info = stake.provider_info(swarm, sender.address)
        (stake.update_spec if info.registered else stake.register)(swarm, sender, digest, spec.gpus)
        info = stake.provider_info(swarm, sender.address)
        if info.stake < info.min_stake:
            stake.stake(swarm, sender, info.min_stake - info.stake)


@cluster.command()
@json_option
def down(as_json: bool) -> None:
    """Stop the local sites, each with its Ray cluster."""
    from provider.network import stop_sites

    stopped = stop_sites(settings().home)
    emit(as_json, {"stopped": [x.provider for x in stopped]}, lambda: console.print(
        f"Stopped {len(stopped)} provider site(s)." if stopped else "No local provider sites are running."
    ))


@cluster.command()
@json_option
def status(as_json: bool) -> None:
    """The local sites: provider, URL, and what each reports it has."""
    from compute.site_client import SiteAddress, SiteClient, SiteUnreachable
    from provider.network import running_sites

    sites = running_sites(settings().home)
    rows = []
    for site in sites:
        try:
            info = SiteClient(SiteAddress(site.provider, site.url, site.fingerprint), lambda _: b"", 0, "",
                              timeout_s=5).info()
            capacity = info["capacity"]
        except SiteUnreachable:
            capacity = None
        rows.append(site.as_dict() | {"answers": capacity is not None, "capacity": capacity})
    if not rows:
        emit(as_json, {"running": False, "sites": []}, lambda: console.print(
            "No local provider sites are running; start them with `swarm cluster up`."))
        return

    def human() -> None:
        console.print(table("Provider sites", ["provider", "url", "state", "nodes", "CPUs", "GPUs"], [
            (r["provider"], r["url"], "[green]serving[/]" if r["answers"] else "[red]not answering[/]",
             *(f"{r['capacity'][k]:g}" if r["capacity"] else "-" for k in ("nodes", "cpus", "gpus")))
            for r in rows]))

    emit(as_json, {"running": True, "sites": rows}, human)
