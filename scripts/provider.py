"""`swarm provider …`: register, stake, unstake, withdraw, unjail, claim, status."""

from __future__ import annotations

import click


@click.group()
def provider() -> None:
    """Provider registration, stake and rewards."""
