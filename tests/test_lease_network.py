"""A lease's own network across nodes (provider/lease/network.py), on machines that network
namespaces stand in for (tests/mesh_net.py), joined by the site's mesh: each node of a lease is a
real sandbox (bubblewrap, the lease's own user) in a namespace of the lease's, whose only way
out is the lease's WireGuard link to its other nodes.

Hostile attempts, each from inside a lease's sandbox: reaching the site's Ray head, the
machine's own addresses, the wire, another lease's nodes; and from outside: the machine
reaching into the lease, a stranger's key sent to a node's port. Each fails; the lease's two
nodes reach each other, and the wire carries the mesh's WireGuard only."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute.node import MESH_GCS_PORT
from provider.lease.network import (
    INTERFACE,
    LEASE_NETWORK,
    LINK_MTU,
    LINK_PORTS,
    WIRE_MTU,
    host_of,
    node_address,
)
from provider.lease.sandbox import Limits, Sandbox, lease_uid
from provider.mesh import HEAD, LISTEN_PORT, machine_key
from tests.mesh_net import Machine, Wire, site_mesh, wire_packets

pytestmark = pytest.mark.light  # no Ray: sandboxes and sockets

SECRET = "the site's join secret"
# The leases' numbers, whose users run their sandboxes: far from those a site's leases take (1, 2,
# ...), whose processes count against the same per-user limit when both run at once.
LEASE_A, LEASE_B = 7101, 7102
PAYLOAD = "allreduce-buckets-5e1d"  # what must never cross the wire in the clear
# A node's end, opened, connected and closed by one process, as a node's actor keeps it: the
# namespace of a link lives as long as the process that made it.
NODE = """
import json, sys
from pathlib import Path
from provider.lease.network import LeaseLink
ports = tuple(int(p) for p in sys.argv[4].split("-")) if sys.argv[4] else None
link, described = LeaseLink.open(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], ports)
print(json.dumps({"name": link.name, "holder": link.holder, **described}), flush=True)
link.connect(json.loads(sys.stdin.readline()))
print("connected", flush=True)
sys.stdin.readline()
link.close()
"""
SERVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); s.settimeout(float(sys.argv[3]))
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.recv(1024); c.sendall(sys.argv[2].encode()); c.close()
"""
CALL = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    c.sendall(sys.argv[4].encode()); print("answer:" + c.recv(1024).decode())
except OSError as exc:
    print("failed:", exc)
"""


def link_mtu(node: dict) -> int:
    """The MTU of a node's link, as its namespace has it."""
    import subprocess

    shown = subprocess.run(["nsenter", f"--net=/proc/{node['holder']}/ns/net", "ip", "-o", "link", "show",
                            INTERFACE], capture_output=True, text=True, check=True).stdout
    return int(shown.split(" mtu ")[1].split()[0])


def python(machine: Machine, script: str, *args: str) -> str:
    done = machine.run(sys.executable, "-c", script, *args, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def site(tmp_path: Path) -> Iterator[dict]:
    """A head and two machines on the site's mesh, and two leases with a node on each machine."""
    for tool in ("wireguard-go", "wg", "bwrap", "nsenter"):
        assert shutil.which(tool), f"{tool} is missing: `make mesh` and `make system-packages` install it"
    wire = Wire()
    leases: dict[str, list[dict]] = {}
    try:
        yield _build(wire, tmp_path, leases)
    finally:
        for nodes in leases.values():
            for node in nodes:
                close(node)
        wire.close()
    left = [n["name"] for nodes in leases.values() for n in nodes
            if Path("/var/run/wireguard", f"{n['name']}.sock").exists()]
    assert left == [], f"links closed but their WireGuard control sockets left: {left}"


def open_node(machine: Machine, directory: Path, index: int, host: str,
              ports: tuple[int, int] | None = None) -> dict:
    """A node's end of a lease's network, opened on `machine` by a process that keeps it."""
    keeper = machine.popen_io(sys.executable, "-c", NODE, str(directory), str(index), host,
                              "-".join(map(str, ports)) if ports else "")
    assert keeper.stdout is not None and keeper.stderr is not None
    line = keeper.stdout.readline()
    assert line, keeper.stderr.read()[-2000:]
    return json.loads(line) | {"keeper": keeper, "directory": directory, "index": index}


def connect(node: dict, nodes: list[dict]) -> None:
    keeper = node["keeper"]
    described = [{k: n[k] for k in ("index", "public_key", "endpoint", "wire") if k in n} for n in nodes]
    keeper.stdin.write(json.dumps(described) + "\n")
    keeper.stdin.flush()
    assert keeper.stdout.readline().strip() == "connected", keeper.stderr.read()[-2000:]


def close(node: dict) -> None:
    keeper = node["keeper"]
    if keeper.poll() is None:
        keeper.stdin.write("close\n")
        keeper.stdin.flush()
        keeper.wait(timeout=30)


def _build(wire: Wire, tmp_path: Path, leases: dict[str, list[dict]]) -> dict:
    """Lease a's links where a site puts them on machines that listen on their wire (`host_of`:
    the wire, `LINK_PORTS`); lease b's over the mesh, as for machines behind NAT."""
    homes = {name: tmp_path / name for name in (HEAD, "m1", "m2")}
    machines, addresses = site_mesh(wire, (HEAD, "m1", "m2"), homes, SECRET)
    for lease in ("a", "b"):
        nodes: list[dict] = []
        leases[lease] = nodes
        for index, name in enumerate(("m1", "m2")):
            directory = homes[name] / "site" / "leases" / f"{lease}.node{index}"
            host, ports = host_of(homes[name], addresses[name]) if lease == "a" else (addresses[name], None)
            nodes.append(open_node(machines[name], directory, index, host, ports))
        for node in nodes:
            connect(node, nodes)
    return {"wire": wire, "machines": machines, "addresses": addresses, "leases": leases, "tmp": tmp_path}


def sandbox(state: dict, node: dict, number: int) -> Sandbox:
    work = state["tmp"] / "work" / node["name"]
    return Sandbox(work, Limits(memory_bytes=512 * 2**20, max_processes=64, wall_seconds=60),
                   lease_uid=lease_uid(number), netns=Path(f"/proc/{node['holder']}/ns/net"))


def serve(state: dict, node: dict, number: int, port: int, marker: str,
          seconds: float = 25) -> threading.Thread:
    argv = [sys.executable, "-c", SERVE, str(port), marker, str(seconds)]
    thread = threading.Thread(target=sandbox(state, node, number).run, args=(argv,), daemon=True)
    thread.start()
    time.sleep(1.0)
    return thread


def call(state: dict, node: dict, number: int, address: str, port: int, timeout: float = 3) -> str:
    argv = [sys.executable, "-c", CALL, address, str(port), str(timeout), PAYLOAD]
    done = sandbox(state, node, number).run(argv)
    assert done.stdout.strip(), done.stderr[-2000:]
    return done.stdout.strip()


def test_a_leases_nodes_reach_each_other_over_its_link_and_nothing_else(site) -> None:
    a, b = site["leases"]["a"], site["leases"]["b"]
    capture = site["wire"].capture(12)
    time.sleep(0.5)
    serve(site, a[1], LEASE_A, 7000, "lease-a-node-1")
    serve(site, b[1], LEASE_B, 7000, "lease-b-node-1")
    assert call(site, a[0], LEASE_A, node_address(1), 7000) == "answer:lease-a-node-1"
    # The same address in lease b's network is lease b's own node: a's is not there to reach.
    assert call(site, b[0], LEASE_B, node_address(1), 7000) == "answer:lease-b-node-1"
    seen = capture.wait(timeout=30)
    packets = wire_packets(seen)
    wire = {site["machines"][name].underlay for name in ("m1", "m2")}
    links = {int(n["endpoint"].rsplit(":", 1)[1]) for n in a}
    assert all(n["endpoint"].rsplit(":", 1)[0] in wire for n in a), "lease a's links listen on the wire"
    assert all(LINK_PORTS[0] <= port <= LINK_PORTS[1] for port in links), links
    direct = [p for p in packets if {p[0], p[2]} == wire and {p[1], p[3]} == links]
    meshed = [p for p in packets if LISTEN_PORT in (p[1], p[3])]
    assert direct and meshed, "lease a crossed the wire on its links' ports, lease b inside the mesh"
    # so lease a's links carry the wire's MTU, lease b's the mesh's less WireGuard's own 80 bytes
    assert {link_mtu(n) for n in a} == {WIRE_MTU} and {link_mtu(n) for n in b} == {LINK_MTU}
    assert len(direct) + len(meshed) == len(packets), [p for p in packets if p not in direct + meshed][:5]
    assert PAYLOAD not in seen and PAYLOAD.encode().hex() not in seen.replace(" ", "")

    # From inside lease a: the site's Ray head, the machines' mesh and wire addresses, any other
    # address of the lease's network than its nodes' — none is reachable.
    addresses = site["addresses"]
    targets = [(addresses[HEAD], MESH_GCS_PORT), (addresses["m1"], 22), (addresses["m2"], LISTEN_PORT),
               (site["machines"]["m2"].underlay, 7000), ("127.0.0.53", 53),
               (str(LEASE_NETWORK.network_address + 9), 7000)]
    for address, port in targets:
        assert call(site, a[0], LEASE_A, address, port, timeout=2).startswith("failed:"), (address, port)


def test_nothing_outside_the_lease_reaches_its_nodes(site) -> None:
    a = site["leases"]["a"]
    serve(site, a[1], LEASE_A, 7001, "lease-a-node-1", seconds=20)
    machines = site["machines"]
    # The machines themselves (the site's Ray, another process there) have no way into the lease.
    for name in ("m1", "m2", HEAD):
        out = python(machines[name], CALL, node_address(1), "7001", "2", PAYLOAD)
        assert out.strip().startswith("failed:"), (name, out)
    # A stranger's key at the node's port: WireGuard answers no handshake it cannot authenticate.
    stranger = site["tmp"] / "stranger"
    forged = open_node(machines["m1"], stranger, 0, site["addresses"]["m1"])
    target = next(n for n in a if n["index"] == 1)
    try:
        connect(forged, [forged, {"index": 1, "public_key": machine_key(site["tmp"] / "forged"),
                                  "endpoint": target["endpoint"]}])
        assert call(site, forged, LEASE_A + 2, node_address(1), 7001, timeout=4).startswith("failed:")
    finally:
        close(forged)
