"""`swarm serve …`: a buyer's models served by providers' sites, paid per request with signed
receipts (docs/architecture.md §12). Deposit for a provider once, deploy a model, call it; the
client signs each call's receipt and the vouchers the site claims. The operations are
`ledger.serving`'s, `market.serving`'s and `wire.serving`'s; these commands parse
their arguments and print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ledger.errors import InvalidInput
from ledger.units import format_amount, parse_address, parse_amount
from scripts.common import (
    console,
    emit,
    open_swarm,
    settings,
    signed_options,
    signer,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the serving escrow (`ledger.serving`), the buyer's serving client (web3) and
# its spec (pydantic) — loads inside them (tests/test_startup.py, bench/startup.py).


@click.group()
def serve() -> None:
    """Serve models on providers' sites, paid per request without a transaction per request."""


_signed = signed_options


provider_option = click.option("--provider", "provider", required=True, metavar="ADDRESS",
                               help="The provider whose site serves the model.")


def _client(provider: str, account: int | None, key_ref: str | None):
    from market.serving import site_of
    from wire.serving import ServingClient

    provider = parse_address(provider, "--provider")
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    return ServingClient(swarm, sender, settings().home, site_of(swarm, settings().home, provider))


@serve.command()
@click.argument("provider", metavar="PROVIDER")
@click.argument("amount", metavar="SWARM")
@_signed
def deposit(provider: str, amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Deposit SWARM for PROVIDER in the serving escrow: what your receipts to its site spend."""
    from ledger import serving

    provider, wei = parse_address(provider, "provider"), parse_amount(amount, "deposit")
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    receipt = serving.deposit(swarm, sender, provider, wei)
    state = serving.account(swarm, sender.address, provider)
    emit(as_json, _account_json(state) | {"tx": receipt.tx_hash}, lambda: console.print(
        f"Deposited {format_amount(wei)} for {provider}; the deposit holds {format_amount(state.balance)}."))


@serve.command()
@click.argument("provider", metavar="PROVIDER")
@click.argument("amount", metavar="SWARM")
@_signed
def thaw(provider: str, amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Start taking AMOUNT of your deposit for PROVIDER back (0 cancels); withdraw after the thaw."""
    from ledger import serving

    provider = parse_address(provider, "provider")
    wei = 0 if amount.strip() == "0" else parse_amount(amount, "thaw")
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    serving.thaw(swarm, sender, provider, wei)
    state = serving.account(swarm, sender.address, provider)
    emit(as_json, _account_json(state), lambda: console.print(
        f"Thawing {format_amount(state.thawing)} of the deposit for {provider}; withdraw it from "
        f"{state.thaw_ends_at} (unix seconds) with `swarm serve withdraw {provider}`."))


@serve.command()
@click.argument("provider", metavar="PROVIDER")
@_signed
def withdraw(provider: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Take back what you thawed of your deposit for PROVIDER, once its thaw has ended."""
    from ledger import serving

    provider = parse_address(provider, "provider")
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    before = swarm.balance_of(sender.address)
    serving.withdraw(swarm, sender, provider)
    got = swarm.balance_of(sender.address) - before
    emit(as_json, {"withdrawn": str(got)}, lambda: console.print(f"Withdrew {format_amount(got)}."))


@serve.command("account")
@click.argument("provider", metavar="PROVIDER")
@click.option("--buyer", default=None, metavar="ADDRESS", help="Whose deposit (default: yours).")
@_signed
def account_cmd(provider: str, buyer: str | None, account: int | None, key_ref: str | None,
                as_json: bool) -> None:
    """What your deposit for PROVIDER holds, what it has paid, and what is thawing."""
    from ledger import serving

    provider = parse_address(provider, "provider")
    swarm = open_swarm()
    who = parse_address(buyer, "--buyer") if buyer else signer(swarm, account, key_ref).address
    state = serving.account(swarm, who, provider)
    emit(as_json, _account_json(state), lambda: console.print(
        f"Deposit of {who} for {provider}: holds {format_amount(state.balance)}, paid "
        f"{format_amount(state.redeemed)}, thawing {format_amount(state.thawing)}."))


@serve.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@provider_option
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the model serves.")
@_signed
def deploy(spec: Path, provider: str, wait: bool, account: int | None, key_ref: str | None,
           as_json: bool) -> None:
    """Deploy the model SPEC names (YAML or JSON) on PROVIDER's site."""
    from market.serving import order_from_spec

    order = order_from_spec(_read(spec))  # refused before the chain is asked anything
    client = _client(provider, account, key_ref)
    info = client.deploy(order)
    if wait:
        info = client.wait_serving(info["lease"])
    emit(as_json, info, lambda: console.print(
        f"Serving lease {info['lease']} on {client.provider}'s site is {info['state']}: POST "
        f"{client.site.url}{info['route']} until {info['ends_at']} (unix seconds). Call it with "
        f"`swarm serve call {info['lease']} --provider {client.provider} --input '...'`."))


@serve.command()
@click.argument("lease")
@provider_option
@click.option("--input", "body", required=True, metavar="JSON",
              help='The call\'s body: {"input": [...]} for predict, {"prompt": "...", "max_tokens": N} for '
                   "generate (a bare list or text is wrapped).")
@click.option("--count", type=click.IntRange(1, 1_000_000), default=1, show_default=True,
              help="Call this many times (the last answer is shown).")
@_signed
def call(lease: str, provider: str, body: str, count: int, account: int | None, key_ref: str | None,
         as_json: bool) -> None:
    """Call serving lease LEASE, paying each call with a signed receipt."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = body
    client = _client(provider, account, key_ref)
    task = client.info(lease)["task"]
    if not isinstance(parsed, dict):
        parsed = {"input": parsed} if task == "predict" else {"prompt": str(parsed), "max_tokens": 16}
    answer = client.call(lease, parsed)
    charged, calls = answer.charged, 1
    while answer.status == 200 and calls < count:
        answer = client.call(lease, parsed)
        charged, calls = charged + answer.charged, calls + 1
    if answer.status != 200:
        message = answer.body.get("error") if isinstance(answer.body, dict) else str(answer.body)
        raise InvalidInput(f"Serving lease {lease} refused the call (HTTP {answer.status}): {message}")
    emit(as_json, {"answer": answer.body, "calls": calls, "charged": str(charged)}, lambda: console.print(
        f"{json.dumps(answer.body)}\n{count} call(s), charged {format_amount(charged)} in receipts."))


@serve.command()
@click.argument("lease")
@provider_option
@_signed
def status(lease: str, provider: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """What serving lease LEASE serves, at what price, until when, and what you owe its site."""
    client = _client(provider, account, key_ref)
    info = client.info(lease)
    emit(as_json, info, lambda: console.print(
        f"{lease}: {info['state']}, {info['task']} with {info['model']}, "
        f"{format_amount(int(info['price_per_request']) or int(info['price_per_token']))} per "
        f"{'request' if int(info['price_per_request']) else 'token'}, until {info['ends_at']}."))


@serve.command()
@click.argument("lease")
@provider_option
@_signed
def stop(lease: str, provider: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Stop serving lease LEASE (yours): later calls are refused and cost nothing."""
    client = _client(provider, account, key_ref)
    info = client.stop(lease)
    emit(as_json, info, lambda: console.print(f"Serving lease {lease} is {info['state']}."))


@serve.command()
@provider_option
@_signed
def aggregate(provider: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Sign a voucher for what PROVIDER's site claims, once every receipt in it is checked."""
    client = _client(provider, account, key_ref)
    voucher = client.aggregate()
    payload = voucher.as_dict() if voucher else {"cumulative": None}
    emit(as_json, payload, lambda: console.print(
        f"Signed a voucher for {format_amount(voucher.cumulative)} in all." if voucher
        else "The site claims nothing new."))


def _read(path: Path) -> Any:
    import yaml

    try:
        return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidInput(f"{path} is not {'JSON' if path.suffix == '.json' else 'YAML'} ({exc}).") from None


def _account_json(state: Any) -> dict[str, Any]:
    return {"buyer": state.buyer, "provider": state.provider, "balance": str(state.balance),
            "redeemed": str(state.redeemed), "thawing": str(state.thawing),
            "thaw_ends_at": state.thaw_ends_at}
