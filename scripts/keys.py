"""`swarm keys new|import|list`: encrypted keystores under $SWARM_HOME/keys."""

from __future__ import annotations

import click


@click.group()
def keys() -> None:
    """Create, import and list encrypted keystores."""
