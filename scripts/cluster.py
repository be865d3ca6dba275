"""`swarm cluster up|down|status`: a local network of provider sites for the demo and tests —
one site per provider, each its own Ray cluster and agent, the providers being anvil's dev
accounts. `swarm provider nodes` shows one site's Ray nodes."""

from __future__ import annotations

import click

from compute import cluster as local
from ledger.errors import SwarmError
from scripts.common import console, emit, json_option, open_swarm, settings, table

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the devnet's sites (`devnet`) and the site client (`wire`) — loads inside them
# (tests/test_startup.py, bench/startup.py).


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
    from devnet.network import start_sites
    from devnet.register import check_devnet, register_sites

    s = settings()
    swarm = open_swarm() if register else None
    if swarm is not None:
        check_devnet(swarm)  # before any site starts
    sites = start_sites(s.home, {i: 1 for i in range(1, count + 1)}, s.rpc_url)
    if swarm is not None:
        register_sites(swarm, s, sites)
    payload = {"sites": [site.as_dict() for site in sites]}

    def human() -> None:
        console.print(table("Provider sites", ["provider", "url", "certificate sha256"],
                            [(x.provider, x.url, x.fingerprint) for x in sites]))
        if not register:
            console.print(
                "Register each with `swarm provider register --site-url URL --site-fingerprint SHA256 …`, "
                "or start them with --register on a devnet; stop them with `swarm cluster down`."
            )

    emit(as_json, payload, human)


@cluster.command()
@json_option
def down(as_json: bool) -> None:
    """Stop the local sites, each with its Ray cluster."""
    from devnet.network import stop_sites

    stopped = stop_sites(settings().home)
    emit(as_json, {"stopped": [x.provider for x in stopped]}, lambda: console.print(
        f"Stopped {len(stopped)} provider site(s)." if stopped else "No local provider sites are running."
    ))


@cluster.command()
@json_option
def status(as_json: bool) -> None:
    """The local sites: provider, URL, and what each reports it has."""
    from devnet.network import running_sites
    from wire.client import SiteAddress, SiteClient

    sites = running_sites(settings().home)
    rows = []
    for site in sites:
        capacity, problem = None, None
        try:  # a site that is down or answers nonsense is shown as such, beside the others
            info = SiteClient(SiteAddress(site.provider, site.url, site.fingerprint), lambda _: b"", 0, "",
                              timeout_s=5).info()
            capacity = info.get("capacity") if isinstance(info.get("capacity"), dict) else None
            problem = None if capacity is not None else f"The site of {site.provider} reports no capacity."
        except SwarmError as exc:
            problem = str(exc)
        rows.append(site.as_dict() | {"answers": capacity is not None, "capacity": capacity,
                                      "problem": problem})
    if not rows:
        emit(as_json, {"running": False, "sites": []}, lambda: console.print(
            "No local provider sites are running; start them with `swarm cluster up`."))
        return

    def human() -> None:
        console.print(table("Provider sites", ["provider", "url", "state", "nodes", "CPUs", "GPUs"], [
            (r["provider"], r["url"], "[green]serving[/]" if r["answers"] else "[red]not answering[/]",
             *(_count(r["capacity"], k) for k in ("nodes", "cpus", "gpus")))
            for r in rows]))
        for r in rows:
            if r["problem"]:
                console.print(r["problem"], highlight=False)

    emit(as_json, {"running": True, "sites": rows}, human)


def _count(capacity: dict | None, key: str) -> str:
    value = (capacity or {}).get(key)
    return f"{value:g}" if isinstance(value, (int, float)) else "-"
