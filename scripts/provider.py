"""`swarm provider …`: register, stake, unstake, withdraw, unjail, claim, status, and
join/leave a Ray cluster as a provider node.

The on-chain operations are `ledger.operator.Provider`'s, which checks what it can before
signing, so a refused command sends nothing; joining a machine is `provider.join`'s, which asks
the chain first. These commands parse their arguments and print.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from compute import cluster as local
from compute.node import NodeSpec, RayHome
from compute.node import parse_address as parse_ray_address
from ledger import stake
from ledger.client import Swarm
from ledger.errors import InvalidInput, SwarmError
from ledger.keys import Keystore
from ledger.operator import Provider, ProviderStatus, Sent, declarable
from ledger.specs import load_spec
from ledger.stake import HardwareSpec
from ledger.units import format_amount, parse_address, parse_amount
from scripts.common import (
    account_option,
    console,
    dev_account_address,
    emit,
    json_option,
    key_option,
    open_swarm,
    settings,
    signed_options,
    signer,
    table,
    waiting_for_chain,
    when,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the site (FastAPI, web3), its receipts and serving, joining a mesh
# (`provider`) and the site client (`wire`) — loads inside them (tests/test_startup.py, bench/startup.py).

if TYPE_CHECKING:
    from ledger.tx import Sender
    from wire.client import SiteAddress


@click.group()
def provider() -> None:
    """Provider registration, stake, rewards and Ray nodes."""


_signed = signed_options


def _provider(account: int | None, key_ref: str | None) -> Provider:
    """The provider's API, signing as --account or --key."""
    swarm = open_swarm()
    return Provider(swarm, signer(swarm, account, key_ref), settings())


@provider.command()
@click.option("--gpu-model", required=True, help="Declared GPU model, e.g. H100.")
@click.option("--gpus", type=int, required=True, help="Number of GPUs on offer.")
@click.option("--vram-gb", type=int, required=True, help="Memory per GPU in GB.")
@click.option("--region", default=None, help="Where the machines are, e.g. eu-west.")
@click.option("--price", default=None, metavar="AMOUNT",
              help="Asking price in SWARM per unit: a GPU-second, or a CPU-second on CPU-only nodes.")
@click.option("--site-url", default=None, metavar="URL",
              help="Where the provider's site answers, https://HOST:PORT (with --site-fingerprint).")
@click.option("--site-fingerprint", default=None, metavar="HEX",
              help="The sha256 of the site's TLS certificate, so anyone can authenticate it from the chain.")
@click.option("--gpu-uuid", "gpu_uuids", multiple=True, metavar="UUID",
              help="A GPU's UUID as `nvidia-smi -L` gives it, once per GPU; the oracle then requires them.")
@click.option("--update", is_flag=True, help="Declare new hardware for an already registered provider.")
@_signed
def register(
    gpu_model: str, gpus: int, vram_gb: int, region: str | None, price: str | None, site_url: str | None,
    site_fingerprint: str | None, gpu_uuids: tuple[str, ...], update: bool, account: int | None,
    key_ref: str | None, as_json: bool,
) -> None:
    """Register as a provider, declaring the hardware on offer and, optionally, its price and site."""
    price_wei = None if price is None else parse_amount(price, "price per unit")
    # validated before the chain is opened
    spec = declarable(HardwareSpec(gpu_model, gpus, vram_gb, region, price_wei, site_url, site_fingerprint,
                                   tuple(gpu_uuids)))
    done = _provider(account, key_ref).declare(spec, update)
    payload = {"provider": done.provider, "spec": spec.as_dict(), "spec_hash": done.spec_hash,
               "price_per_unit_wei": None if price_wei is None else str(price_wei),
               "min_stake_wei": str(done.min_stake_wei), "tx": done.tx}
    asking = "" if price_wei is None else f" at {format_amount(price_wei)} per unit"
    emit(as_json, payload, lambda: console.print(
        f"{'Updated' if update else 'Registered'} {done.provider}: {spec.gpus}× {spec.gpu_model} "
        f"({spec.vram_gb} GB){asking}. Minimum stake {format_amount(done.min_stake_wei)}; "
        f"stake with `swarm provider stake AMOUNT`."
    ))


@provider.command("stake")
@click.argument("amount")
@_signed
def stake_cmd(amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Add AMOUNT SWARM to your stake (one transaction, with a permit)."""
    wei = parse_amount(amount)  # refused before the chain is opened
    staked = _provider(account, key_ref).stake(wei)
    _report(staked, as_json, f"Staked {format_amount(staked.amount_wei)}")


@provider.command()
@click.argument("amount")
@_signed
def unstake(amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Start unbonding AMOUNT SWARM of your stake (withdraw it after the unbonding period)."""
    wei = parse_amount(amount)
    done = _provider(account, key_ref).unstake(wei)
    _report(
        done,
        as_json,
        f"Unbonding {format_amount(done.unbonding_wei)}, withdrawable at {when(done.unbonding_release or 0)}",
    )


@provider.command()
@_signed
def withdraw(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Withdraw your unbonded stake once the unbonding period is over."""
    done = _provider(account, key_ref).withdraw()
    owed = f"; {format_amount(done.unbonding_wei)} stays unbonding for a slash debt of " \
           f"{format_amount(done.slash_debt_wei)}" if done.slash_debt_wei else ""
    _report(done, as_json, f"Withdrew {format_amount(done.amount_wei)}{owed}")


@provider.command()
@_signed
def unjail(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Return to work after serving jail time (needs the minimum stake)."""
    _report(_provider(account, key_ref).unjail(), as_json, "Unjailed; eligible for work again")


@provider.command()
@_signed
def claim(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Claim every reward finalized for you so far, with one proof from the ledger."""
    done = _provider(account, key_ref).claim()
    _report(done, as_json, f"Claimed {format_amount(done.amount_wei)} (to epoch {done.epoch})")


@provider.command()
@click.argument("address", required=False)
@account_option
@key_option
@json_option
def status(address: str | None, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Stake, unbonding, jail state and claimable rewards of ADDRESS (or your own)."""
    swarm = open_swarm()
    who = parse_address(address, "provider address") if address else _own_address(swarm, account, key_ref)
    report = Provider(swarm, None, settings()).status(who)
    payload = _status_json(report)
    emit(as_json, payload, lambda: _print_status(report))


def _status_json(s: ProviderStatus) -> dict:
    price = s.price_per_unit_wei
    return {
        "provider": s.provider,
        "registered": s.registered,
        "hardware": s.hardware,
        "price_per_unit_wei": None if price is None else str(price),
        "stake_wei": str(s.stake_wei),
        "min_stake_wei": str(s.min_stake_wei),
        "unbonding_wei": str(s.unbonding_wei),
        "unbonding_release": s.unbonding_release,
        "held_until": s.held_until,
        "slash_debt_wei": str(s.slash_debt_wei),
        "jailed": s.jailed,
        "jailed_until": s.jailed_until,
        "tombstoned": s.tombstoned,
        "eligible": s.eligible,
        "balance_wei": str(s.balance_wei),
        "claimable_wei": None if s.claimable_wei is None else str(s.claimable_wei),
    }


def _print_status(s: ProviderStatus) -> None:
    if not s.registered:
        console.print(f"{s.provider} is not a registered provider.")
        return
    now, spec = s.chain_time, s.hardware
    jail = "tombstoned (for ever)" if s.tombstoned else (
        "free" if s.jailed_until is None else
        f"jailed until {when(s.jailed_until)}" + (" — may unjail now" if now >= s.jailed_until else ""))
    unbonding = format_amount(s.unbonding_wei)
    if s.withdrawable_at is not None:
        ready = (
            "withdrawable now" if now >= s.withdrawable_at else f"withdrawable at {when(s.withdrawable_at)}"
        )
        held = " — a job or an epoch report can still slash it" \
            if (s.held_until or 0) > max(now, s.unbonding_release or 0) else ""
        unbonding += f" ({ready}{held})"
    rows = [
        (
            "hardware",
            f"{spec['gpus']}× {spec['gpu_model']} ({spec['vram_gb']} GB)" if spec else "spec not stored here",
        ),
        *(
            [("asking price", f"{format_amount(s.price_per_unit_wei)} per unit")]
            if s.price_per_unit_wei is not None
            else []
        ),
        ("stake", f"{format_amount(s.stake_wei)} (minimum {format_amount(s.min_stake_wei)})"),
        ("unbonding", unbonding),
        ("jail", jail),
        *(
            [
                (
                    "slash debt",
                    f"{format_amount(s.slash_debt_wei)} (collected as the network's slash limit refills)",
                )
            ]
            if s.slash_debt_wei
            else []
        ),
        ("eligible for work", "yes" if s.eligible else "no"),
        ("wallet", format_amount(s.balance_wei)),
        (
            "claimable rewards",
            "unknown (run `swarm ledger sync`)"
            if s.claimable_wei is None
            else format_amount(s.claimable_wei),
        ),
    ]
    console.print(table(f"Provider {s.provider}", ["", ""], rows))


# ── helpers ──────────────────────────────────────────────────────────────────

def _own_address(swarm: Swarm, account: int | None, key_ref: str | None) -> str:
    if account is not None:
        return dev_account_address(swarm, account)
    return Keystore(settings().home / "keys").find(key_ref).address


def _report(done: Sent, as_json: bool, message: str) -> None:
    payload = {"provider": done.provider, "tx": done.tx, "block": done.block,
               "stake_wei": str(done.stake_wei), "unbonding_wei": str(done.unbonding_wei)}
    emit(as_json, payload, lambda: console.print(
        f"{message}. Stake now {format_amount(done.stake_wei)} ({done.tx})"
    ))


# ── Ray nodes: join a cluster, leave it ──────────────────────────────────────

@provider.command()
@click.option("--ray-address", default=None, help="The Ray head's GCS address, HOST:PORT (with --site: the "
              "head's on the mesh, unless given).")
@click.option("--num-cpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs the node offers.")
@click.option("--num-gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs the node offers.")
@click.option("--site", "site_url", default=None, metavar="SITE_URL",
              help="Join this site's WireGuard mesh first (its head runs `serve --mesh-endpoint`).")
@click.option("--fingerprint", default=None, metavar="SHA256", help="With --site: the site's certificate "
              "fingerprint, as `serve` printed it.")
@click.option("--mesh-name", default=None, help="With --site: this machine's name in the mesh.")
@click.option("--mesh-endpoint", default=None, metavar="HOST:PORT",
              help="With --site: where the other machines reach this one (UDP); none behind NAT.")
@click.option("--interface", default="swarm0", show_default=True,
              help="With --site: the WireGuard interface.")
@account_option
@key_option
@json_option
def join(ray_address: str | None, num_cpus: int, num_gpus: int, site_url: str | None, fingerprint: str | None,
         mesh_name: str | None, mesh_endpoint: str | None, interface: str, account: int | None,
         key_ref: str | None, as_json: bool) -> None:
    """Start a Ray node for your provider on this machine, once the chain says you may serve.

    The node is labelled provider=<address> and carries the provider:<address> resource; it
    authenticates with the cluster's token in $SWARM_HOME/ray/auth_token. With --site, the
    machine first joins the site's WireGuard mesh with a key of its own (the token is the join
    secret), keeps its peers up to date from a process of its own, and binds its node to its
    mesh address; `swarm provider leave` takes both down.
    """
    from provider.join import join_site, join_site_mesh

    if site_url is None and ray_address is None:
        raise SwarmError("Give the site's Ray head with --ray-address HOST:PORT, or its URL with --site to "
                         "join its mesh first.")
    if site_url is not None and (fingerprint is None or mesh_name is None):
        raise SwarmError("--site needs --fingerprint (as `serve` printed it) and --mesh-name (this machine's "
                         "name in the mesh).")
    if ray_address is not None:
        parse_ray_address(ray_address)  # a malformed address is refused before the chain is asked
    swarm = open_swarm()
    who = _own_address(swarm, account, key_ref)
    spec = NodeSpec(who, num_cpus, num_gpus)
    meshed = None
    if site_url is not None and fingerprint is not None and mesh_name is not None:
        site, secret = _mesh_site(site_url, fingerprint)
        joined, meshed = join_site_mesh(swarm, settings().home, site, secret, mesh_name, mesh_endpoint,
                                        interface, spec, ray_address)
    elif ray_address is not None:
        joined = join_site(swarm, settings().home, ray_address, spec)
    payload = joined.as_dict() | ({"mesh": {k: meshed[k] for k in ("address", "network", "interface")}}
                                  if meshed else {})
    on_mesh = f" over the mesh at {meshed['address']} on {interface}" if meshed else ""
    emit(as_json, payload, lambda: console.print(
        f"Joined {joined.head_address} as node {joined.node_id} for {who} ({num_cpus} CPU, {num_gpus} GPU)"
        f"{on_mesh}; "
        "stop it with `swarm provider leave`."
    ))


@provider.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where the site listens; 0.0.0.0 serves every interface.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8443, show_default=True,
    help="The site's HTTPS port; 0 takes a free one the system picks.",
)
@click.option("--num-cpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs of each node the site starts on this machine.")
@click.option("--num-gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs of each node the site starts on this machine.")
@click.option("--nodes", type=click.IntRange(1, 9), default=1, show_default=True,
              help="Nodes the site starts on this machine; more machines join with `swarm provider join`.")
@click.option("--mesh-endpoint", default=None, metavar="HOST:PORT",
              help="Run the site's WireGuard mesh, its machines reaching this one at HOST:PORT (UDP).")
@click.option("--mesh-network", default="10.231.0.0/16", show_default=True, metavar="CIDR",
              help="The mesh's addresses.")
@click.option("--shared-dir", default=None, metavar="PATH",
              type=click.Path(file_okay=False, path_type=Path),
              help="A directory every machine of the site mounts at this path, where a lease across "
                   "nodes keeps its checkpoints and outputs; without it the site runs no lease across nodes.")
@click.option("--serving-cap", default="10", show_default=True, metavar="SWARM",
              help="What a buyer of a serving lease may owe in receipts before it must sign a voucher.")
@click.option("--redeem-least", default="1", show_default=True, metavar="SWARM",
              help="Redeem a buyer's voucher once it adds this much (and always when the buyer thaws).")
@click.option("--redeem-every", type=click.FloatRange(min=1), default=300, show_default=True,
              metavar="SECONDS",
              help="Redeem a buyer's voucher at least this often, whatever it adds.")
@click.option("--serving-idle", type=click.FloatRange(min=10), default=1800, show_default=True,
              metavar="SECONDS", help="Stop a serving lease no one has called for this long.")
@_signed
def serve(host: str, port: int, num_cpus: int, num_gpus: int, nodes: int, mesh_endpoint: str | None,
          mesh_network: str, shared_dir: Path | None, serving_cap: str, redeem_least: str,
          redeem_every: float, serving_idle: float, account: int | None, key_ref: str | None,
          as_json: bool) -> None:
    """Run your site: your own Ray cluster, served over HTTPS to those the chain allows.

    Starts the site's Ray cluster (or attaches to the one running in $SWARM_HOME) with a token
    that stays on your machines, then serves leases, probes and challenges until stopped. Stays
    in the foreground, for a supervisor such as systemd. The chain authorizes every request, so
    a site may run before its provider registers: register its URL and fingerprint after.
    """
    import json as json_lib

    from provider.site import SiteConfig, run_site

    cap, least = parse_amount(serving_cap, "--serving-cap"), parse_amount(redeem_least, "--redeem-least")

    def connected() -> tuple[Swarm, Sender]:
        swarm = open_swarm()
        return swarm, signer(swarm, account, key_ref)

    # A site under a supervisor may start before its chain node answers: it waits for it.
    swarm, sender = waiting_for_chain(connected, lambda line: click.echo(line, err=True))

    def ready(running) -> None:
        payload = {
            "provider": sender.address,
            "url": running.url,
            "fingerprint": running.identity.fingerprint,
            "certificate": str(running.identity.certificate),
        }
        if as_json:
            click.echo(json_lib.dumps(payload), nl=True)
        else:
            console.print(
                f"Site of {sender.address} serving {running.url}; certificate sha256 "
                f"{running.identity.fingerprint}. Register both with "
                f"`{register_command(swarm, sender.address, running.url, running.identity.fingerprint)}`."
            )
        import sys

        sys.stdout.flush()

    config = SiteConfig(host=host, port=port, node_cpus=num_cpus, node_gpus=num_gpus, nodes=nodes,
                        mesh_endpoint=mesh_endpoint, mesh_network=mesh_network, shared_dir=shared_dir,
                        serving_cap=cap, redeem_least=least, redeem_every_s=redeem_every,
                        serving_idle_s=serving_idle)
    run_site(swarm, sender, settings().home, config, ready=ready)


@provider.command()
@json_option
def nodes(as_json: bool) -> None:
    """Your site's Ray nodes: its head, the nodes it started, and the machines that joined."""
    home = RayHome.of(settings().home)
    state = local.running(home)
    if state is None:
        emit(as_json, {"running": False, "nodes": []}, lambda: console.print(
            "No site's Ray cluster runs in this SWARM_HOME; start it with `swarm provider serve`."))
        return
    found = local.nodes(home, state)
    simulated = {n.node_id for n in state.nodes}

    def kind(node) -> str:
        return "head" if node.head else ("simulated" if node.node_id in simulated else "joined")

    payload = {"running": True, "address": state.address, "dashboard": state.dashboard, "pid": state.pid,
               "nodes": [n.as_dict() | {"kind": kind(n)} for n in found]}

    def human() -> None:
        rows = [
            (
                n.provider or "(head)",
                n.node_id[:16],
                kind(n),
                "[green]alive[/]" if n.alive else "[red]dead[/]",
                f"{n.cpus:g}",
                f"{n.gpus:g}",
            )
            for n in found
        ]
        console.print(table(f"The site's Ray cluster at {state.address}",
                            ["provider", "node", "kind", "state", "CPUs", "GPUs"], rows))

    emit(as_json, payload, human)


@provider.command()
@account_option
@key_option
@json_option
def leave(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Stop the Ray node this machine runs for your provider (running work drains first)."""
    from provider.join import leave_mesh, leave_site

    who = _own_address(open_swarm(), account, key_ref)
    left = leave_site(settings().home, who)
    mesh_down = leave_mesh(settings().home)
    said = (f"Node {left.node_id} for {who} has left {left.head_address}." if left
            else f"No Ray node runs here for {who}.")
    if mesh_down:
        said += (f" The mesh interface {mesh_down} is down; cut this machine's key off with `swarm provider "
                 "mesh remove` from any machine of the site.")
    elif not left:
        said += " Nothing to do."
    emit(as_json, {"provider": who, "stopped": left is not None, "node_id": left and left.node_id,
                   "mesh_down": mesh_down}, lambda: console.print(said))


@provider.command()
@_signed
def redeem(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Redeem every buyer's latest voucher your site holds, now (the site redeems on its own while it
    serves; this is for a site that is down, or a voucher you want paid at once)."""
    from ledger import serving
    from provider.receipts import ReceiptBook
    from provider.serving import Redeemer

    path = settings().home / "site" / "serving" / "receipts.db"
    if not path.is_file():
        raise InvalidInput(f"No site's receipts in {path.parent}; run this in the SWARM_HOME of your site.")
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)

    def account_of(buyer: str) -> serving.Account:
        return serving.account(swarm, buyer, sender.address)

    book = ReceiptBook(path, serving.domain_of(swarm), sender.address, 0, account_of)
    try:
        redeemer = Redeemer(book, lambda voucher: serving.redeem(swarm, sender, voucher), account_of)
        paid = redeemer.once(force=True)
    finally:
        book.close()
    emit(as_json, {"redeemed": [{"buyer": b, "paid": str(p)} for b, p in paid]}, lambda: console.print(
        "\n".join(f"Redeemed {format_amount(p)} from {b}'s deposit." for b, p in paid)
        or "Nothing to redeem: every voucher is paid as far as its deposit allows."))



# ── the mesh ─────────────────────────────────────────────────────────────────

@provider.group()
def mesh() -> None:
    """The WireGuard mesh between your site's machines (the head: `serve --mesh-endpoint`)."""


def _site_option(fn: Callable) -> Callable:
    fn = click.option("--fingerprint", required=True, metavar="SHA256",
                      help="The site's certificate fingerprint, as `serve` printed it.")(fn)
    return click.argument("site_url", metavar="SITE_URL")(fn)


def _mesh_site(site_url: str, fingerprint: str) -> tuple[SiteAddress, str]:
    """The site to ask, and the join secret: the site's cluster token, copied to this machine."""
    from wire.client import SiteAddress

    token = RayHome.of(settings().home).token
    if not token.is_file():
        raise SwarmError(f"{token} is missing; copy the site's token there from the head's "
                         "$SWARM_HOME/ray/auth_token (the mesh's join secret).")
    return SiteAddress("the provider", site_url, fingerprint.lower()), token.read_text().strip()


@mesh.command("join")
@_site_option
@click.option("--name", required=True, help="This machine's name in the mesh (lowercase, digits, dashes).")
@click.option("--endpoint", default=None, metavar="HOST:PORT",
              help="Where the other machines reach this one (UDP); none for a machine behind NAT.")
@click.option("--interface", default="swarm0", show_default=True, help="The WireGuard interface's name.")
@click.option("--once", is_flag=True, help="Join and return, without keeping the peers up to date.")
@click.option("--rotate", is_flag=True, help="Make this machine a new key pair first; its address stays.")
@json_option
def mesh_join(site_url: str, fingerprint: str, name: str, endpoint: str | None, interface: str, once: bool,
              rotate: bool, as_json: bool) -> None:
    """Join SITE_URL's mesh with this machine's own key, then keep its peers as the head lists
    them (in the foreground, for a supervisor), until stopped. The private key stays in
    $SWARM_HOME/mesh; the join secret is the site's token in $SWARM_HOME/ray/auth_token."""
    import signal
    import threading

    from provider.mesh import Interface, MeshMember, rotate_key

    site, secret = _mesh_site(site_url, fingerprint)
    if rotate:
        rotate_key(settings().home)
    member = MeshMember(settings().home, site, secret, name, endpoint, Interface(interface))
    joined = member.join()
    payload = {"name": name, "address": joined["address"], "network": joined["network"],
               "peers": [p["name"] for p in joined["peers"]], "interface": interface}
    emit(as_json, payload, lambda: console.print(
        f"Joined the mesh as {name} at {joined['address']} ({joined['network']}) on {interface}, "
        f"{len(joined['peers'])} peers."))
    import sys

    sys.stdout.flush()
    if once:
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    member.keep(stop)


@mesh.command("list")
@_site_option
@json_option
def mesh_list(site_url: str, fingerprint: str, as_json: bool) -> None:
    """The machines in SITE_URL's mesh: names, addresses, endpoints and public keys."""
    from provider.mesh import MeshMember

    site, secret = _mesh_site(site_url, fingerprint)
    found = MeshMember(settings().home, site, secret, "", None).machines()
    rows = [(m["name"], m["address"], m["endpoint"] or "dials out", m["public_key"])
            for m in found["machines"]]
    emit(as_json, found, lambda: console.print(
        table(f"The mesh {found['network']}", ["machine", "address", "endpoint", "public key"], rows)))


@mesh.command("remove")
@_site_option
@click.argument("name")
@json_option
def mesh_remove(site_url: str, fingerprint: str, name: str, as_json: bool) -> None:
    """Cut machine NAME off SITE_URL's mesh: the head drops it at once, the others within seconds."""
    from provider.mesh import MeshMember

    site, secret = _mesh_site(site_url, fingerprint)
    done = MeshMember(settings().home, site, secret, "", None).remove(name)
    emit(as_json, done, lambda: console.print(f"Removed {done['removed']} ({done['address']}) from the mesh; "
                                              "the head dropped it at once, the others within seconds."))


def register_command(swarm: Swarm, address: str, url: str, fingerprint: str) -> str:
    """The command that registers a site's URL and fingerprint: for a provider registered
    already, `--update` with the hardware it declared (read from its stored spec, where this
    home has it); for one not yet registered, a first registration, its hardware to fill in."""
    site = f"--site-url {url} --site-fingerprint {fingerprint}"
    info = stake.provider_info(swarm, address)
    if not info.registered:
        return f"swarm provider register --gpu-model MODEL --gpus N --vram-gb GB {site}"
    try:
        spec = load_spec(settings().home, info.spec_hash)
    except (SwarmError, ValueError):
        return f"swarm provider register --update --gpu-model MODEL --gpus N --vram-gb GB {site}"
    declared = [f"--gpu-model {spec['gpu_model']}", f"--gpus {spec['gpus']}", f"--vram-gb {spec['vram_gb']}"]
    if spec.get("region"):
        declared.append(f"--region {spec['region']}")
    if spec.get("price_per_unit") is not None:
        declared.append(f"--price {format_amount(int(spec['price_per_unit'])).split()[0].replace(',', '')}")
    declared += [f"--gpu-uuid {uuid}" for uuid in spec.get("gpu_uuids") or ()]
    return f"swarm provider register --update {' '.join(declared)} {site}"
