"""`swarm token balance|transfer`: SWARM balances and transfers."""

from __future__ import annotations

import click

from ledger.errors import InvalidInput
from ledger.units import format_amount, parse_address, parse_amount
from scripts.common import (
    account_option,
    console,
    dev_account_address,
    emit,
    json_option,
    key_option,
    open_swarm,
    signer,
)


@click.group()
def token() -> None:
    """SWARM token balances and transfers."""


@token.command()
@click.argument("address", required=False)
@account_option
@json_option
def balance(address: str | None, account: int | None, as_json: bool) -> None:
    """Show the SWARM balance of ADDRESS (or of --account N)."""
    swarm = open_swarm()
    who = parse_address(address) if address else dev_account_address(swarm, account)
    wei = swarm.balance_of(who)
    emit(
        as_json,
        {"address": who, "balance_wei": str(wei)},
        lambda: console.print(f"{who}: {format_amount(wei)}"),
    )


@token.command()
@click.argument("to")
@click.argument("amount")
@account_option
@key_option
@json_option
def transfer(to: str, amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Send AMOUNT SWARM (e.g. 1000 or 0.5) to TO, signed by --account N or a keystore (--key)."""
    recipient = parse_address(to, "recipient")
    wei = parse_amount(amount)
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)  # unlocks first: a wrong password fails before anything else
    held = swarm.balance_of(sender.address)
    if held < wei:
        raise InvalidInput(
            f"{sender.address} holds {format_amount(held)}, less than the {format_amount(wei)} to send; "
            "lower the amount or fund the account."
        )
    receipt = sender.send(swarm.token.functions.transfer(recipient, wei))
    payload = {"from": sender.address, "to": recipient, "amount_wei": str(wei), "tx": receipt.tx_hash}
    emit(
        as_json,
        payload,
        lambda: console.print(f"Sent {format_amount(wei)} to {recipient} ({receipt.tx_hash})"),
    )
