"""A local Ray cluster for the demo and tests (docs/architecture.md §4): a head with no CPUs and one
raylet per simulated provider, each labelled provider=<address>.

`start` launches a small supervisor (`python -m compute.cluster`) in its own session and waits
for its word while it lives and starts (core.starting). The supervisor owns a
`ray.cluster_utils.Cluster`, writes $SWARM_HOME/ray/cluster.json once every node is up, and on
SIGTERM (`stop`) shuts the cluster down and removes the file.
Every process runs with Ray's token authentication; the dashboard, if any, binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compute.errors import ComputeError
from compute.node import (
    MESH_GCS_PORT,
    MESH_NODES,
    SITE_RAY_CONFIG,
    RayHome,
    RayNode,
    auth_env,
    binding,
    check_reachable,
    cluster_nodes,
    ensure_token,
    free_port,
    stop_session,
    use_auth,
)
from compute.placement import node_labels, node_resources
from core import logs
from core.starting import START_CEILING_S, NotStarted, Starting, StartTimedOut, first_line

MAX_PROVIDERS = 9
STOP_TIMEOUT_S = 90.0
START_ATTEMPTS = 2  # a cluster whose Ray missed its own start deadlines is started once more
DASHBOARD_HOST = "127.0.0.1"
# Two processes of a Ray head that a site has no use for, each a Python process of its own (about a
# CPU-second to start, and polling after): the autoscaler's monitor (a site's nodes come and go by
# the provider's hand) and the log monitor, which streams workers' output to drivers that ask for it
# (none of Swarm's does; a lease's output is its job's log, written by Ray's job supervisor).
HEAD_WITHOUT = {"no_monitor": True, "include_log_monitor": False}
# What a site asks of its dashboard: the Jobs API (JobHead) its leases are submitted through, the
# node table JobHead picks a node's agent from (NodeHead), and the State API (StateHead) Ray Train's
# placement-group cleaner asks whether a run's controller lives. Ray's other seven modules (metrics,
# events, the reporter's live node stats, serve, data, train, task events) are a process each,
# polling the GCS while the site idles: a one-node site's Ray took 1.4 CPU-s a minute more with them.
SITE_DASHBOARD_MODULES = ("JobHead", "NodeHead", "StateHead")


@dataclass(frozen=True)
class ClusterSpec:
    """What `swarm cluster up` asks for."""

    providers: tuple[str, ...]
    port: int | None = None  # the head's GCS port; None lets Ray pick a free one
    dashboard: bool = True
    head_cpus: int = 0
    node_cpus: int = 1
    object_store_bytes: int = 80 * 1024 * 1024
    nodes_per_provider: int = 1
    node_gpus: int = 0  # GPUs each node offers (a site's nodes on a GPU machine)
    # the machine's address on its site's mesh, which every node binds with pinned ports
    # (`compute.node.binding`); None: Ray's own choice, this machine's loopback
    node_ip: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.nodes_per_provider <= MAX_PROVIDERS:
            raise ComputeError(f"A local cluster has 1 to {MAX_PROVIDERS} nodes per provider, "
                               f"got {self.nodes_per_provider}.")
        if not 1 <= len(self.providers) <= MAX_PROVIDERS:
            raise ComputeError(
                f"A local cluster has 1 to {MAX_PROVIDERS} providers, got {len(self.providers)}."
            )
        if len(set(self.providers)) != len(self.providers):
            raise ComputeError("Each simulated provider needs its own address; the list has duplicates.")


@dataclass(frozen=True)
class ProviderNode:
    provider: str
    node_id: str


@dataclass(frozen=True)
class ClusterState:
    """What cluster.json records: enough to find, inspect and stop the cluster."""

    address: str  # the head's GCS, HOST:PORT
    pid: int  # the supervisor's
    head_node_id: str
    nodes: tuple[ProviderNode, ...]
    dashboard: str | None = None  # http://127.0.0.1:PORT
    started_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict:
        return asdict(self) | {"nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, raw: dict) -> ClusterState:
        return cls(**(raw | {"nodes": tuple(ProviderNode(**n) for n in raw["nodes"])}))


# ── the CLI side ─────────────────────────────────────────────────────────────

def start(home: RayHome, spec: ClusterSpec, ceiling_s: float = START_CEILING_S) -> ClusterState:
    """Starts the supervisor detached and returns once every node is up: waited for while it lives
    and starts (core.starting), a supervisor that exits failing the start at once."""
    if running(home) is not None:
        raise ComputeError(
            f"A local Ray cluster is already up (state in {home.cluster_state}); "
            "stop it with `swarm cluster down`."
        )
    ensure_token(home)
    home.logs.mkdir(parents=True, exist_ok=True)
    log = home.logs / "cluster.log"
    command = [
        sys.executable, "-m", "compute.cluster", "--home", str(home.root), "--spec", json.dumps(asdict(spec)),
    ]
    for attempt in range(1, START_ATTEMPTS + 1):
        with open(log, "wb" if attempt == 1 else "ab") as err:
            supervisor = subprocess.Popen(
                command, env=auth_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True, cwd=_project_root(),
            )
        try:
            line = first_line(Starting("the local Ray cluster", supervisor, log), ceiling_s)
        except NotStarted as exc:
            stop_session(supervisor.pid, STOP_TIMEOUT_S)  # and what it started in its session
            # One that exited is started once more, as below; one alive and stuck after minutes is not.
            if isinstance(exc, StartTimedOut) or attempt == START_ATTEMPTS:
                raise
            continue
        finally:
            if supervisor.stdout is not None:
                supervisor.stdout.close()
        if line == "ready":
            break
        stop_session(supervisor.pid, STOP_TIMEOUT_S)
        # Ray's own processes have start deadlines a loaded machine can miss: once more, then give up.
        if attempt == START_ATTEMPTS:
            reason = line.removeprefix("error: ") if line.startswith("error: ") else f"see {log}"
            raise ComputeError(f"The local Ray cluster did not start: {reason}")
    state = running(home)
    if state is None:
        raise ComputeError(f"The local Ray cluster stopped right after starting; see {log}.")
    return state


def running(home: RayHome) -> ClusterState | None:
    """The cluster this home started, if its supervisor lives (a stale state file is removed)."""
    if not home.cluster_state.is_file():
        return None
    state = ClusterState.from_dict(json.loads(home.cluster_state.read_text()))
    if not _is_supervisor(state.pid, home):
        home.cluster_state.unlink(missing_ok=True)
        return None
    return state


def connect(home: RayHome, address: str | None = None) -> str:
    """Joins this process to a Ray cluster as a driver; returns the head's address.

    The address is `address`, else RAY_ADDRESS, else this home's local cluster. The token
    is RAY_AUTH_TOKEN when set, else the one in $SWARM_HOME/ray.
    """
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        state = running(home)
        if state is None:
            raise ComputeError(
                "No Ray cluster to run jobs on: start one with `swarm cluster up`, or give its "
                "head's address with --ray-address or RAY_ADDRESS."
            )
        address = state.address
    check_reachable(address)
    if os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_MODE"] = "token"
    else:
        use_auth(home)
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        logs.adopt("ray")  # Ray's own lines as Swarm's are: its warnings, and its INFO at -vv
    return address


def stop(home: RayHome, timeout: float = STOP_TIMEOUT_S) -> ClusterState | None:
    """Signals the supervisor, which shuts the cluster down; None if none was running."""
    state = running(home)
    if state is None:
        return None
    stop_session(state.pid, timeout)  # the supervisor shuts the cluster down on SIGTERM
    home.cluster_state.unlink(missing_ok=True)
    return state


def nodes(home: RayHome, state: ClusterState) -> list[RayNode]:
    """Every node of the running cluster, from its GCS: the simulated providers and any that joined."""
    return cluster_nodes(home, state.address)


def _is_supervisor(pid: int, home: RayHome) -> bool:
    import psutil

    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "compute.cluster" in cmdline and str(home.root) in cmdline


def _project_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


# ── the supervisor process ───────────────────────────────────────────────────

def supervise(home: RayHome, spec: ClusterSpec) -> None:
    """Runs the cluster until SIGTERM or SIGINT. Needs the auth environment set before Ray loads."""
    from ray.cluster_utils import Cluster

    from compute.ray_private import dashboard_modules, stop_cluster, system_config_args  # Ray: after use_auth

    head_args = {
        "num_cpus": spec.head_cpus,
        "object_store_memory": spec.object_store_bytes,
        "include_dashboard": spec.dashboard,
        "dashboard_agent_listen_port": free_port(),
        **system_config_args(SITE_RAY_CONFIG),
        **HEAD_WITHOUT,
    }
    if spec.dashboard:
        head_args |= {"dashboard_host": DASHBOARD_HOST, "dashboard_port": free_port()}
    if spec.port is not None:
        head_args["gcs_server_port"] = spec.port
    bindings = iter(binding(spec.node_ip, index) for index in range(MESH_NODES)) if spec.node_ip else None
    if bindings is not None:
        head_args |= next(bindings).node_args() | {"gcs_server_port": spec.port or MESH_GCS_PORT}
    with dashboard_modules(SITE_DASHBOARD_MODULES):
        cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        provider_nodes = tuple(
            ProviderNode(provider, cluster.add_node(
                num_cpus=spec.node_cpus, num_gpus=spec.node_gpus, labels=node_labels(provider),
                resources=node_resources(provider),
                object_store_memory=spec.object_store_bytes,
                **(next(bindings).node_args() if bindings is not None else {}),
            ).node_id)
            for provider in spec.providers for _ in range(spec.nodes_per_provider)
        )
        cluster.wait_for_nodes()
        stopping, _signalled = _stop_signal()  # keep both ends open while waiting
        state = ClusterState(
            address=cluster.address,
            pid=os.getpid(),
            head_node_id=cluster.head_node.node_id,
            nodes=provider_nodes,
            dashboard=f"http://{cluster.webui_url}" if spec.dashboard and cluster.webui_url else None,
        )
        _write_state(home, state)
        _announce("ready")
        stopping.recv(1)
    finally:
        home.cluster_state.unlink(missing_ok=True)
        stop_cluster(cluster)


def _stop_signal() -> tuple[socket.socket, socket.socket]:
    """A socket that becomes readable on SIGTERM or SIGINT, whichever thread the signal lands on.

    Replaces Ray's SIGTERM handler, which would exit at once without shutting down the cluster.
    """
    wake, signalled = socket.socketpair()
    signalled.setblocking(False)
    signal.set_wakeup_fd(signalled.fileno())
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    return wake, signalled


def _write_state(home: RayHome, state: ClusterState) -> None:
    tmp = home.cluster_state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.as_dict(), indent=2))
    tmp.replace(home.cluster_state)


def _announce(line: str) -> None:
    """Tells `start` how it went, then lets go of stdout (the CLI that reads it exits)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Supervises a local Ray cluster for `swarm cluster up`.")
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--spec", required=True, help="ClusterSpec as JSON")
    args = parser.parse_args(argv)
    raw = json.loads(args.spec)
    spec = ClusterSpec(**(raw | {"providers": tuple(raw["providers"])}))
    try:
        supervise(RayHome(args.home), spec)
    except Exception as exc:  # noqa: BLE001 -- the CLI shows the reason; the log keeps the traceback
        import traceback

        traceback.print_exc()
        _announce(f"error: {type(exc).__name__}: {exc}".replace("\n", " "))
        sys.exit(1)


if __name__ == "__main__":
    main()
