"""`swarm demo`: the whole story on the embedded defaults, in under three minutes (the story
itself is devnet/demo.py); this face shows its progress and prints its summary."""

from __future__ import annotations

import click
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ledger.errors import SwarmError
from ledger.units import format_amount
from scripts.chain import CLOCK_AHEAD_SHOWN_S, clock_ahead_line
from scripts.common import console, emit, json_option, local_node, settings, table

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the demo's story (`devnet.demo`) — loads inside them (tests/test_startup.py,
# bench/startup.py).


@click.command()
@json_option
def demo(as_json: bool) -> None:
    """Run the whole flow on a fresh local devnet and print who holds what."""
    from devnet.demo import Demo

    progress = Progress(SpinnerColumn(), TextColumn("{task.description:<34}"), BarColumn(),
                        TextColumn("{task.completed:g}/{task.total:g}"), TimeElapsedColumn(),
                        console=console, disable=as_json, transient=False)
    with progress:
        summary = Demo(settings(), local_node(), progress).run()
    emit(as_json, summary, lambda: _print(summary))


def _print(summary: dict) -> None:
    console.print(
        table(
            "Providers",
            ["name", "address", "nodes", "stake", "rewards claimed", "state", "balance"],
            [
                (
                    p["name"],
                    p["address"],
                    p["nodes"],
                    format_amount(int(p["stake_wei"])),
                    format_amount(int(p["claimed_wei"])),
                    "tombstoned" if p["tombstoned"] else "jailed" if p["jailed"] else "active",
                    format_amount(int(p["balance_wei"])),
                )
                for p in summary["providers"]
            ],
        )
    )
    console.print(
        table(
            "Jobs",
            ["kind", "id", "status", "provider", "runs", "accuracy", "units", "paid", "fee", "refund"],
            [
                (
                    j["kind"],
                    j["id"],
                    j["status"],
                    j["provider"],
                    j["attempts"],
                    "—" if j["accuracy"] is None else f"{j['accuracy']:.1%}",
                    j["units"],
                    format_amount(int(j["payment_wei"])),
                    format_amount(int(j["fee_wei"])),
                    format_amount(int(j["refund_wei"])),
                )
                for j in summary["jobs"]
            ],
        )
    )
    console.print(table("Oracle epochs", ["epoch", "emission", "paid", "slashes", "why nothing was paid"], [
        (e["epoch"], format_amount(int(e["emission_wei"])), format_amount(int(e["paid_wei"])),
         ", ".join(f"{s['provider'][:10]}… {s['row']} {s['bps'] / 100:g}%" for s in e["slashes"]) or "—",
         e.get("why_unpaid") or "—")
        for e in summary["epochs"]]))
    console.print(table("Balances", ["holder", "SWARM"], [(k, format_amount(int(v)))
                                                          for k, v in summary["balances"].items()]))
    checks = summary["checks"]
    console.print("Checks: " + ", ".join(f"{name.replace('_', ' ')} {'✓' if ok else '✗'}"
                                         for name, ok in checks.items()))
    console.print(f"Results in {summary['results']}; the dashboard: {summary['dashboard']}; "
                  f"anvil keeps running at {summary['rpc_url']} (`swarm chain down` stops it). "
                  f"Done in {summary['seconds']} s.")
    if summary["clock_ahead_s"] > CLOCK_AHEAD_SHOWN_S:
        console.print(clock_ahead_line("The devnet's clock now", summary["clock_ahead_s"]), highlight=False)
    if not all(checks.values()):
        raise SwarmError("The demo's checks did not all pass; see the tables above.")
