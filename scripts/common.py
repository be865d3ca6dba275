"""What every command shares: settings, `--json`, `--account`, output."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from anvil import AnvilConfig, AnvilNode, dev_account, dev_address
from anvil.accounts import DEV_ACCOUNT_COUNT
from ledger.client import Swarm
from ledger.config import Settings
from ledger.errors import ChainUnavailable, SwarmError
from ledger.keys import Keystore
from ledger.units import duration, when  # noqa: F401 - the commands' formatting of chain times

if TYPE_CHECKING:
    from ledger.tx import Sender

T = TypeVar("T")
# Wide enough for full addresses when output goes to a file or a CI log.
console = Console(width=None if sys.stdout.isatty() else 160)

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
account_option = click.option(
    "--account",
    "account",
    type=click.IntRange(min=0),
    default=None,
    help="Use anvil's dev account N (devnets only).",
)


key_option = click.option(
    "--key",
    "key_ref",
    default=None,
    help="Sign with this keystore (its address or name; see `swarm keys list`).",
)


def signed_options(fn: Callable) -> Callable:
    """Adds --account, --key and --json to a command that signs."""
    return account_option(key_option(json_option(fn)))


def read_password(prompt: str, confirm: bool = False) -> str:
    """SWARM_KEY_PASSWORD if set, else a hidden prompt (refused when there is no terminal)."""
    env = os.environ.get("SWARM_KEY_PASSWORD")
    if env is not None:
        return env
    if not sys.stdin.isatty():
        raise SwarmError("No terminal to ask for the keystore password; set SWARM_KEY_PASSWORD.")
    return click.prompt(prompt, hide_input=True, confirmation_prompt=confirm)


def signer(swarm: Swarm, account: int | None, key_ref: str | None) -> Sender:
    """Who signs: `--account N` (devnets only) or a keystore (`--key`, or the only one there is)."""
    if account is not None and key_ref is not None:
        raise SwarmError("Give either --account or --key, not both.")
    if account is not None:
        return dev_sender(swarm, account)
    store = Keystore(settings().home / "keys")
    info = store.find(key_ref)
    return swarm.sender(store.unlock(info, read_password(f"Password for {info.address}")))


def settings() -> Settings:
    return Settings.from_env()


def local_node(port: int | None = None) -> AnvilNode:
    s = settings()
    return AnvilNode(AnvilConfig(home=s.home, port=port or s.anvil_port))


def open_swarm() -> Swarm:
    return Swarm.open(settings())


def open_swarm_waiting(log: Callable[[str], None], poll_s: float = 2.0) -> Swarm:
    """For services: the deployment once the chain answers; a node that is down (restarting,
    say) is waited for rather than fatal. A missing deployment is still an error at once."""
    return waiting_for_chain(open_swarm, log, poll_s)


def waiting_for_chain(action: Callable[[], T], log: Callable[[str], None], poll_s: float = 2.0) -> T:
    """For services starting up: `action`'s result (reads from the chain) once the chain answers;
    a node that stops answering meanwhile (restarting, say) is waited for rather than fatal."""
    import requests

    down = (ChainUnavailable, requests.exceptions.ConnectionError, requests.exceptions.Timeout)
    said = False
    while True:
        try:
            return action()
        except down as exc:
            if not said:
                log(f"waiting for the chain: {exc}")
                said = True
            time.sleep(poll_s)


def dev_sender(swarm: Swarm, account: int | None, default: int | None = None) -> Sender:
    """The sender for `--account N`, refused on any chain that is not a devnet."""
    return swarm.sender(dev_account(dev_index(swarm, account, default)).key)


def dev_account_address(swarm: Swarm, account: int | None, default: int | None = None) -> str:
    """The address of `--account N` (devnets only), for commands that read and sign nothing."""
    return dev_address(dev_index(swarm, account, default))


def dev_index(swarm: Swarm, account: int | None, default: int | None = None) -> int:
    """The dev account `--account N` picks, refused on any chain that is not a devnet."""
    index = default if account is None else account
    if index is None:
        raise SwarmError("Choose who signs with --account N (anvil's dev account N on a devnet).")
    if not swarm.chain.is_devnet:
        raise SwarmError(
            f"--account selects anvil's public dev keys and is refused on chain {swarm.chain.chain_id}, "
            "which is not a devnet; sign with a keystore instead (--key, see `swarm keys`)."
        )
    if index >= DEV_ACCOUNT_COUNT:
        raise SwarmError(
            f"--account {index} is not one of anvil's {DEV_ACCOUNT_COUNT} funded dev accounts; "
            f"choose 0 to {DEV_ACCOUNT_COUNT - 1}."
        )
    return index


def emit(as_json: bool, payload: Any, human: Callable[[], None]) -> None:
    """Prints `payload` as JSON for scripts, or calls `human` for people."""
    if as_json:
        click.echo(json.dumps(payload, indent=2, default=_json_default))
    else:
        human()


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A table whose address and hash columns never wrap: the other columns give way."""
    cells = [[str(cell) for cell in row] for row in rows]
    t = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        hexes = bool(cells) and all(row[i].startswith("0x") for row in cells)
        t.add_column(column, no_wrap=hexes)
    for row in cells:
        t.add_row(*row)
    return t


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return str(value)
