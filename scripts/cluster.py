"""`swarm cluster up|down|status`: a local Ray cluster of simulated provider nodes for the demo
and tests — a head plus one raylet per provider, the providers being anvil's dev accounts."""

from __future__ import annotations

import click

from anvil import dev_account
from compute import cluster as local
from compute.node import RayHome, RayNode
from scripts.common import console, emit, json_option, settings, table


def _home() -> RayHome:
    return RayHome.of(settings().home)


@click.group()
def cluster() -> None:
    """Run a local Ray cluster of simulated provider nodes (demo and tests)."""


@cluster.command()
@click.option("--providers", "count", type=click.IntRange(1, local.MAX_PROVIDERS), default=3,
              show_default=True, help="Simulated providers: dev accounts 1..N, one 1-CPU node each.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="The head's GCS port (default: a free one).")
@click.option("--dashboard/--no-dashboard", default=True, show_default=True,
              help="Start Ray's dashboard on 127.0.0.1.")
@json_option
def up(count: int, port: int | None, dashboard: bool, as_json: bool) -> None:
    """Start a head (no CPUs) and N provider nodes; returns once all are up."""
    spec = local.ClusterSpec(tuple(dev_account(i).address for i in range(1, count + 1)), port, dashboard)
    home = _home()
    state = local.start(home, spec)
    payload = state.as_dict() | {"token_file": str(home.token)}

    def human() -> None:
        console.print(table(f"Local Ray cluster at {state.address}", ["provider", "node"],
                            [(n.provider, n.node_id) for n in state.nodes]))
        if state.dashboard:
            console.print(f"Dashboard: {state.dashboard}")
        console.print(f"Auth token in {home.token}; stop the cluster with `swarm cluster down`.")

    emit(as_json, payload, human)


@cluster.command()
@json_option
def down(as_json: bool) -> None:
    """Stop the local cluster: its head and its simulated provider nodes."""
    state = local.stop(_home())
    emit(as_json, {"stopped": state is not None, "address": state and state.address}, lambda: console.print(
        f"Stopped the local Ray cluster at {state.address}." if state else "No local Ray cluster is running."
    ))


@cluster.command()
@json_option
def status(as_json: bool) -> None:
    """The head's address and every node: provider, node id, alive or dead, CPUs."""
    home = _home()
    state = local.running(home)
    if state is None:
        emit(as_json, {"running": False, "nodes": []}, lambda: console.print(
            "No local Ray cluster is running; start one with `swarm cluster up`."))
        return
    nodes = local.nodes(home, state)
    simulated = {n.node_id for n in state.nodes}
    payload = {
        "running": True,
        "address": state.address,
        "dashboard": state.dashboard,
        "pid": state.pid,
        "nodes": [n.as_dict() | {"kind": _kind(n, simulated)} for n in nodes],
    }

    def human() -> None:
        rows = [
            (n.provider or "(head)", n.node_id[:16], _kind(n, simulated),
             "[green]alive[/]" if n.alive else "[red]dead[/]", f"{n.cpus:g}", f"{n.gpus:g}")
            for n in nodes
        ]
        columns = ["provider", "node", "kind", "state", "CPUs", "GPUs"]
        console.print(table(f"Local Ray cluster at {state.address}", columns, rows))
        if state.dashboard:
            console.print(f"Dashboard: {state.dashboard}")

    emit(as_json, payload, human)


def _kind(node: RayNode, simulated: set[str]) -> str:
    return "head" if node.head else ("simulated" if node.node_id in simulated else "joined")
