"""The `swarm` command line: `swarm <noun> <verb>`, human output by default, `--json` for scripts.

Exit codes: 0 ok, 1 a user error (one sentence on stderr, naming the input and the fix), 2 a
usage error. This is the one error boundary: every error of Swarm's family (`core.errors`) and
every `OSError` (a path that cannot be read or written) becomes that sentence; anything else is
a bug and keeps its traceback. Logging is configured here once (`core.logs`): quiet, or what
Swarm does with `--verbose`.
"""

from __future__ import annotations

import importlib
import sys

import click

from core import logs
from core.errors import SwarmError

# What a user can cause and fix, every package's errors among them: one sentence on stderr, exit 1.
USER_ERRORS = (SwarmError,)

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
@click.option("-v", "--verbose", count=True, help="Say what Swarm does as it does it (-vv: in detail).")
def cli(verbose: int) -> None:
    """Swarm: a decentralized cloud for AI compute."""
    logs.configure(verbose or None)  # none given: what a parent command asked for, else quiet


def os_error_sentence(exc: OSError) -> str:
    """An operating system's refusal as one sentence that names the path and the fix."""
    what = (exc.strerror or type(exc).__name__).lower()
    paths = " and ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    if isinstance(exc, PermissionError):
        fix = "give your user access to it, or choose another path"
    elif isinstance(exc, NotADirectoryError | FileNotFoundError | IsADirectoryError):
        fix = "check the path"
    else:
        fix = "check the path and the machine's disk"
    return f"{paths}: {what}; {fix} (SWARM_HOME sets where Swarm keeps its state)." if paths else \
        f"{what}; {fix}."


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
    except OSError as exc:
        click.echo(f"error: {os_error_sentence(exc)}", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    return code if isinstance(code, int) else 0  # --help and --version return their exit code


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
