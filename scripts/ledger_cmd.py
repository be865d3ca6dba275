"""`swarm ledger sync|show`: index the chain's events into the ledger database."""

from __future__ import annotations

import click


@click.group()
def ledger() -> None:
    """Index chain events into the ledger database and show them."""
