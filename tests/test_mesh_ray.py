"""Ray over the mesh: a site's cluster on its head machine bound to the head's mesh address, a
node of another machine joined to it over the mesh with its ports pinned (`compute.node.binding`),
and work placed on that node whose result comes back through Ray's object transfer. Network
namespaces stand in for the machines (tests/mesh_net.py); a capture on the wire between them
sees WireGuard's UDP and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from compute.node import MESH_GCS_PORT, MESH_PORTS, MESH_RAY_PORTS, binding
from provider.mesh import HEAD, KEY_FILE, LISTEN_PORT, Coordinator, Interface, machine_key
from tests.mesh_net import Machine, Wire

PROVIDER = "0x" + "ab" * 20
TOKEN = "a cluster token of the site's own " + "0" * 16

START_HEAD = """
import json, sys
from pathlib import Path
from compute import cluster
from compute.node import RayHome
state = cluster.start(RayHome.of(Path(sys.argv[1])), cluster.ClusterSpec(
    providers=(sys.argv[2],), node_ip=sys.argv[3], dashboard=False, object_store_bytes=80 * 2**20))
print(json.dumps({"address": state.address}))
"""
JOIN = """
import json, sys
from pathlib import Path
from compute import node
joined = node.join(node.RayHome.of(Path(sys.argv[1])), sys.argv[2], node.NodeSpec(sys.argv[3]),
                   bound=node.binding(sys.argv[4]))
print(json.dumps({"node_id": joined.node_id}))
"""
DRIVE = """
import json, sys
from pathlib import Path
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from compute import cluster
from compute.node import RayHome
cluster.connect(RayHome.of(Path(sys.argv[1])), sys.argv[2])
nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
@ray.remote(num_cpus=1)
def payload():
    import socket
    return socket.gethostname(), ray.get_runtime_context().get_node_id(), b"gradients-7f3a" * (2**20 // 14)
name, ran_on, blob = ray.get(payload.options(
    scheduling_strategy=NodeAffinitySchedulingStrategy(sys.argv[3], soft=False)).remote())
print(json.dumps({"nodes": nodes, "ran_on": ran_on, "bytes": len(blob)}))
"""
STOP_HEAD = """
import sys
from pathlib import Path
from compute import cluster
from compute.node import RayHome
cluster.stop(RayHome.of(Path(sys.argv[1])))
"""


def python(machine: Machine, script: str, *args: str, timeout: float = 240) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
    done = subprocess.run([*machine.prefix, sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=Path(__file__).resolve().parents[1],
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def opens(src: Machine, address: str, port: int) -> bool:
    """Whether a TCP connection from `src` to `address`:`port` is accepted within 2 s."""
    probe = ("import socket, sys\ntry:\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
             "except OSError:\n    sys.exit(1)\n")
    return src.run(sys.executable, "-c", probe, address, str(port), check=False, timeout=20).returncode == 0


def test_a_node_on_another_machine_joins_the_sites_ray_over_the_mesh_and_its_work_comes_back_encrypted(
        tmp_path: Path) -> None:
    assert shutil.which("wireguard-go") and shutil.which("tcpdump"), "`make mesh` installs them"
    wire = Wire()
    homes = {HEAD: tmp_path / "head", "gpu-1": tmp_path / "gpu-1"}
    head, other = wire.machine(HEAD), wire.machine("gpu-1")
    try:
        for home in homes.values():
            (home / "ray").mkdir(parents=True)
            (home / "ray" / "auth_token").write_text(TOKEN)
            (home / "ray" / "auth_token").chmod(0o600)
        coordinator = Coordinator(homes[HEAD] / "site" / "mesh.json", TOKEN, machine_key(homes[HEAD]),
                                  f"{head.underlay}:{LISTEN_PORT}")
        joined = coordinator.join(TOKEN, "gpu-1", machine_key(homes["gpu-1"]),
                                  f"{other.underlay}:{LISTEN_PORT}")
        interfaces = {HEAD: Interface(f"wg{wire.tag}0", head.prefix),
                      "gpu-1": Interface(f"wg{wire.tag}1", other.prefix)}
        interfaces[HEAD].up(homes[HEAD] / KEY_FILE, coordinator.head.address, joined["network"], forward=True)
        interfaces["gpu-1"].up(homes["gpu-1"] / KEY_FILE, joined["address"], joined["network"])
        interfaces[HEAD].sync(coordinator.peers_of(coordinator.head.public_key))
        interfaces["gpu-1"].sync(joined["peers"])
        for interface in interfaces.values():  # as the head's mesh and a joining machine do
            interface.confine(MESH_RAY_PORTS)

        address = python(head, START_HEAD, str(homes[HEAD]), PROVIDER, coordinator.head.address)["address"]
        assert address.startswith(f"{coordinator.head.address}:"), "the head's GCS is on the mesh"
        node_id = python(other, JOIN, str(homes["gpu-1"]), address, PROVIDER, joined["address"])["node_id"]

        capture = wire.capture(60)
        time.sleep(1)
        ran = python(head, DRIVE, str(homes[HEAD]), address, node_id)
        capture.wait(timeout=90)
        seen = capture.stdout.read()

        assert ran["ran_on"] == node_id and ran["bytes"] >= 2**20 - 14, ran
        assert ran["nodes"][node_id] == joined["address"], "the joined node listens on its mesh address"
        assert set(ran["nodes"].values()) == {coordinator.head.address, joined["address"]}, ran["nodes"]
        bound = binding(joined["address"])
        assert MESH_PORTS <= bound.node_manager_port < bound.max_worker_port
        # Ray's servers listen on every interface of the machine: every port of theirs (all that
        # listens on this machine but its loopback) is one pinned for a mesh site, which the
        # machine's firewall keeps to the mesh.
        listening = other.run("ss", "-ltnpH", check=False).stdout
        rays = listening.splitlines()
        for port in (bound.node_manager_port, bound.object_manager_port):
            assert f":{port} " in listening, listening
        unpinned = [line for line in rays if not any(
            f"{ip}:{port} " in line for ip in ("*", "0.0.0.0", "[::]", joined["address"])
            for port in range(MESH_RAY_PORTS[0], MESH_RAY_PORTS[1] + 1)) and "127.0.0.1:" not in line]
        assert unpinned == [], unpinned
        for port in (bound.node_manager_port, bound.object_manager_port):
            assert not opens(head, other.underlay, port), f"port {port} answers on the wire, outside the mesh"
            assert opens(head, joined["address"], port), f"port {port} does not answer on the mesh"
        assert not opens(other, head.underlay, MESH_GCS_PORT) and opens(other, coordinator.head.address,
                                                                         MESH_GCS_PORT)
        # every packet between the machines (the link's own IGMP aside)
        packets = [line for line in seen.splitlines() if " IP 10.77.0." in line and "> 10.77.0." in line]
        assert len(packets) > 50, "the object crossed the wire"
        assert all(f".{LISTEN_PORT} " in line or f".{LISTEN_PORT}:" in line for line in packets), [
            line for line in packets if f".{LISTEN_PORT}" not in line][:5]
        assert "gradients-7f3a" not in seen and b"gradients-7f3a".hex() not in seen.replace(" ", "")
    finally:
        # The head's cluster stopped as a site stops it; the joined node's processes go with the
        # machine (wire.close stops what runs in each namespace).
        subprocess.run([*head.prefix, sys.executable, "-c", STOP_HEAD, str(homes[HEAD])], timeout=120,
                       capture_output=True, check=False, cwd=Path(__file__).resolve().parents[1])
        wire.close()
