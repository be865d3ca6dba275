"""`swarm chain up|down|status|deploy`: the local devnet and the contracts on any chain."""

from __future__ import annotations

import os

import click

from anvil import dev_account
from ledger.chain import connect
from ledger.deploy import Deployment, DeployParams, deploy, error_decoder
from ledger.errors import SwarmError
from ledger.keys import parse_private_key
from ledger.units import parse_address
from scripts.common import account_option, console, emit, json_option, local_node, settings, table


@click.group()
def chain() -> None:
    """Run the local devnet and deploy Swarm's contracts."""


@chain.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port for anvil (default 8545 or SWARM_ANVIL_PORT).",
)
@json_option
def up(port: int | None, as_json: bool) -> None:
    """Start the local anvil, resuming its saved state."""
    status = local_node(port).start()
    emit(as_json, status.as_dict(), lambda: console.print(
        f"anvil is up at [bold]{status.url}[/] (chain {status.chain_id}, block {status.block_number}); "
        f"state in {status.state_file}"
    ))


@chain.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None)
@json_option
def down(port: int | None, as_json: bool) -> None:
    """Stop the local anvil, saving its state."""
    stopped = local_node(port).stop()
    emit(as_json, {"stopped": stopped}, lambda: console.print(
        "anvil stopped; its state is saved." if stopped else "anvil was not running."
    ))


@chain.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None)
@json_option
def status(port: int | None, as_json: bool) -> None:
    """Report the local anvil and the deployment on SWARM_RPC_URL."""
    s = settings()
    node_status = local_node(port).status()
    deployment = None
    if node_status.running or not s.rpc_url_is_default:
        try:
            deployment = Deployment.load(s.home, connect(s.rpc_url).chain_id)
        except SwarmError:
            deployment = None
    payload = {
        "anvil": node_status.as_dict(),
        "rpc_url": s.rpc_url,
        "deployment": deployment and deployment.__dict__,
    }

    def human() -> None:
        state = "[green]running[/]" if node_status.running else "[red]stopped[/]"
        console.print(f"anvil: {state} at {node_status.url} (pid {node_status.pid or '-'}, "
                      f"block {node_status.block_number if node_status.block_number is not None else '-'}, "
                      f"state {node_status.state_bytes:,} bytes)")
        if deployment is None:
            console.print("Swarm: not deployed on this chain (run `swarm chain deploy`).")
        else:
            console.print(table(
                f"Swarm on chain {deployment.chain_id}", ["contract", "address"], deployment.addresses.items()
            ))

    emit(as_json, payload, human)


@chain.command("deploy")
@click.option("--chain-id", type=int, default=None, help="Refuse to deploy unless the chain has this id.")
@account_option
@click.option("--force", is_flag=True, help="Deploy anew even if a live deployment exists.")
@click.option(
    "--committee", default=None, help="Comma-separated oracle signer addresses (required off devnets)."
)
@click.option(
    "--threshold", type=click.IntRange(min=1), default=None, help="Signatures an epoch report needs."
)
@json_option
def deploy_cmd(
    chain_id: int | None,
    account: int | None,
    force: bool,
    committee: str | None,
    threshold: int | None,
    as_json: bool,
) -> None:
    """Deploy the contracts to SWARM_RPC_URL once; later calls reuse them.

    On a devnet the deployer is dev account 0 (or --account N) and the ten dev
    accounts receive tokens. Elsewhere the deployer key comes from SWARM_DEPLOYER_KEY.
    """
    from ledger.tx import Sender

    s = settings()
    target = connect(s.rpc_url, chain_id)
    sender = Sender(target, _deployer_key(target.is_devnet, target.chain_id, account), error_decoder())
    params = _params(target.is_devnet, committee, threshold)
    result = deploy(target, sender, s.home, params, force=force)
    d = result.deployment
    payload = {
        "chain_id": d.chain_id,
        "created": result.created,
        "stale": result.stale,
        "addresses": d.addresses,
        "deployer": d.deployer,
        "funded": list(result.funded),
        "file": str(Deployment.path(s.home, d.chain_id)),
    }

    def human() -> None:
        verb = "Deployed" if result.created else "Already deployed"
        console.print(table(f"{verb} on chain {d.chain_id}", ["contract", "address"], d.addresses.items()))
        if result.funded:
            console.print(f"Funded {len(result.funded)} dev accounts with tokens.")
        if result.stale:
            console.print(
                "[yellow]The contract sources changed since this deployment; --force deploys anew.[/]"
            )
        console.print(f"Addresses saved in {payload['file']}")

    emit(as_json, payload, human)


def _deployer_key(is_devnet: bool, chain_id: int, account: int | None) -> bytes:
    if is_devnet:
        return dev_account(account or 0).key
    if account is not None:
        raise SwarmError(
            f"--account selects anvil's public dev keys and is refused on chain {chain_id}, which is not a "
            "devnet; "
            "set SWARM_DEPLOYER_KEY instead."
        )
    key = os.environ.get("SWARM_DEPLOYER_KEY")
    if not key:
        raise SwarmError(
            f"Chain {chain_id} is not a devnet; set SWARM_DEPLOYER_KEY to the deployer's private key."
        )
    return parse_private_key(key, "SWARM_DEPLOYER_KEY", "set it to the deployer's private key")


def _params(is_devnet: bool, committee: str | None, threshold: int | None) -> DeployParams | None:
    if committee is None and threshold is None:
        return None if is_devnet else _params(False, "", None)
    members = tuple(parse_address(a, "committee address") for a in (committee or "").split(",") if a.strip())
    if not members or threshold is None:
        raise SwarmError("Give both --committee ADDR,ADDR,... and --threshold N for the oracle committee.")
    defaults = DeployParams.devnet() if is_devnet else DeployParams(committee=members, threshold=threshold)
    return DeployParams(**{**defaults.__dict__, "committee": members, "threshold": threshold})
