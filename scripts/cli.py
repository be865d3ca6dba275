"""The `swarm` command line: `swarm <noun> <verb>`, human output by default, `--json` for scripts.

Exit codes: 0 ok, 1 a user error (one sentence on stderr, naming the input and the fix),
2 a usage error.
"""

from __future__ import annotations

import importlib
import sys

import click

from anvil import AnvilError
from compute.errors import ComputeError
from ledger.errors import SwarmError

# What a user can cause and fix, every package's errors among them: one sentence on stderr, exit 1.
USER_ERRORS = (SwarmError, AnvilError, ComputeError)

# Each noun's module, imported only when the noun is used (or listed by --help): a command
# loads what it needs and nothing more, so `swarm token balance` never pays for Ray or torch.
NOUNS = {
    "chain": "scripts.chain",
    "keys": "scripts.keys",
    "provider": "scripts.provider",
    "job": "scripts.job",
    "serve": "scripts.serve",
    "ledger": "scripts.ledger_cmd",
    "token": "scripts.token",
    "demo": "scripts.demo",
    "cluster": "scripts.cluster",
    "market": "scripts.market",
    "oracle": "scripts.oracle",
    "dashboard": "scripts.dashboard",
}


class LazyGroup(click.Group):
    """A group whose commands live in modules imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(NOUNS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in NOUNS:
            return None
        return getattr(importlib.import_module(NOUNS[name]), name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="swarm", prog_name="swarm")
def cli() -> None:
    """Swarm: a decentralized cloud for AI compute."""


def run(args: list[str]) -> int:
    """Runs `swarm ARGS` and returns its exit code: user errors become one sentence on stderr."""
    try:
        code = cli.main(args=args, prog_name="swarm", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except USER_ERRORS as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    return code if isinstance(code, int) else 0  # --help and --version return their exit code


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
