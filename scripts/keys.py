"""`swarm keys new|import|list`: encrypted keystores under $SWARM_HOME/keys.

A private key is read only from a hidden prompt or from standard input, never from an
argument (which would land in the shell's history), and is never printed.
"""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from ledger.keys import KeyInfo, Keystore, address_of, check_password, parse_private_key
from scripts.common import console, emit, json_option, read_password, settings, table

name_option = click.option(
    "--name", default=None, help="A unique name to pick the key by (letters, digits, _ or -)."
)


@click.group()
def keys() -> None:
    """Create, import and list encrypted keystores."""


@keys.command()
@name_option
@json_option
def new(name: str | None, as_json: bool) -> None:
    """Create a new random key, encrypted with a password (prompt or SWARM_KEY_PASSWORD)."""
    store = keystore()
    store.check_available(None, name)  # a bad or taken name fails before the password is asked
    info = store.create(_new_password(), name)
    _show(as_json, info, "Created")


@keys.command("import")
@name_option
@json_option
def import_cmd(name: str | None, as_json: bool) -> None:
    """Import a private key from a hidden prompt, or from standard input when piped."""
    store = keystore()
    store.check_available(None, name)
    key = parse_private_key(_read_private_key())
    store.check_available(address_of(key), None)  # a duplicate fails before the password is asked
    info = store.import_key(key, _new_password(), name)
    _show(as_json, info, "Imported")


@keys.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the keystores: address, name and file."""
    store = keystore()
    found = store.list()

    def human() -> None:
        if not found:
            console.print(f"No keystores in {store.directory}; create one with `swarm keys new`.")
            return
        console.print(table(
            f"Keystores in {store.directory}", ["address", "name", "file"],
            [(info.address, info.name or "-", info.path) for info in found],
        ))

    emit(as_json, [info.as_dict() for info in found], human)


def keystore() -> Keystore:
    return Keystore(settings().home / "keys")


def _new_password() -> str:
    return check_password(read_password("Password for the new keystore", confirm=True))


def _read_private_key() -> str:
    if sys.stdin.isatty():
        return click.prompt("Private key (hidden)", hide_input=True)
    return sys.stdin.read()


def _show(as_json: bool, info: KeyInfo, verb: str) -> None:
    named = f" ({info.name})" if info.name else ""
    emit(as_json, info.as_dict(), lambda: console.print(
        f"{verb} keystore for [bold]{info.address}[/]{named} in {escape(str(info.path))}"
    ))
