"""`swarm chain up|down|status|deploy|admin`: the local devnet, the contracts on any chain, and
their admin changes through the deployment's timelock."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from anvil import dev_account
from ledger.chain import Chain, connect
from ledger.deploy import Deployment, DeployParams, deploy, error_decoder
from ledger.errors import InvalidInput, SwarmError
from ledger.keys import parse_private_key
from ledger.units import parse_address, parse_amount
from scripts.common import (
    account_option,
    console,
    dev_sender,
    emit,
    json_option,
    key_option,
    local_node,
    open_swarm,
    settings,
    signer,
    table,
    when,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the timelock's operations (`ledger.governance`) and web3's signing
# (`ledger.tx`) — loads inside them (tests/test_startup.py, bench/startup.py).

if TYPE_CHECKING:
    from ledger.client import Swarm
    from ledger.governance import Operation
    from ledger.tx import Sender


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
    """Report the local anvil, the deployment on SWARM_RPC_URL and how far its clock runs ahead."""
    s = settings()
    node_status = local_node(port).status()
    target = None
    if node_status.running or not s.rpc_url_is_default:
        with contextlib.suppress(SwarmError):
            target = connect(s.rpc_url)
    deployment = None
    if target is not None:
        with contextlib.suppress(SwarmError):
            deployment = Deployment.load(s.home, target.chain_id)
    ahead = clock_ahead_s(target) if target is not None else None
    payload = {
        "anvil": node_status.as_dict(),
        "rpc_url": s.rpc_url,
        "deployment": deployment and deployment.__dict__,
        "clock_ahead_s": ahead,
    }

    def human() -> None:
        state = "[green]running[/]" if node_status.running else "[red]stopped[/]"
        console.print(f"anvil: {state} at {node_status.url} (pid {node_status.pid or '-'}, "
                      f"block {node_status.block_number if node_status.block_number is not None else '-'}, "
                      f"state {node_status.state_bytes:,} bytes)")
        if ahead is not None and ahead > CLOCK_AHEAD_SHOWN_S:
            console.print(clock_ahead_line("The chain's clock", ahead), highlight=False)
        if deployment is None:
            console.print("Swarm: not deployed on this chain (run `swarm chain deploy`).")
        else:
            console.print(table(
                f"Swarm on chain {deployment.chain_id}", ["contract", "address"], deployment.addresses.items()
            ))

    emit(as_json, payload, human)


CLOCK_AHEAD_SHOWN_S = 60  # less is a block's lag, not a clock moved on


def clock_ahead_s(chain: Chain) -> int | None:
    """Seconds the chain's clock runs ahead of this machine's: the time its next block would carry,
    less now. A devnet's evm_increaseTime moves it on (the demo's epochs do) and nothing moves it
    back; None when the node tells no time."""
    with contextlib.suppress(SwarmError, KeyError, TypeError, ValueError):
        block = chain.rpc("eth_getBlockByNumber", "pending", False) or chain.rpc(
            "eth_getBlockByNumber", "latest", False)
        return int(block["timestamp"], 16) - round(time.time())
    return None


def clock_ahead_line(clock: str, seconds: int) -> str:
    """What a clock `seconds` ahead of this machine's means for the next job's deadline."""
    hours, minutes = divmod(round(seconds / 60), 60)
    by = f"{hours} h {minutes} min" if hours else f"{minutes} min"
    return (f"{clock} runs {by} ahead of this machine's; deadlines given as a duration (1h) count "
            "from the chain's clock.")


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
@click.option("--treasury", default=None,
              help="Who receives fees and slash shares (required off devnets; never the deployer).")
@click.option("--guardian", default=None,
              help="Who pauses and vetoes at once (default on a devnet: the deployer; elsewhere required).")
@click.option("--matcher", default=None,
              help="The market service's key (default on a devnet: the deployer; elsewhere required).")
@click.option("--arbiter", default=None,
              help="Who rules on disputes (default on a devnet: the deployer; elsewhere required).")
@click.option("--timelock-delay", type=click.IntRange(min=0), default=None,
              help="Seconds every admin change waits (off devnets: more than unbonding + challenge window + "
                   "report lag; default 21 days).")
@click.option("--max-report-lag", type=click.IntRange(min=1), default=None,
              help="Seconds from a misconduct to the report that slashes it (default 2 days).")
@click.option("--min-dispute-bond", default=None, help="The smallest dispute bond, in SWARM (default 1).")
@click.option("--max-job-duration", type=click.IntRange(min=1), default=None,
              help="Seconds a job's deadline may lie after its posting (default 30 days).")
@click.option("--min-price-per-unit", default=None,
              help="The lowest price per unit a job may have, in SWARM (default 0.000001).")
@json_option
def deploy_cmd(
    chain_id: int | None,
    account: int | None,
    force: bool,
    committee: str | None,
    threshold: int | None,
    treasury: str | None,
    guardian: str | None,
    matcher: str | None,
    arbiter: str | None,
    timelock_delay: int | None,
    max_report_lag: int | None,
    min_dispute_bond: str | None,
    max_job_duration: int | None,
    min_price_per_unit: str | None,
    as_json: bool,
) -> None:
    """Deploy the contracts to SWARM_RPC_URL once; later calls reuse them.

    On a devnet the deployer is dev account 0 (or --account N), the ten dev accounts
    receive tokens, and the timelock has no delay. Elsewhere the deployer key comes from
    SWARM_DEPLOYER_KEY. Either way the deployer's key then only proposes admin changes to
    the timelock (`swarm chain admin`).
    """
    from ledger.tx import Sender

    s = settings()
    target = connect(s.rpc_url, chain_id)
    sender = Sender(target, _deployer_key(target.is_devnet, target.chain_id, account), error_decoder())
    overrides: dict[str, Any] = {
        "treasury": treasury and parse_address(treasury, "--treasury"),
        "guardian": guardian and parse_address(guardian, "--guardian"),
        "matcher": matcher and parse_address(matcher, "--matcher"),
        "arbiter": arbiter and parse_address(arbiter, "--arbiter"),
        "timelock_delay": timelock_delay,
        "max_report_lag": max_report_lag,
        "min_dispute_bond": min_dispute_bond and parse_amount(min_dispute_bond, "--min-dispute-bond"),
        "max_job_duration": max_job_duration,
        "min_price_per_unit": min_price_per_unit and parse_amount(min_price_per_unit, "--min-price-per-unit"),
    }
    params = _params(target.is_devnet, committee, threshold,
                     {k: v for k, v in overrides.items() if v is not None})
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


def _params(is_devnet: bool, committee: str | None, threshold: int | None,
            overrides: dict[str, Any]) -> DeployParams | None:
    if committee is None and threshold is None and is_devnet:
        return replace(DeployParams.devnet(), **overrides) if overrides else None
    members = tuple(parse_address(a, "committee address") for a in (committee or "").split(",") if a.strip())
    if not members or threshold is None:
        raise SwarmError("Give both --committee ADDR,ADDR,... and --threshold N for the oracle committee.")
    defaults = DeployParams.devnet() if is_devnet else DeployParams(committee=members, threshold=threshold)
    return replace(defaults, committee=members, threshold=threshold, **overrides)


# ── admin changes through the timelock ─────────────────────────────────────────────────
@chain.group()
def admin() -> None:
    """Change a contract's parameters or roles through the deployment's timelock.

    A proposer schedules the call; once the timelock's delay has passed anyone executes it.
    On a devnet the delay is 0 and the proposer is dev account 0."""


@admin.command("schedule")
@click.argument("contract")
@click.argument("function")
@click.argument("args", nargs=-1)
@click.option("--salt", default=None,
              help="32 bytes of hex telling apart two schedulings of the same call (random by default).")
@account_option
@key_option
@json_option
def schedule_cmd(contract: str, function: str, args: tuple[str, ...], salt: str | None, account: int | None,
                 key_ref: str | None, as_json: bool) -> None:
    """Schedule CONTRACT.FUNCTION(ARGS...), e.g. `StakingVault setUnbondingPeriod 1814400`.

    Numbers are wei or seconds, roles may be named (SLASHER_ROLE), lists are comma-separated.
    Prints the operation's id and when it may be executed."""
    from ledger import governance

    swarm = open_swarm()
    call = governance.admin_call_from_text(swarm, contract, function, list(args), _salt(salt))
    scheduled = governance.schedule(swarm, _proposer(swarm, account, key_ref), call)
    wait = max(0, scheduled.ready_at - swarm.chain.timestamp())
    emit(as_json, scheduled.as_dict(), lambda: console.print(
        f"Scheduled {call.description} as operation [bold]0x{scheduled.id.hex()}[/]; executable from "
        f"{when(scheduled.ready_at)} ({wait} s from now) with "
        f"`swarm chain admin execute 0x{scheduled.id.hex()}`.",
        highlight=False,
    ))


@admin.command("execute")
@click.argument("operation_id")
@account_option
@key_option
@json_option
def execute_cmd(operation_id: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Execute the scheduled operation OPERATION_ID once its delay has passed (anyone may)."""
    from ledger import governance

    swarm = open_swarm()
    sender = _proposer(swarm, account, key_ref)
    done, receipt = governance.execute_id(swarm, sender, _operation_id(operation_id))
    what = done.call.description if done.call else "the operation"  # execute_id read its call
    emit(as_json, done.as_dict() | {"state": "done", "tx": receipt.tx_hash}, lambda: console.print(
        f"Executed {what} (operation 0x{done.id.hex()}) in transaction {receipt.tx_hash}.",
        highlight=False,
    ))


@admin.command("cancel")
@click.argument("operation_id")
@account_option
@key_option
@json_option
def cancel_cmd(operation_id: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Cancel the scheduled operation OPERATION_ID before it is executed (a proposer only)."""
    from ledger import governance

    swarm = open_swarm()
    wanted = _operation_id(operation_id)
    receipt = governance.cancel(swarm, _proposer(swarm, account, key_ref), wanted)
    emit(as_json, {"id": "0x" + wanted.hex(), "state": "cancelled", "tx": receipt.tx_hash},
         lambda: console.print(f"Cancelled operation 0x{wanted.hex()}.", highlight=False))


@admin.command("status")
@click.argument("operation_id", required=False)
@json_option
def status_cmd(operation_id: str | None, as_json: bool) -> None:
    """Show the timelock's delay and its operations, or the one OPERATION_ID."""
    from ledger import governance

    swarm = open_swarm()
    delay = governance.min_delay(swarm)
    bound, exit_bound = governance.exit_bound(swarm)
    found = [governance.operation(swarm, _operation_id(operation_id))] if operation_id else \
        governance.operations(swarm)
    payload = {"timelock": swarm.deployment.addresses[governance.TIMELOCK], "delay_s": delay,
               "bound_to_vault": bound, "exit_bound_s": exit_bound,
               "operations": [o.as_dict() for o in found]}

    def human() -> None:
        console.print(f"Timelock {payload['timelock']}: every admin change waits {delay} s.", highlight=False)
        leave = f"A provider that asks for its stake back holds it within {exit_bound} s"
        console.print(f"{leave}; the timelock keeps its delay longer." if bound else
                      f"{leave}; this timelock is not bound to the vault (a devnet's), so nothing keeps "
                      "its delay longer.", highlight=False)
        if found:
            console.print(table("Operations", ["id", "state", "executable from", "call"],
                                [_row(o) for o in found]))
        else:
            console.print("No operation has been scheduled.")

    emit(as_json, payload, human)


def _row(op: Operation) -> list[str]:
    ready = when(op.ready_at) if op.state.name in ("WAITING", "READY") else "-"
    state = "cancelled" if op.state.name == "UNSET" and op.call else op.state.name.lower()
    return ["0x" + op.id.hex(), state, ready, op.call.description if op.call else "-"]


def _proposer(swarm: Swarm, account: int | None, key_ref: str | None) -> Sender:
    """--account N or --key; on a devnet with neither, the deployer (dev account 0)."""
    if account is None and key_ref is None and swarm.chain.is_devnet:
        return dev_sender(swarm, 0)
    return signer(swarm, account, key_ref)


def _operation_id(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidInput(f"Operation id {text!r} is not 0x followed by 64 hex digits; copy it from "
                           "`swarm chain admin status`.")
    return raw


def _salt(text: str | None) -> bytes | None:
    if text is None:
        return None
    try:
        raw = bytes.fromhex(text.strip().removeprefix("0x"))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidInput(f"--salt {text!r} is not 0x followed by 64 hex digits.")
    return raw
