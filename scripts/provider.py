"""`swarm provider …`: register, stake, unstake, withdraw, unjail, claim, status, and
join/leave a Ray cluster as a provider node.

Every command checks what it can before signing, so a refused command sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ledger import stake
from ledger.client import Swarm
from ledger.errors import InvalidInput, SwarmError
from ledger.keys import Keystore
from ledger.specs import load_spec, store_spec
from ledger.stake import HardwareSpec, ProviderInfo
from ledger.units import format_amount, parse_address, parse_amount
from scripts.common import (
    account_option, console, dev_account_address, duration, emit, json_option, key_option, open_swarm, settings,
    signer, table, when,
)

if TYPE_CHECKING:
    from ledger.tx import Receipt, Sender


@click.group()
def provider() -> None:
    """Provider registration, stake, rewards and Ray nodes."""


def _signed(fn: Callable) -> Callable:
    """Adds --account, --key and --json to a command that signs."""
    return account_option(key_option(json_option(fn)))


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
@click.option("--update", is_flag=True, help="Declare new hardware for an already registered provider.")
@_signed
def register(
    gpu_model: str, gpus: int, vram_gb: int, region: str | None, price: str | None, site_url: str | None,
    site_fingerprint: str | None, update: bool, account: int | None, key_ref: str | None, as_json: bool,
) -> None:
    """Register as a provider, declaring the hardware on offer and, optionally, its price and site."""
    price_wei = None if price is None else parse_amount(price, "price per unit")
    # validated before anything else
    spec = HardwareSpec(gpu_model, gpus, vram_gb, region, price_wei, site_url, site_fingerprint)
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = stake.provider_info(swarm, sender.address)
    digest = store_spec(settings().home, spec.as_dict())
    if info.registered and not update:
        if info.spec_hash == digest:
            raise SwarmError(f"{sender.address} is already registered with this hardware; nothing to do.")
        raise SwarmError(
            f"{sender.address} is already registered with other hardware; pass --update to declare the new one."
        )
    if update and not info.registered:
        raise SwarmError(f"{sender.address} is not registered yet; run `swarm provider register` without --update.")
    receipt = (stake.update_spec if update else stake.register)(swarm, sender, digest, spec.gpus)
    info = stake.provider_info(swarm, sender.address)
    payload = {"provider": sender.address, "spec": spec.as_dict(), "spec_hash": "0x" + digest.hex(),
               "price_per_unit_wei": None if price_wei is None else str(price_wei),
               "min_stake_wei": str(info.min_stake), "tx": receipt.tx_hash}
    asking = "" if price_wei is None else f" at {format_amount(price_wei)} per unit"
    emit(as_json, payload, lambda: console.print(
        f"{'Updated' if update else 'Registered'} {sender.address}: {spec.gpus}× {spec.gpu_model} "
        f"({spec.vram_gb} GB){asking}. Minimum stake {format_amount(info.min_stake)}; "
        f"stake with `swarm provider stake AMOUNT`."
    ))


@provider.command("stake")
@click.argument("amount")
@_signed
def stake_cmd(amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Add AMOUNT SWARM to your stake (one transaction, with a permit)."""
    wei = parse_amount(amount)
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _registered(swarm, sender)
    if info.tombstoned:
        raise SwarmError(f"{sender.address} is tombstoned and can never stake again.")
    receipt = stake.stake(swarm, sender, wei)
    _report(swarm, sender, receipt, as_json, f"Staked {format_amount(wei)}")


@provider.command()
@click.argument("amount")
@_signed
def unstake(amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Start unbonding AMOUNT SWARM of your stake (withdraw it after the unbonding period)."""
    wei = parse_amount(amount)
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _registered(swarm, sender)
    if wei > info.stake:
        raise InvalidInput(
            f"Cannot unstake {format_amount(wei)}: {sender.address} has {format_amount(info.stake)} staked; "
            "unstake at most that."
        )
    receipt = stake.request_unstake(swarm, sender, wei)
    info = stake.provider_info(swarm, sender.address)
    _report(swarm, sender, receipt, as_json,
            f"Unbonding {format_amount(info.unbonding)}, withdrawable at {when(info.unbonding_end)}")


@provider.command()
@_signed
def withdraw(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Withdraw your unbonded stake once the unbonding period is over."""
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = stake.provider_info(swarm, sender.address)
    if info.unbonding == 0:
        raise SwarmError(f"{sender.address} has nothing unbonding; request it first with `swarm provider unstake`.")
    now = swarm.chain.timestamp()
    if now < info.unbonding_end:
        raise SwarmError(
            f"{format_amount(info.unbonding)} is still unbonding until {when(info.unbonding_end)} "
            f"({duration(info.unbonding_end - now)} from now); withdraw after that."
        )
    if now < info.held_until:
        raise SwarmError(
            f"{format_amount(info.unbonding)} is held until {when(info.held_until)} "
            f"({duration(info.held_until - now)} from now) because a job or an epoch report can still slash it; "
            "withdraw after that."
        )
    receipt = stake.withdraw(swarm, sender)
    paid = sum(int(e.args["amount"]) for e in swarm.events(receipt, "Withdrawn"))
    after = stake.provider_info(swarm, sender.address)
    owed = f"; {format_amount(after.unbonding)} stays unbonding for a slash debt of " \
           f"{format_amount(after.slash_debt)}" if after.slash_debt else ""
    _report(swarm, sender, receipt, as_json, f"Withdrew {format_amount(paid)}{owed}")


@provider.command()
@_signed
def unjail(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Return to work after serving jail time (needs the minimum stake)."""
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _registered(swarm, sender)
    now = swarm.chain.timestamp()
    if info.tombstoned:
        raise SwarmError(f"{sender.address} is tombstoned for fraud and can never be unjailed.")
    if info.jailed_until == 0:
        raise SwarmError(f"{sender.address} is not jailed; nothing to do.")
    if now < info.jailed_until:
        raise SwarmError(f"{sender.address} is jailed until {when(info.jailed_until)}; unjail after that.")
    if info.stake < info.min_stake:
        raise SwarmError(
            f"Unjailing needs the minimum stake of {format_amount(info.min_stake)}; "
            f"stake {format_amount(info.min_stake - info.stake)} more first."
        )
    receipt = stake.unjail(swarm, sender)
    _report(swarm, sender, receipt, as_json, "Unjailed; eligible for work again")


@provider.command()
@_signed
def claim(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Claim every reward finalized for you so far, with one proof from the ledger."""
    swarm = open_swarm()
    from ledger.db import open_session
    from ledger.indexer.rewards import reward_leaf

    sender = signer(swarm, account, key_ref)
    with open_session(settings()) as session:
        leaf = reward_leaf(session, swarm.chain.chain_id, sender.address)
    if leaf is None:
        raise SwarmError(
            f"The ledger holds no finalized rewards for {sender.address}; run `swarm ledger sync` and try again."
        )
    from ledger import rewards
    from ledger.merkle import verify

    epoch, cumulative, proof = leaf
    if not verify(swarm.read("RewardDistributor", "rewardsRoot"), sender.address, cumulative, proof):
        raise SwarmError(
            "The ledger's rewards are older than the chain's latest finalized epoch; run `swarm ledger sync` and retry."
        )
    already = int(swarm.read("RewardDistributor", "claimed", sender.address))
    if cumulative <= already:
        raise SwarmError(
            f"Nothing to claim: {sender.address} has claimed all {format_amount(already)} earned to epoch {epoch}."
        )
    receipt = rewards.claim(swarm, sender, sender.address, cumulative, proof)
    _report(swarm, sender, receipt, as_json, f"Claimed {format_amount(cumulative - already)} (to epoch {epoch})")


@provider.command()
@click.argument("address", required=False)
@account_option
@key_option
@json_option
def status(address: str | None, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Stake, unbonding, jail state and claimable rewards of ADDRESS (or your own)."""
    swarm = open_swarm()
    who = parse_address(address, "provider address") if address else _own_address(swarm, account, key_ref)
    info = stake.provider_info(swarm, who)
    now = swarm.chain.timestamp()
    claimable = _claimable(swarm, who)
    spec = _spec(info)
    payload = {
        "provider": who,
        "registered": info.registered,
        "hardware": spec,
        "price_per_unit_wei": (spec or {}).get("price_per_unit"),
        "stake_wei": str(info.stake),
        "min_stake_wei": str(info.min_stake),
        "unbonding_wei": str(info.unbonding),
        "unbonding_release": info.unbonding_end or None,
        "held_until": info.held_until if info.held_until > now else None,
        "slash_debt_wei": str(info.slash_debt),
        "jailed": info.jailed_until != 0,
        "jailed_until": info.jailed_until or None,
        "tombstoned": info.tombstoned,
        "eligible": bool(swarm.read("StakingVault", "isEligible", who)),
        "balance_wei": str(swarm.balance_of(who)),
        "claimable_wei": None if claimable is None else str(claimable),
    }

    def human() -> None:
        if not info.registered:
            console.print(f"{who} is not a registered provider.")
            return
        jail = "tombstoned (for ever)" if info.tombstoned else (
            "free" if info.jailed_until == 0 else
            f"jailed until {when(info.jailed_until)}" + (" — may unjail now" if now >= info.jailed_until else ""))
        unbonding = format_amount(info.unbonding)
        if info.unbonding:
            release = max(info.unbonding_end, info.held_until)
            ready = "withdrawable now" if now >= release else f"withdrawable at {when(release)}"
            held = " — a job or an epoch report can still slash it" if info.held_until > max(now, info.unbonding_end) \
                else ""
            unbonding += f" ({ready}{held})"
        rows = [
            ("hardware", f"{spec['gpus']}× {spec['gpu_model']} ({spec['vram_gb']} GB)" if spec else "spec not stored here"),
            *([("asking price", f"{format_amount(int(spec['price_per_unit']))} per unit")]
              if spec and "price_per_unit" in spec else []),
            ("stake", f"{format_amount(info.stake)} (minimum {format_amount(info.min_stake)})"),
            ("unbonding", unbonding),
            ("jail", jail),
            *([("slash debt", f"{format_amount(info.slash_debt)} (collected as the network's slash limit refills)")]
              if info.slash_debt else []),
            ("eligible for work", "yes" if payload["eligible"] else "no"),
            ("wallet", format_amount(int(payload["balance_wei"]))),
            ("claimable rewards", "unknown (run `swarm ledger sync`)" if claimable is None else format_amount(claimable)),
        ]
        console.print(table(f"Provider {who}", ["", ""], rows))

    emit(as_json, payload, human)


# ── helpers ──────────────────────────────────────────────────────────────────

def _registered(swarm: Swarm, sender: Sender) -> ProviderInfo:
    info = stake.provider_info(swarm, sender.address)
    if not info.registered:
        raise SwarmError(f"{sender.address} is not a registered provider; run `swarm provider register` first.")
    return info


def _own_address(swarm: Swarm, account: int | None, key_ref: str | None) -> str:
    if account is not None:
        return dev_account_address(swarm, account)
    return Keystore(settings().home / "keys").find(key_ref).address


def _claimable(swarm: Swarm, who: str) -> int | None:
    """Finalized cumulative rewards in the ledger less what was claimed on-chain; None if not indexed."""
    from ledger.indexer.rewards import reward_leaf
    from ledger.reader import read_ledger

    try:
        with read_ledger(settings()) as ledger:
            if ledger is None:
                return None
            leaf = reward_leaf(ledger, swarm.chain.chain_id, who)
    except SwarmError:
        return None
    if leaf is None:
        return 0
    return max(0, leaf[1] - int(swarm.read("RewardDistributor", "claimed", who)))


def _spec(info: ProviderInfo) -> dict | None:
    if not info.registered:
        return None
    try:
        return load_spec(settings().home, info.spec_hash)
    except SwarmError:
        return None


def _report(swarm: Swarm, sender: Sender, receipt: Receipt, as_json: bool, message: str) -> None:
    info = stake.provider_info(swarm, sender.address)
    payload = {"provider": sender.address, "tx": receipt.tx_hash, "block": receipt.block_number,
               "stake_wei": str(info.stake), "unbonding_wei": str(info.unbonding)}
    emit(as_json, payload, lambda: console.print(
        f"{message}. Stake now {format_amount(info.stake)} ({receipt.tx_hash})"
    ))


# ── Ray nodes: join a cluster, leave it ──────────────────────────────────────

@provider.command()
@click.option("--ray-address", required=True, help="The Ray head's GCS address, HOST:PORT.")
@click.option("--num-cpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs the node offers.")
@click.option("--num-gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs the node offers.")
@account_option
@key_option
@json_option
def join(ray_address: str, num_cpus: int, num_gpus: int, account: int | None, key_ref: str | None,
         as_json: bool) -> None:
    """Start a Ray node for your provider on this machine, once the chain says you may serve.

    The node is labelled provider=<address> and carries the provider:<address> resource; it
    authenticates with the cluster's token in $SWARM_HOME/ray/auth_token.
    """
    from compute import node

    node.parse_address(ray_address)  # a malformed address is refused before anything else
    swarm = open_swarm()
    who = _own_address(swarm, account, key_ref)
    _may_serve(swarm, stake.provider_info(swarm, who))
    joined = node.join(node.RayHome.of(settings().home), ray_address, node.NodeSpec(who, num_cpus, num_gpus))
    emit(as_json, joined.as_dict(), lambda: console.print(
        f"Joined {ray_address} as node {joined.node_id} for {who} ({num_cpus} CPU, {num_gpus} GPU); "
        "stop it with `swarm provider leave`."
    ))


@provider.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where the site listens; 0.0.0.0 serves every interface.")
@click.option("--port", type=click.IntRange(1, 65535), default=8443, show_default=True, help="The site's HTTPS port.")
@click.option("--num-cpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs of each node the site starts on this machine.")
@click.option("--num-gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs of each node the site starts on this machine.")
@click.option("--nodes", type=click.IntRange(1, 9), default=1, show_default=True,
              help="Nodes the site starts on this machine; more machines join with `swarm provider join`.")
@_signed
def serve(host: str, port: int, num_cpus: int, num_gpus: int, nodes: int, account: int | None,
          key_ref: str | None, as_json: bool) -> None:
    """Run your site: your own Ray cluster, served over HTTPS to those the chain allows.

    Starts the site's Ray cluster (or attaches to the one running in $SWARM_HOME) with a token
    that stays on your machines, then serves leases, probes and challenges until stopped. Stays
    in the foreground, for a supervisor such as systemd. The chain authorizes every request, so
    a site may run before its provider registers: register its URL and fingerprint after.
    """
    import json as json_lib

    from provider.site import SiteConfig, run_site

    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)

    def ready(running) -> None:
        payload = {"provider": sender.address, "url": running.url, "fingerprint": running.identity.fingerprint,
                   "certificate": str(running.identity.certificate)}
        if as_json:
            click.echo(json_lib.dumps(payload), nl=True)
        else:
            console.print(f"Site of {sender.address} serving {running.url}; certificate sha256 "
                          f"{running.identity.fingerprint}. Register both with `swarm provider register "
                          f"--update --site-url {running.url} --site-fingerprint {running.identity.fingerprint}`.")
        import sys

        sys.stdout.flush()

    config = SiteConfig(host=host, port=port, node_cpus=num_cpus, node_gpus=num_gpus, nodes=nodes)
    run_site(swarm, sender, settings().home, config, ready=ready)


@provider.command()
@json_option
def nodes(as_json: bool) -> None:
    """Your site's Ray nodes: its head, the nodes it started, and the machines that joined."""
    from compute import cluster as local
    from compute.node import RayHome

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
        rows = [(n.provider or "(head)", n.node_id[:16], kind(n), "[green]alive[/]" if n.alive else "[red]dead[/]",
                 f"{n.cpus:g}", f"{n.gpus:g}") for n in found]
        console.print(table(f"The site's Ray cluster at {state.address}",
                            ["provider", "node", "kind", "state", "CPUs", "GPUs"], rows))

    emit(as_json, payload, human)


@provider.command()
@account_option
@key_option
@json_option
def leave(account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Stop the Ray node this machine runs for your provider (running work drains first)."""
    from compute import node

    who = _own_address(open_swarm(), account, key_ref)
    left = node.leave(node.RayHome.of(settings().home), who)
    emit(as_json, {"provider": who, "stopped": left is not None, "node_id": left and left.node_id},
         lambda: console.print(f"Node {left.node_id} for {who} has left {left.head_address}." if left
                               else f"No Ray node runs here for {who}; nothing to do."))


def _may_serve(swarm: Swarm, info: ProviderInfo) -> None:
    """Refuses, in one sentence, a provider the chain does not let serve work."""
    who = info.address
    if not info.registered:
        raise SwarmError(f"{who} is not registered; run `swarm provider register` first.")
    if info.tombstoned:
        raise SwarmError(f"{who} is tombstoned for fraud and can never serve again.")
    if info.jailed_until:
        if swarm.chain.timestamp() < info.jailed_until:
            raise SwarmError(
                f"{who} is jailed until {when(info.jailed_until)}; "
                "after that run `swarm provider unjail`, then join."
            )
        raise SwarmError(
            f"{who} was jailed until {when(info.jailed_until)}; run `swarm provider unjail` first."
        )
    if info.stake < info.min_stake:
        raise SwarmError(
            f"{who} has {format_amount(info.stake)} staked, "
            f"below its minimum of {format_amount(info.min_stake)}; "
            f"stake {format_amount(info.min_stake - info.stake)} more with `swarm provider stake`."
        )
    if not swarm.read("StakingVault", "isEligible", who):
        raise SwarmError(
            f"The staking vault does not list {who} as eligible for work; see `swarm provider status`."
        )
