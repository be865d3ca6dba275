"""The `swarm` command line: `swarm <noun> <verb>`, human output by default, `--json` for scripts.

Exit codes: 0 ok, 1 a user error (one sentence on stderr, naming the input and the fix),
2 a usage error.
"""

from __future__ import annotations

import sys

import click

from anvil import AnvilError
from compute.errors import ComputeError
from ledger.errors import SwarmError
from scripts.chain import chain
from scripts.cluster import cluster
from scripts.dashboard import dashboard
from scripts.demo import demo
from scripts.job import job
from scripts.keys import keys
from scripts.ledger_cmd import ledger
from scripts.market import market
from scripts.oracle import oracle
from scripts.provider import provider
from scripts.token import token


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="swarm", prog_name="swarm")
def cli() -> None:
    """Swarm: a decentralized cloud for AI compute."""


cli.add_command(chain)
cli.add_command(keys)
cli.add_command(provider)
cli.add_command(job)
cli.add_command(ledger)
cli.add_command(token)
cli.add_command(demo)
cli.add_command(cluster)
cli.add_command(market)
cli.add_command(oracle)
cli.add_command(dashboard)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (SwarmError, AnvilError, ComputeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    sys.exit(0)


if __name__ == "__main__":
    main()
