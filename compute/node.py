"""Provider nodes on Ray (docs/architecture.md §4): a provider's machine joins a Ray cluster as a node
labelled provider=<address> that carries the provider:<address> resource.

Also what every Ray process the CLI starts shares: token authentication
(RAY_AUTH_MODE=token) with the token in $SWARM_HOME/ray/auth_token (mode 0600), and a
short-lived read of the cluster's nodes from its GCS.

Ray reads its authentication settings when it is first loaded, so nothing here imports
Ray at module level: `use_auth` runs first, then Ray is imported where it is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from compute.errors import ComputeError
from compute.placement import LABEL, node_labels, node_resources
from core.starting import START_CEILING_S, Starting, wait_until

# A node that registers with its head is waited for while its process lives and starts, up to
# core.starting's ceiling; one that drains and stops has this budget.
LEAVE_TIMEOUT_S = 60.0
_GCS_TIMEOUT_S = 10.0
# A head whose nodes all run on this machine: a node that stops answering is declared dead
# after three health checks a second apart (about 3 s), not Ray's default five, 3 s apart
# (about 15 s), so a provider whose node dies loses its job in seconds. Passed to the head as
# Ray's system config (compute.ray_private.system_config_args).
LOCAL_HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
                       "health_check_failure_threshold": 3}
# A site's idle workers stay for the next task of their job instead of being ended a second after
# they idle. Ray keeps no more idle workers than a node has CPUs, counting those its leases and
# their actors hold, so on a busy node each of the oracle's probes (every few seconds, per node)
# started a Python worker of its own (about a CPU-second here) that was ended before the next.
IDLE_WORKER_KEEP_MS = 300_000
# A site's Ray workers run buyers' paid leases and the oracle's timed challenge. Ray starts task and
# actor workers at nice 15 (a job's driver at 0), so they yielded to whatever else the provider's
# machine ran, down to a niced batch job (`make test`'s light lane, at 10, slowed the sites' tests
# beside it). At 5 they run ahead of such work, still behind the site's agent, the raylets and
# their health checks. Leases' own Rays start theirs at 5 too (provider.lease.worker).
WORKER_NICENESS = 5
SITE_RAY_CONFIG = LOCAL_HEALTH_CHECKS | {"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS,
                                         "worker_niceness": WORKER_NICENESS}
# Ray Train's helpers that a Swarm run has no use for, each an actor process or callbacks to start:
# the preemption watcher (a lease's Ray is one node of its own) and the metrics no one scrapes.
# Read from the environment of the process that builds the trainer.
TRAIN_HELPERS_OFF = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_TRAIN_METRICS_ENABLED": "0"}
# Ray Train's controller acts on its workers only when it polls them, by default every 2 s: a run
# waits on those polls to start, to register each checkpoint and to end, a third of a small job's
# wall time. Swarm's runs, and a buyer's Ray Train program in a lease, poll four times a second
# unless their environment says otherwise.
TRAIN_POLL = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}
# What a Ray Train run reports (`ray.train.report`) is appended, rank 0's scalars a line, to the
# file REPORTS_ENV names (compute.reports), for the lease's buyer to follow as it runs.
REPORTS_ENV = "SWARM_REPORTS"
TRAIN_REPORTS = {"RAY_TRAIN_CALLBACKS": "compute.train_reports.Reports"}
# Ray Data reads a Parquet dataset's footers on a pool of actors before it reads a row: 32 by default,
# each a Python process of its own (about 2 CPU-seconds to start here), for every read. One reads a
# site's tables, of a few files or thousands on S3, with as many threads as the footers need. Read
# from the environment of the process that calls `ray.data.read_parquet`.
DATA_FOOTER_READERS = {"RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "1"}
_ADDRESS = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class RayHome:
    """Where Swarm keeps its Ray files: $SWARM_HOME/ray."""

    root: Path

    @classmethod
    def of(cls, swarm_home: Path) -> RayHome:
        return cls(Path(swarm_home).expanduser().resolve() / "ray")

    @property
    def token(self) -> Path:
        return self.root / "auth_token"

    @property
    def cluster_state(self) -> Path:
        return self.root / "cluster.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def node_record(self, provider: str) -> Path:
        return self.root / "nodes" / f"{provider}.json"


# ── authentication ───────────────────────────────────────────────────────────

def ensure_token(home: RayHome) -> Path:
    """Creates the cluster's auth token once (mode 0600); the token itself is never returned."""
    home.root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(home.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return require_token(home)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return home.token


def require_token(home: RayHome) -> Path:
    """The token file, refused when missing or readable by anyone but its owner."""
    if not home.token.is_file():
        raise ComputeError(
            f"No Ray auth token at {home.token}; copy the cluster's token there (mode 0600) "
            "or start a local cluster with `swarm cluster up`."
        )
    if stat.S_IMODE(home.token.stat().st_mode) & 0o077:
        raise ComputeError(
            f"The Ray auth token {home.token} is readable by others; run `chmod 600 {home.token}`."
        )
    return home.token


def auth_env(home: RayHome, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a Ray process: token auth, with the token read from $SWARM_HOME/ray,
    and SWARM_HOME itself, so a lease this machine runs keeps its directory in this machine's
    home (provider.lease.launch)."""
    env = dict(os.environ if base is None else base)
    env.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the token file
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN_PATH"] = str(require_token(home))
    env["SWARM_HOME"] = str(home.root.parent)
    return env


def use_auth(home: RayHome) -> None:
    """Applies `auth_env` to this process, before (or, refreshing Ray's caches, after) Ray loads."""
    env = auth_env(home)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")})
    if "ray" in sys.modules:
        from compute.ray_private import reload_auth_settings  # Ray: see the module's docstring

        reload_auth_settings()


# ── reading the cluster ──────────────────────────────────────────────────────

@dataclass(frozen=True)
class RayNode:
    """One node as the cluster's GCS sees it."""

    node_id: str
    provider: str | None  # None for nodes without the provider label (the head)
    alive: bool
    head: bool
    cpus: float
    gpus: float
    ip: str

    def as_dict(self) -> dict:
        return asdict(self) | {"state": "alive" if self.alive else "dead"}


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT of a Ray head's GCS, refused with the expected shape otherwise."""
    match = _ADDRESS.match(address.strip())
    if not match or not 0 < int(match["port"]) < 65536:
        raise ComputeError(
            f"Ray address {address!r} is not HOST:PORT; give the head's GCS address, e.g. 10.0.0.5:6379."
        )
    return match["host"].strip("[]"), int(match["port"])


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuses quickly when nothing listens at `address` (Ray's own client waits 40 s)."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError:
        raise ComputeError(
            f"No Ray cluster answers at {address}; check the head's address and that it is running."
        ) from None


def cluster_nodes(home: RayHome, address: str) -> list[RayNode]:
    """Every node the GCS at `address` knows, alive or dead, read with this home's token."""
    return _read_nodes(_gcs_client(home, address), address)


def _gcs_client(home: RayHome, address: str):
    check_reachable(address)
    use_auth(home)
    from ray.exceptions import AuthenticationError

    from compute.ray_private import gcs_client  # Ray: after use_auth

    try:
        return gcs_client(address)
    except AuthenticationError:
        raise ComputeError(
            f"The Ray cluster at {address} refused the token in {home.token}; copy the cluster's token there."
        ) from None


def _read_nodes(gcs, address: str) -> list[RayNode]:
    from ray.exceptions import RpcError

    from compute.ray_private import gcs_nodes  # Ray: after use_auth

    try:
        infos = gcs_nodes(gcs, timeout_s=_GCS_TIMEOUT_S)
    except RpcError:
        raise ComputeError(
            f"The Ray cluster at {address} stopped answering; check that its head is still running."
        ) from None
    nodes = [
        RayNode(node_id=info.node_id, provider=info.labels.get(LABEL), alive=info.alive, head=info.head,
                cpus=info.resources.get("CPU", 0.0), gpus=info.resources.get("GPU", 0.0), ip=info.ip)
        for info in infos
    ]
    return sorted(nodes, key=lambda n: (not n.head, n.provider or "", n.node_id))


# ── a provider's node ────────────────────────────────────────────────────────

@dataclass(frozen=True)
class NodeSpec:
    """What a provider offers from this machine."""

    provider: str
    num_cpus: int = 1
    num_gpus: int = 0

    def __post_init__(self) -> None:
        if self.num_cpus < 1:
            raise ComputeError(f"--num-cpus must be at least 1, got {self.num_cpus}.")
        if self.num_gpus < 0:
            raise ComputeError(f"--num-gpus cannot be negative, got {self.num_gpus}.")


# Where a node of a site on a mesh listens: the machine's mesh address, and ports pinned per node
# so that a machine's firewall can name them (`binding`): node `i` of a machine takes the six from
# MESH_PORTS + MESH_PORTS_STRIDE × i for its node manager, object manager, dashboard agent (HTTP
# and gRPC), metrics and runtime-env agent, and the hundred from 100 above that for its workers;
# a mesh site's head serves its GCS on MESH_GCS_PORT. MESH_RAY_PORTS spans them all.
MESH_PORTS = 47_000
MESH_PORTS_STRIDE = 200
MESH_WORKER_PORTS = 100
MESH_NODES = 10  # nodes one machine may run on a mesh
MESH_GCS_PORT = 46_999
MESH_RAY_PORTS = (MESH_GCS_PORT, MESH_PORTS + MESH_PORTS_STRIDE * MESH_NODES - 1)


@dataclass(frozen=True)
class Binding:
    """Where one Ray node listens: an address of the site's mesh and its pinned ports."""

    node_ip: str
    node_manager_port: int
    object_manager_port: int
    dashboard_agent_port: int
    dashboard_agent_grpc_port: int
    metrics_export_port: int
    runtime_env_agent_port: int
    min_worker_port: int
    max_worker_port: int

    def node_args(self) -> dict[str, object]:
        """As `ray.cluster_utils.Cluster` (Ray's RayParams) takes them."""
        return {"node_ip_address": self.node_ip, "node_manager_port": self.node_manager_port,
                "object_manager_port": self.object_manager_port,
                "dashboard_agent_listen_port": self.dashboard_agent_port,
                "metrics_agent_port": self.dashboard_agent_grpc_port,
                "metrics_export_port": self.metrics_export_port,
                "runtime_env_agent_port": self.runtime_env_agent_port,
                "min_worker_port": self.min_worker_port, "max_worker_port": self.max_worker_port}

    def start_args(self) -> list[str]:
        """As `ray start` takes them."""
        return ["--node-ip-address", self.node_ip, "--node-manager-port", str(self.node_manager_port),
                "--object-manager-port", str(self.object_manager_port),
                "--dashboard-agent-listen-port", str(self.dashboard_agent_port),
                "--dashboard-agent-grpc-port", str(self.dashboard_agent_grpc_port),
                "--metrics-export-port", str(self.metrics_export_port),
                "--runtime-env-agent-port", str(self.runtime_env_agent_port),
                "--min-worker-port", str(self.min_worker_port),
                "--max-worker-port", str(self.max_worker_port)]


def binding(node_ip: str, index: int = 0) -> Binding:
    """Node `index`'s binding on the machine whose mesh address is `node_ip`."""
    if not 0 <= index < MESH_NODES:
        raise ComputeError(f"A machine runs at most {MESH_NODES} nodes on a mesh, not {index + 1}.")
    base = MESH_PORTS + MESH_PORTS_STRIDE * index
    return Binding(node_ip, base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 100,
                   base + 100 + MESH_WORKER_PORTS - 1)


@dataclass(frozen=True)
class JoinedNode:
    """The record of a node this machine started, kept so that `leave` can stop it."""

    provider: str
    head_address: str
    node_id: str
    pid: int  # the `ray start --block` process; its children are the node's raylet and agents
    num_cpus: int
    num_gpus: int
    log: str

    def as_dict(self) -> dict:
        return asdict(self)


def join(home: RayHome, address: str, spec: NodeSpec, ceiling_s: float = START_CEILING_S,
         bound: Binding | None = None) -> JoinedNode:
    """Starts a Ray node for `spec.provider` against the head at `address`; returns once it is
    alive, waited for while its process lives and starts (core.starting). `bound`: where it
    listens, on a site's mesh (else where Ray chooses)."""
    running = joined(home, spec.provider)
    if running is not None:
        raise ComputeError(
            f"{spec.provider} already runs a node here (node {running.node_id[:12]}, pid {running.pid}); "
            "stop it with `swarm provider leave` first."
        )
    gcs = _gcs_client(home, address)
    before = {n.node_id for n in _read_nodes(gcs, address)}
    home.logs.mkdir(parents=True, exist_ok=True)
    log = home.logs / f"node-{spec.provider}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            _ray_start_command(address, spec, bound), env=auth_env(home), stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        node = _wait_for_node(gcs, address, Starting(f"the Ray node for {spec.provider}", process, log),
                              spec.provider, before, ceiling_s)
    except BaseException:
        stop_session(process.pid, LEAVE_TIMEOUT_S)
        raise
    record = JoinedNode(
        spec.provider, address, node.node_id, process.pid, spec.num_cpus, spec.num_gpus, str(log)
    )
    _write_json(home.node_record(spec.provider), record.as_dict())
    return record


def joined(home: RayHome, provider: str) -> JoinedNode | None:
    """The node this machine runs for `provider`, if its process still lives (a stale record is dropped)."""
    path = home.node_record(provider)
    if not path.is_file():
        return None
    record = JoinedNode(**json.loads(path.read_text()))
    if not _is_ray_start(record.pid):
        path.unlink(missing_ok=True)
        return None
    return record


def leave(home: RayHome, provider: str, timeout: float = LEAVE_TIMEOUT_S) -> JoinedNode | None:
    """Stops the node this machine runs for `provider` (it drains first); None if there is none."""
    record = joined(home, provider)
    if record is None:
        return None
    stop_session(record.pid, timeout)  # `ray start --block` drains the node on SIGTERM
    home.node_record(provider).unlink(missing_ok=True)
    _wait_until_dead(home, record)
    return record


def _ray_start_command(address: str, spec: NodeSpec, bound: Binding | None = None) -> list[str]:
    labels = ",".join(f"{k}={v}" for k, v in node_labels(spec.provider).items())
    return [
        str(Path(sys.executable).with_name("ray")), "start", "--block",
        "--address", address,
        "--labels", labels,
        "--resources", json.dumps(node_resources(spec.provider)),
        "--num-cpus", str(spec.num_cpus),
        "--num-gpus", str(spec.num_gpus),
        # Ray's fixed default (52365) collides with any other node on the same machine.
        *(bound.start_args() if bound else ["--dashboard-agent-listen-port", str(free_port())]),
        "--disable-usage-stats",
    ]


def _wait_for_node(gcs, address: str, starting: Starting, provider: str, before: set[str],
                   ceiling_s: float) -> RayNode:
    """The new alive node the GCS lists for `provider`, once it does; `ray start --block` exiting
    first fails the wait at once."""

    def registered() -> RayNode | None:
        fresh = [n for n in _read_nodes(gcs, address)
                 if n.alive and n.provider == provider and n.node_id not in before]
        return fresh[0] if fresh else None

    return wait_until(starting, registered, ceiling_s, poll_s=0.5)


def _wait_until_dead(home: RayHome, record: JoinedNode, timeout: float = 15.0) -> None:
    """Best effort: the raylet unregisters as it stops; wait for the GCS to say so."""
    try:
        gcs = _gcs_client(home, record.head_address)
    except ComputeError:
        return  # the head is gone: nothing left to tell
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            nodes = _read_nodes(gcs, record.head_address)
        except ComputeError:
            return
        if not any(n.alive and n.node_id == record.node_id for n in nodes):
            return
        time.sleep(0.2)


class RayStart:
    """One attempt to start a Ray node in this process (`ray.init` of a local instance, a node of a
    `ray.cluster_utils.Cluster`): whether its failure was a loaded machine's or a broken node's,
    and what it left running. Made just before the attempt."""

    def __init__(self) -> None:
        self._before = _descendants()

    def slow(self, error: BaseException) -> bool:
        """Whether `error` is Ray's own start deadline passing while the node still started. Ray
        gives the raylet it started a fixed 30 s to register with the GCS, which a loaded machine
        can miss, and then raises a bare `Exception` (ray/_private/node.py; pinned in
        tests/test_ray_start.py): the start was slow, not broken, if that raylet still runs. Any
        other class of error, or a raylet that exited, would fail the same way again."""
        return type(error) is Exception and any(_running(p) and _named(p, "raylet") for p in self._started())

    def stop(self) -> None:
        """Kills what the attempt started: Ray leaves its processes running when its start raises,
        and a second attempt must not share the machine with them."""
        import psutil

        started = self._started()
        for process in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        _wait_ended(started, LEAVE_TIMEOUT_S)

    def _started(self) -> list:
        import psutil

        try:
            return [p for p in psutil.Process().children(recursive=True) if p.pid not in self._before]
        except psutil.NoSuchProcess:
            return []


def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _named(process, name: str) -> bool:
    import psutil

    try:
        return process.name() == name
    except psutil.Error:
        return False


def _running(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_session(pid: int, timeout: float) -> None:
    """SIGTERM to `pid`, the leader of a session started here, and a wait for it to clean up; then
    SIGKILL to whatever is left in its session (its raylets, agents and workers, and the Ray
    dashboard's processes, which lead process groups of their own), and a wait for those."""
    import psutil

    try:
        proc = psutil.Process(pid)
        proc.terminate()
        _wait_ended([proc], timeout)
    except psutil.NoSuchProcess:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    left = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pid:
                proc.kill()
                left.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    _wait_ended(left, 5.0)


def _wait_ended(procs: list, timeout: float, poll_s: float = 0.02) -> None:
    """Waits until each process has ended, up to `timeout`. A process that is not this one's
    child stays a zombie until its reaper (often init) collects it, a second or more later;
    psutil's own wait counts that time, this does not: a zombie has ended once its last thread
    has (its first shows as a zombie while the others, which share its sockets, still end)."""
    import psutil

    def running(proc) -> bool:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return False
        try:
            return len(os.listdir(f"/proc/{proc.pid}/task")) > 1
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + timeout
    left = procs
    while (left := [p for p in left if running(p)]) and time.monotonic() < deadline:
        time.sleep(poll_s)
    for proc in procs:  # a child of this process is reaped here, or it stays a zombie while this one runs
        with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
            proc.wait(timeout=0)


def _is_ray_start(pid: int) -> bool:
    import psutil

    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "start" in cmdline and "--block" in cmdline and any(part.endswith("ray") for part in cmdline[:2])


def _write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)


# Ports a site hands its Ray processes (a dashboard, a node's agent) are drawn between the
# devnets' ports (anvil.node.free_port: 20000–25999) and the kernel's ephemeral range, where the
# port-0 binds of every other process land: Ray's own make many, and three sites starting at once
# took one another's. Such a port is free when drawn and bound seconds later, once Ray starts the
# process: drawn from the devnets' range, it could be the port of an anvil killed in that moment
# and about to start again on it.
PORTS_FROM = 26_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and outside the kernel's ephemeral range."""
    import random

    try:
        below = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        below = PORTS_FROM
    candidates = random.SystemRandom().sample(range(PORTS_FROM, below), min(100, max(0, below - PORTS_FROM)))
    for port in [*candidates, 0]:  # 0: the kernel's choice, where there is no room below its range
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise ComputeError("No free TCP port on 127.0.0.1; stop a process that holds many.")
