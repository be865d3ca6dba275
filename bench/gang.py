"""Leases across machines: what the lease's own network costs DDP training, and what a lease
across two nodes adds to the time to its first training step.

Run: make bench-gang   (or .venv/bin/python bench/gang.py --runs 5 --seconds 10 --lease-runs 3)

  ddp         The same torch.distributed DDP script (gloo, CPU, world size 2, one rank a machine,
              one thread a rank; an MLP of three layers, or ResNet-20 on 32×32 images, on one
              synthetic batch) on two machines that network namespaces stand in for
              (tests/mesh_net.py: veth to one bridge), a head coordinating their mesh as a site's
              does (provider/mesh.py). The lease's path: each rank in a real lease sandbox
              (bubblewrap, the lease's own user) in its node's namespace, the two joined by the
              lease's own WireGuard link (provider/lease/network.py) where a site puts it: the
              machines listen on their wire, so the link crosses it directly. The lease's path
              on the mesh: the same with the link riding the mesh, as between machines behind
              NAT. The mesh alone: the script directly in the machines' namespaces over their
              mesh addresses. Plain veth: the same over their addresses on the wire. Samples/s
              of the whole job (both ranks) over ~`--seconds` of steps after a warm-up, as rank
              0 times them; medians of `--runs`, the paths taking turns to go first.
  first-step  A local Ray cluster of one provider with two nodes of one CPU. From starting the
              site's own entry point of a lease to the first report of its Ray Train program,
              as the site relays it (the first `provider.lease.outcome.REPORT` line): the gang's
              coordinator (`python -m provider.lease.gang`) for a lease of two nodes, one worker
              on each, against the launcher (`python -m provider.lease.launch`) for a lease of
              one node and one worker. Medians of `--lease-runs`. Posting, matching and the Ray
              job submission that starts either entry point on a site are the same for both and
              not included.

On this 2-core machine both "machines", their WireGuard (wireguard-go: the kernel has no module)
and the ranks share the same two cores, which a site's separate machines would not.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ray reads its authentication settings when it is first imported: set before that.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provider.lease.network import SOCKET_ENV, node_address
from provider.lease.sandbox import Limits, Sandbox, lease_uid
from provider.mesh import HEAD, KEY_FILE, LISTEN_PORT, Coordinator, Interface, machine_key, record_address
from tests.mesh_net import Machine, Wire

RESULTS = Path(__file__).resolve().parent / "results" / "gang.json"
SECRET = "the site's join secret"
MASTER_PORT = 29500
LEASE_NUMBER = 77


@dataclass(frozen=True)
class Setting:
    """One DDP workload: `model` (an MLP of three layers of `width`, or ResNet-20 on 32×32 images
    of three channels, the CIFAR-10 network of He et al., 2016), `batch` samples a rank a step."""

    name: str
    width: int
    batch: int
    model: str = "mlp"


SETTINGS = (Setting("small CPU job", 512, 256), Setting("communication-heavy", 2048, 32),
            # ResNet-20 at its paper's batch of 128, split over the two ranks
            Setting("compute-heavy", 0, 64, "resnet20"))

# The DDP script, the same on both paths: rank 0 prints the job's samples/s. The number of timed
# steps is rank 0's estimate of `BENCH_SECONDS`, sent to rank 1, so both ranks run as many.
TRAIN = """
import json, os, time
import torch
import torch.distributed as dist

from torch import nn

torch.set_num_threads(1)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
width, batch = int(os.environ["BENCH_WIDTH"]), int(os.environ["BENCH_BATCH"])
dist.init_process_group("gloo", rank=rank, world_size=world)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, inp, out, stride):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(inp, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out),
                                  nn.ReLU(), nn.Conv2d(out, out, 3, 1, 1, bias=False), nn.BatchNorm2d(out))
        self.skip = nn.Sequential() if stride == 1 and inp == out else nn.Sequential(
            nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet20():
    layers, inp = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for out, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            layers.append(Block(inp, out, stride if i == 0 else 1))
            inp = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


g = torch.Generator().manual_seed(rank)
if os.environ["BENCH_MODEL"] == "resnet20":
    net, x = resnet20(), torch.randn(batch, 3, 32, 32, generator=g)
else:
    net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                        nn.Linear(width, 10))
    x = torch.randn(batch, width, generator=g)
y = torch.randint(0, 10, (batch,), generator=g)
model = torch.nn.parallel.DistributedDataParallel(net)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def timed(steps):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    return time.perf_counter() - start


timed(5)  # warm-up
steps = torch.tensor([max(10, round(float(os.environ["BENCH_SECONDS"]) / (timed(5) / 5)))])
dist.broadcast(steps, 0)
seconds = timed(int(steps))
if rank == 0:
    print(json.dumps({"steps": int(steps), "seconds": seconds,
                      "samples_per_s": int(steps) * batch * world / seconds,
                      "parameters": sum(p.numel() for p in net.parameters())}), flush=True)
dist.barrier()
os._exit(0)  # not gloo's teardown, which may abort a rank whose peer has already gone
"""

# A node's end of the lease's link, kept by a process of its own in its machine's namespace for
# as long as the lease lasts (the link's namespace ends with the process that made it): it opens
# the link, says what the other node needs, connects to the peers it is sent, and closes the
# link when its input ends.
NODE = """
import json, sys
from pathlib import Path
from provider.lease.network import LeaseLink, host_of
host, ports = host_of(Path(sys.argv[4]), sys.argv[3]) if sys.argv[5] == "site" else (sys.argv[3], None)
link, described = LeaseLink.open(Path(sys.argv[1]), int(sys.argv[2]), host, ports)
try:
    print(json.dumps(described | {"holder": link.holder}), flush=True)
    link.connect(json.loads(sys.stdin.readline()))
    print("connected", flush=True)
    sys.stdin.read()
finally:
    link.close()
"""


# ── DDP over the lease's network against plain veth ─────────────────────────────────────────


@dataclass
class Site:
    """Two machines of a site on its mesh, a lease with a node on each, and the processes
    that keep the lease's links."""

    machines: list[Machine]
    mesh: list[tuple[str, str]]  # each machine's mesh address and interface
    # the processes that hold the lease's namespaces: its links where a site puts them (the
    # machines listen on their wire: the links cross it) and, for machines behind NAT, on the mesh
    holders: dict[str, list[int]]
    work: Path
    implementation: str


@contextmanager
def site(tmp: Path) -> Iterator[Site]:
    """A head and two machines joined by the site's mesh, and a lease's link between the two;
    every namespace, link and process removed at the end, whatever happened."""
    wire = Wire()
    keepers: list[subprocess.Popen] = []
    try:
        machines = {name: wire.machine(name) for name in (HEAD, "m1", "m2")}
        homes = {name: tmp / name for name in machines}
        coordinator = Coordinator(homes[HEAD] / "site" / "mesh.json", SECRET, machine_key(homes[HEAD]),
                                  f"{machines[HEAD].underlay}:{LISTEN_PORT}")
        addresses = {HEAD: coordinator.head.address}
        interfaces = {name: Interface(f"wg{wire.tag}{i}", m.prefix)
                      for i, (name, m) in enumerate(machines.items())}
        implementation = interfaces[HEAD].up(homes[HEAD] / KEY_FILE, addresses[HEAD],
                                             coordinator.state.network, forward=True)
        for name in ("m1", "m2"):
            joined = coordinator.join(SECRET, name, machine_key(homes[name]),
                                      f"{machines[name].underlay}:{LISTEN_PORT}")
            addresses[name] = joined["address"]
            interfaces[name].up(homes[name] / KEY_FILE, joined["address"], joined["network"])
        for name, interface in interfaces.items():
            key = coordinator.head.public_key if name == HEAD else coordinator.state.peers[name].public_key
            interface.sync(coordinator.peers_of(key))
            record_address(homes[name], addresses[name], f"{machines[name].underlay}:{LISTEN_PORT}")
        holders = {}
        for placed in ("site", "mesh"):
            pair = []
            for index, name in enumerate(("m1", "m2")):
                directory = homes[name] / "site" / "leases" / f"bench-{placed}.node{index}"
                command = [*machines[name].prefix, sys.executable, "-c", NODE, str(directory), str(index),
                           addresses[name], str(homes[name]), placed]
                with open(tmp / f"node{index}.err", "w") as err:
                    pair.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 stderr=err, text=True, cwd=ROOT))
            keepers += pair
            holders[placed] = [n["holder"] for n in _connect(pair, tmp)]
        yield Site([machines["m1"], machines["m2"]],
                   [(addresses[m], interfaces[m].name) for m in ("m1", "m2")],
                   holders, tmp / "work", implementation)
    finally:
        for keeper in keepers:
            try:
                if keeper.stdin is not None:
                    keeper.stdin.close()  # the keeper closes its link
                keeper.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                keeper.kill()
        wire.close()


def _connect(keepers: list[subprocess.Popen], tmp: Path) -> list[dict[str, Any]]:
    """The two nodes' links, each told the other's key and endpoint; what each described."""
    nodes = []
    for index, keeper in enumerate(keepers):
        line = keeper.stdout.readline() if keeper.stdout else ""
        if not line:
            raise RuntimeError(f"node {index}'s link did not open: {_said(tmp, index)}")
        nodes.append(json.loads(line))
    keys = ("index", "public_key", "endpoint", "wire")
    described = json.dumps([{k: n[k] for k in keys} for n in nodes]) + "\n"
    for keeper in keepers:
        assert keeper.stdin is not None
        keeper.stdin.write(described)
        keeper.stdin.flush()
    for index, keeper in enumerate(keepers):
        if (keeper.stdout.readline() if keeper.stdout else "").strip() != "connected":
            raise RuntimeError(f"node {index}'s link did not connect: {_said(tmp, index)}")
    return nodes


def _said(tmp: Path, index: int) -> str:
    return (tmp / f"node{index}.err").read_text()[-2000:]


def _train_env(setting: Setting, seconds: float, rank: int, master: str) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT),
            "BENCH_WIDTH": str(setting.width), "BENCH_BATCH": str(setting.batch),
            "BENCH_MODEL": setting.model,
            "BENCH_SECONDS": str(seconds)}


def _figure(outputs: list[tuple[int, str, str]]) -> dict[str, Any]:
    """Rank 0's figures, or the ranks' errors."""
    if any(code != 0 for code, _, _ in outputs):
        said = " | ".join(f"{code}: {err[-1500:]}" for code, _, err in outputs)
        raise RuntimeError(f"a rank failed: {said}")
    return json.loads(outputs[0][1].strip().splitlines()[-1])


def over_lease(state: Site, setting: Setting, seconds: float, placed: str = "site") -> dict[str, Any]:
    """The script with each rank in the lease's sandbox on its node, over the lease's link: where
    a site puts it (`site`: across the machines' wire), or riding the mesh (`mesh`)."""
    outputs: list[tuple[int, str, str]] = [(-1, "", "")] * 2

    def rank(i: int) -> None:
        sandbox = Sandbox(state.work / f"rank{i}",
                          Limits(memory_bytes=3 * 2**30, max_processes=256, wall_seconds=4 * seconds + 120),
                          lease_uid=lease_uid(LEASE_NUMBER),
                          netns=Path(f"/proc/{state.holders[placed][i]}/ns/net"),
                          env=_train_env(setting, seconds, i, node_address(0)) | SOCKET_ENV)
        done = sandbox.run([sys.executable, "-c", TRAIN])
        broke = f" (broke its {done.broke} limit)" if done.broke else ""
        outputs[i] = (done.returncode, done.stdout, done.stderr + broke)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return _figure(outputs)


def over_veth(state: Site, setting: Setting, seconds: float) -> dict[str, Any]:
    """The script run directly in the two machines' namespaces, over their addresses on the wire."""
    return _direct(state, setting, seconds, state.machines[0].underlay, ["eth0", "eth0"])


def over_mesh(state: Site, setting: Setting, seconds: float) -> dict[str, Any]:
    """The script run directly in the two machines' namespaces, over the site's mesh alone: where
    the lease's path loses what it loses, the mesh or the lease's own link and sandbox on top."""
    return _direct(state, setting, seconds, state.mesh[0][0], [name for _, name in state.mesh])


def _direct(state: Site, setting: Setting, seconds: float, master: str,
            interfaces: list[str]) -> dict[str, Any]:
    """The script as root in the machines' own namespaces, gloo bound to `interfaces`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state.work), "TMPDIR": "/tmp"}
    ranks = [subprocess.Popen([*m.prefix, sys.executable, "-c", TRAIN], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=state.work,
                              env=env | _train_env(setting, seconds, i, master)
                              | {"GLOO_SOCKET_IFNAME": interfaces[i]})
             for i, m in enumerate(state.machines)]
    outputs = []
    for process in ranks:
        try:
            out, err = process.communicate(timeout=4 * seconds + 120)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        outputs.append((process.returncode, out, err))
    return _figure(outputs)


def over_lease_on_mesh(state: Site, setting: Setting, seconds: float) -> dict[str, Any]:
    """The lease's path for machines behind NAT: its link riding the mesh, encrypted twice."""
    return over_lease(state, setting, seconds, "mesh")


PATHS = {"veth": over_veth, "mesh": over_mesh, "lease": over_lease, "lease_on_mesh": over_lease_on_mesh}


def bench_ddp(runs: int, seconds: float, settings: tuple[Setting, ...] = SETTINGS,
              earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each of `settings` measured; the other settings' figures kept from `earlier`."""
    kept = [f for f in (earlier or {}).get("settings", []) if f["name"] not in {s.name for s in settings}]
    figures: dict[str, Any] = {"runs": runs, "seconds": seconds, "settings": kept}
    with tempfile.TemporaryDirectory(prefix="swarm-bench-gang-") as tmp, site(Path(tmp)) as state:
        state.work.mkdir()
        figures["implementation"] = state.implementation
        for setting in settings:
            for path in PATHS.values():
                path(state, setting, 2)  # warm-up: the handshakes, the pages of torch
            runs_of: dict[str, list[float]] = {name: [] for name in PATHS}
            for i in range(runs):
                for name in list(PATHS)[i % len(PATHS):] + list(PATHS)[:i % len(PATHS)]:  # each first in turn
                    measured = PATHS[name](state, setting, seconds)
                    runs_of[name].append(round(measured["samples_per_s"], 1))
                    print(f"{setting.name}, {name}: {measured['samples_per_s']:.0f} samples/s", flush=True)
            medians = {name: statistics.median(values) for name, values in runs_of.items()}
            figures["settings"].append({
                "name": setting.name, "model": setting.model, "width": setting.width,
                "batch_per_rank": setting.batch,
                "parameters": measured["parameters"],
                **{f"{name}_samples_per_s": values for name, values in runs_of.items()},
                **{f"{name}_median": round(value, 1) for name, value in medians.items()},
                "ratio": round(medians["lease"] / medians["veth"], 3),
                "mesh_ratio": round(medians["mesh"] / medians["veth"], 3),
                "lease_on_mesh_ratio": round(medians["lease_on_mesh"] / medians["veth"], 3),
            })
    return figures


# ── post → first training step, two nodes against one ───────────────────────────────────────

OBJECT_STORE = 80 * 1024 * 1024
STEPS = 3
# The buyer's Ray Train program: DDP of a small MLP, a report at every step.
PROGRAM = """
import ray, ray.train, torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def loop(config):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = prepare_model(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 64)
    y = x.sum(dim=1, keepdim=True)
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        ray.train.report({"step": step, "loss": loss.item()})


ray.init()
TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=WORKERS)).fit()
"""


@dataclass(frozen=True)
class Kind:
    """A lease of `nodes` nodes, started by the site's entry point `module` for it."""

    name: str
    nodes: int
    module: str


KINDS = (Kind("one node", 1, "provider.lease.launch"), Kind("two nodes", 2, "provider.lease.gang"))


def lease_plan(tmp: Path, kind: Kind, run: str) -> Any:
    """The plan the site would make for the program on `kind.nodes` nodes of one CPU each."""
    from anvil import dev_account
    from compute.jobs import ComputeJob
    from provider.lease.plan import LeasePlan
    from tests.programs import pinned_code

    main = PROGRAM.replace("STEPS", str(STEPS)).replace("WORKERS", str(kind.nodes))
    program = {"entrypoint": "python main.py", "requirements": [], "env": {}, "ray": True,
               "code": pinned_code(tmp / "buyer", {"main.py": main}), "inputs": {}}
    job = ComputeJob.of(f"job-{run}", "ray", dev_account(1).address, program)
    return LeasePlan(job_id=1, number=LEASE_NUMBER, job=job, cpus=1, gpus=0, memory_bytes=3 * 2**30,
                     wall_seconds=300, max_units=2_000, result=str(tmp / "results" / run),
                     verdict_key=secrets.token_hex(16), nodes=kind.nodes,
                     shared=str(tmp / "shared" / run) if kind.nodes > 1 else "")


def to_first_report(tmp: Path, kind: Kind, run: str) -> dict[str, float]:
    """Seconds from starting the lease's entry point to the first report it relays, and to its end."""
    from provider.lease import PLAN_ENV
    from provider.lease.launch import leases_root, node_directory
    from provider.lease.outcome import REPORT, verdict

    plan = lease_plan(tmp, kind, run)
    env = os.environ | {PLAN_ENV: plan.encode()}
    name = f"bench-{run}"
    first = None
    lines: list[str] = []
    started = time.monotonic()
    try:
        with open(tmp / f"{run}.err", "w") as err:
            process = subprocess.Popen([sys.executable, "-m", kind.module, name], env=env, cwd=ROOT,
                                       text=True, stdout=subprocess.PIPE, stderr=err)
            assert process.stdout is not None
            for line in process.stdout:
                if first is None and line.startswith(REPORT):
                    first = time.monotonic() - started
                lines.append(line)
            process.wait()
        ended = time.monotonic() - started
    finally:
        nodes = [name] if kind.nodes == 1 else [node_directory(name, i) for i in range(kind.nodes)]
        for directory in nodes:
            shutil.rmtree(leases_root(env) / directory, ignore_errors=True)
        shutil.rmtree(tmp / "results" / run, ignore_errors=True)
        shutil.rmtree(tmp / "shared" / run, ignore_errors=True)
    outcome = verdict("".join(lines), plan.verdict_key)
    if first is None or outcome is None or outcome.state != "succeeded":
        raise RuntimeError(f"the {kind.name} lease did not report and succeed: {''.join(lines)[-3000:]}"
                           f"{(tmp / f'{run}.err').read_text()[-2000:]}")
    return {"first_report_s": round(first, 2), "end_s": round(ended, 2)}


def bench_first_step(runs: int) -> dict[str, Any]:
    """Leases of one and of two nodes on a local cluster of one provider's two nodes."""
    with tempfile.TemporaryDirectory(prefix="swarm-bench-gang-") as tmp:
        # The cluster's raylets keep their leases in this SWARM_HOME (provider.lease.launch.leases_root).
        os.environ["SWARM_HOME"] = str(Path(tmp) / "home")
        with site_cluster() as address:
            os.environ["RAY_ADDRESS"] = address  # where the gang's coordinator finds the site's Ray
            for kind in KINDS:
                to_first_report(Path(tmp), kind, f"warmup-{kind.nodes}")
            runs_of: dict[str, list[dict[str, float]]] = {kind.name: [] for kind in KINDS}
            for i in range(runs):
                for kind in KINDS if i % 2 == 0 else reversed(KINDS):
                    runs_of[kind.name].append(to_first_report(Path(tmp), kind, f"{i}-{kind.nodes}"))
                    print(f"{kind.name}: {runs_of[kind.name][-1]}", flush=True)
    figures: dict[str, Any] = {"runs": runs, "steps": STEPS}
    for kind in KINDS:
        key = kind.name.replace(" ", "_")
        figures[f"{key}_first_report_s"] = [r["first_report_s"] for r in runs_of[kind.name]]
        figures[f"{key}_end_s"] = [r["end_s"] for r in runs_of[kind.name]]
        figures[f"{key}_median_s"] = statistics.median(figures[f"{key}_first_report_s"])
    figures["difference_s"] = round(figures["two_nodes_median_s"] - figures["one_node_median_s"], 2)
    return figures


@contextmanager
def site_cluster() -> Iterator[str]:
    """A site's Ray cluster on this machine: a head with no CPUs and its settings, and one
    provider's two nodes of one CPU, labelled and given the provider's resource as a site's are."""
    from ray.cluster_utils import Cluster

    from anvil import dev_account
    from compute.node import SITE_RAY_CONFIG
    from compute.placement import node_labels, node_resources
    from compute.ray_private import stop_cluster, system_config_args

    provider = dev_account(1).address
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": OBJECT_STORE,
                                                            **system_config_args(SITE_RAY_CONFIG)})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, labels=node_labels(provider), resources=node_resources(provider),
                             object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        stop_cluster(cluster)




def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5, help="DDP runs of each path and setting")
    parser.add_argument("--seconds", type=float, default=10, help="timed training of each DDP run")
    parser.add_argument("--lease-runs", type=int, default=3,
                        help="leases of each kind timed to their first step")
    parser.add_argument("--only", choices=("ddp", "first-step"), help="one of the two benchmarks")
    parser.add_argument("--setting", choices=[s.name for s in SETTINGS],
                        help="one DDP setting, keeping the others' figures of the last run")
    args = parser.parse_args()
    keep = bool(args.only or args.setting) and RESULTS.exists()
    figures: dict[str, Any] = json.loads(RESULTS.read_text()) if keep else {}
    if args.only in (None, "ddp"):
        chosen = tuple(s for s in SETTINGS if args.setting in (None, s.name))
        figures["ddp"] = bench_ddp(args.runs, args.seconds, chosen, figures.get("ddp"))
    if args.only in (None, "first-step"):
        figures["first_step"] = bench_first_step(args.lease_runs)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
