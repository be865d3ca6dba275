"""A lease across nodes: its coordinator, the entrypoint of its Ray job on the site's head.

The site submits `python -m provider.lease.gang <lease name>` for a lease whose plan asks for
`nodes` > 1, reserving nothing for the coordinator itself. It places the lease all at once: one
placement group of `nodes` bundles, each the lease's share of a node (its CPUs and GPUs),
strictly spread, so each lands on a node of its own and none is held until all can be. On
each bundle it starts a `LeaseNode` actor, which holds that share (Ray names its GPUs in the
actor's environment) and runs that node's launcher (`provider.lease.launch NAME --node I`) as
a child that dies with it. The nodes' links (`provider.lease.network`) are made in two steps
through the coordinator: each node opens its own and says its key and port, then each is told
the others'. Node 0 runs the lease's Ray head and the job, and prints the verdict; the others
join its Ray.

The coordinator relays what the nodes print to its own output, which Ray keeps as the lease's
job log: node 0's as it is, the others' each line marked with its node. It gives node 0's
verdict only once it knows every other node was there to the end: a node whose machine left
the site's cluster (its actor died) means the coordinator stops the rest and ends without a
verdict, so the site runs the lease again, from its last checkpoint in the directory the nodes
share, on whichever machines can hold it then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute.cluster import running
from compute.node import RayHome
from compute.placement import PIN, provider_resource
from core import logs
from provider.lease import FETCHED, PLAN_ENV, PROJECT, STAGED, WORK, untrusted
from provider.lease.launch import leases_root, machine_home, node_directory
from provider.lease.network import LeaseLink, host_of
from provider.lease.outcome import VERDICT, Outcome, verdict, verdict_line
from provider.lease.plan import LeasePlan
from provider.lease.sandbox import lease_uid

if TYPE_CHECKING:  # Ray loads as the coordinator connects to the site's cluster
    from ray.actor import ActorHandle

RELAY_S = 0.2  # how often the coordinator reads what the nodes printed
OPEN_TIMEOUT_S = 60.0
ALIVE_TIMEOUT_S = 6.0  # how long a node's actor has to answer before its machine counts as lost


class LeaseNode:
    """One node's share of a lease across nodes, on the machine Ray placed it on: its link, and
    its launcher as a child process whose output it keeps for the coordinator."""

    def __init__(self, name: str, index: int) -> None:
        self.name, self.index = name, index
        self.directory = leases_root() / node_directory(name, index)
        self.link: LeaseLink | None = None
        self.process: subprocess.Popen | None = None
        self.out = self.directory.parent / f"{self.directory.name}.out"

    def open(self) -> dict[str, Any]:
        """Makes this node's link; what the other nodes need of it, where its work directory is,
        and which node of the site's cluster it is on."""
        import ray
        from ray.util import get_node_ip_address

        host, ports = host_of(machine_home(), get_node_ip_address())
        self.link, described = LeaseLink.open(self.directory, self.index, host, ports)
        return described | {"work": str(self.directory / WORK),
                            "node_id": ray.get_runtime_context().get_node_id()}

    def start(self, nodes: list[dict[str, Any]], at: str) -> None:
        """Joins the lease's network and starts this node's launcher, its work directory seen at `at`."""
        if self.link is None:
            raise RuntimeError("a lease node's link is opened (`open`) before it starts")
        self.link.connect(nodes)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "provider.lease.launch", self.name, "--node", str(self.index),
                 "--netns", str(self.link.netns), "--at", at],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT,
            )

    def read(self, offset: int) -> tuple[bytes, int | None]:
        """What the launcher printed from `offset` on (at most 1 MiB), and its exit status once it ended."""
        code = self.process.poll() if self.process is not None else None
        with open(self.out, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20), code

    def stop(self) -> None:
        """Ends the launcher (its sandbox ends with it) and the link; a node other than the first
        leaves nothing on its machine (what it staged is staged again by a later attempt)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.link is not None:
            self.link.close()
        self.out.unlink(missing_ok=True)
        if self.index > 0:
            untrusted.remove(self.directory, WORK)
            for mark in (STAGED, FETCHED):
                (self.directory / mark).unlink(missing_ok=True)


def coordinate(name: str, plan: LeasePlan) -> int:
    """Places and runs the lease's nodes and relays their output; returns node 0's exit status,
    or 1 without a verdict when a node's machine was lost."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=site_address(), log_to_driver=False)
    bundle = {"CPU": float(plan.cpus), **({"GPU": float(plan.gpus)} if plan.gpus else {}),
              **({provider_resource(plan.job.provider): PIN} if plan.job.provider else {})}
    group = placement_group([bundle] * plan.nodes, strategy="STRICT_SPREAD")
    print(f"placing the lease's {plan.nodes} nodes, each {plan.cpus:g} CPUs and {plan.gpus:g} GPUs on a "
          "machine of its own", flush=True)
    ready, _ = ray.wait([group.ready()], timeout=plan.wall_seconds)
    if not ready:
        outcome = Outcome(state="failed", attempt=plan.attempt, seconds=plan.wall_seconds, returncode=-1,
                          fault="provider", error=f"the site could not place the lease's {plan.nodes} nodes, "
                          "each on a machine of its own, before its deadline.")
        print(verdict_line(plan.verdict_key, outcome), flush=True)
        return 1
    shared = Path(plan.shared)
    _make_shared(shared, plan)
    node = ray.remote(LeaseNode)
    env = {"env_vars": {"PYTHONPATH": str(PROJECT), PLAN_ENV: os.environ[PLAN_ENV], **logs.child_env()}}
    actors = [node.options(num_cpus=plan.cpus, num_gpus=plan.gpus or None, max_restarts=0, runtime_env=env,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(name, i)
              for i in range(plan.nodes)]
    try:
        described = ray.get([a.open.remote() for a in actors], timeout=OPEN_TIMEOUT_S)
        for node in described:
            print(f"node {node['index']} on the site's node {node['node_id']} ({node['endpoint']})",
                  flush=True)
        at = described[0]["work"]
        ray.get([a.start.remote(described, at) for a in actors], timeout=OPEN_TIMEOUT_S)
        code, given = _relay(actors, plan)
        if given is not None and (given.state == "succeeded" or given.fault == "buyer"):
            # its result is stored, or it failed for good: what its nodes shared goes
            untrusted.remove(shared.parent, shared.name)
        return code
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
        print(f"a node of the lease was lost as it started ({type(exc).__name__}); the site runs it again",
              flush=True)
        return 1
    finally:
        for actor in actors:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except Exception as exc:  # noqa: BLE001 - its machine is gone: its processes went with it
                print(f"a node of the lease could not be stopped ({type(exc).__name__}); its machine is gone",
                      flush=True)


def _relay(actors: list[ActorHandle], plan: LeasePlan) -> tuple[int, Outcome | None]:
    """Relays the nodes' output until node 0 ends; its verdict is given only if no node was lost.
    Returns node 0's exit status and the verdict given (None: none, a node was lost)."""
    import ray

    mark = f"{VERDICT}{plan.verdict_key} ".encode()
    offsets, partial = [0] * len(actors), [b""] * len(actors)
    held: list[bytes] = []
    while True:
        lost = None
        code = None
        for i, actor in enumerate(actors):
            try:
                chunk, ended = ray.get(actor.read.remote(offsets[i]), timeout=ALIVE_TIMEOUT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                lost = i
                break
            offsets[i] += len(chunk)
            *lines, partial[i] = (partial[i] + chunk).split(b"\n")
            for line in lines:
                if i == 0 and line.startswith(mark):
                    held.append(line)  # given once every node is known to have lasted
                elif i == 0:
                    sys.stdout.buffer.write(line + b"\n")
                else:
                    sys.stdout.buffer.write(f"[node {i}] ".encode() + line + b"\n")
            if i == 0:
                code = ended
        sys.stdout.flush()
        if lost is None and code is not None:
            lost = _lost(actors[1:])
            if lost is None:
                for line in held:
                    sys.stdout.buffer.write(line + b"\n")
                sys.stdout.flush()
                return code, verdict(b"\n".join(held).decode(errors="replace"), plan.verdict_key)
        if lost is not None:
            print(f"the lease lost node {lost}: its machine left the site's cluster; the site runs the lease "
                  "again from its last checkpoint", flush=True)
            return 1, None
        time.sleep(RELAY_S)


def _lost(actors: list[ActorHandle]) -> int | None:
    """The first of the other nodes whose actor no longer answers (its machine is gone), if any:
    asked after node 0 ended, so a node lost under the job is never taken for the job's fault."""
    import ray

    time.sleep(ALIVE_TIMEOUT_S / 2)  # a machine lost as node 0 ended is known to the site's Ray by now
    for i, actor in enumerate(actors, start=1):
        try:
            ray.get(actor.read.remote(0), timeout=ALIVE_TIMEOUT_S)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return i
    return None


def site_address() -> str | None:
    """The site's own cluster: the one its SWARM_HOME records (the coordinator runs on the head,
    whose Ray processes carry it), not whichever cluster on the machine started last, which is what
    Ray's job supervisor names in RAY_ADDRESS; RAY_ADDRESS where the home records none."""
    home = os.environ.get("SWARM_HOME")
    state = running(RayHome.of(Path(home))) if home else None
    return state.address if state is not None else os.environ.get("RAY_ADDRESS")


def _make_shared(shared: Path, plan: LeasePlan) -> None:
    """The directory the lease's nodes share, its own user's (kept across attempts: its checkpoints)."""
    shared.mkdir(parents=True, exist_ok=True)
    for part in ("outputs", "storage", "home"):
        (shared / part).mkdir(exist_ok=True)
    if os.geteuid() == 0:
        untrusted.chown_tree(shared, lease_uid(plan.number))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logs.configure(libraries=False)  # the site's verbosity; what the lease prints stays the lease's
    if len(argv) != 1:
        print("usage: python -m provider.lease.gang NAME", file=sys.stderr)
        return 2
    return coordinate(argv[0], LeasePlan.decode(os.environ[PLAN_ENV]))


if __name__ == "__main__":
    sys.exit(main())
