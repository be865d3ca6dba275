"""Machines for the mesh's tests: network namespaces joined by veth to one bridge (the wire),
each with an address on it, as separate machines on one network would be."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_PROJECT = Path(__file__).resolve().parents[1]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Machine:
    name: str
    ns: str
    underlay: str  # its address on the wire

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]

    def run(self, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=timeout,
                              check=check)

    def popen_io(self, *args: str) -> subprocess.Popen:
        """A process on the machine that is talked to: its stdin, stdout and stderr are pipes."""
        return subprocess.Popen([*self.prefix, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)


class Capture:
    """A packet capture written to a file as it runs, never to a pipe: a pipe nobody reads until
    the end fills after a few hundred packets, and tcpdump then stops taking them in."""

    def __init__(self, command: list[str]) -> None:
        self.out = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed once read
        self.process = subprocess.Popen(command, stdout=self.out, stderr=subprocess.DEVNULL, text=True)

    def wait(self, timeout: float) -> str:
        """What it saw, once its time is up."""
        self.process.wait(timeout=timeout)
        return self._seen()

    def stop(self) -> str:
        """What it saw, stopped now."""
        self.process.terminate()
        self.process.wait(timeout=30)
        return self._seen()

    def _seen(self) -> str:
        self.out.seek(0)
        seen = self.out.read()
        self.out.close()
        return seen


def wire_packets(seen: str) -> list[tuple[str, int, str, int]]:
    """The packets a capture saw between the machines' wire addresses: source, port, destination, port."""
    import re

    return [(m[1], int(m[2]), m[3], int(m[4])) for m in re.finditer(
        r" IP (10\.77\.0\.\d+)\.(\d+) > (10\.77\.0\.\d+)\.(\d+):", seen)]


@dataclass
class Wire:
    """A bridge in a namespace of its own, and the machines plugged into it."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    machines: list[Machine] = field(default_factory=list)
    host_link: str | None = None

    def __post_init__(self) -> None:
        self.ns = f"swire-{self.tag}"
        _ip("netns", "add", self.ns)
        _ip("-n", self.ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.ns, "link", "set", "br0", "up")

    def machine(self, name: str) -> Machine:
        index = len(self.machines) + 1
        ns, inside, outside = f"sw{self.tag}-{name}", f"v{self.tag}{index}", f"w{self.tag}{index}"
        _ip("netns", "add", ns)
        _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
        _ip("link", "set", inside, "netns", ns)
        _ip("link", "set", outside, "netns", self.ns)
        _ip("-n", ns, "link", "set", inside, "name", "eth0")
        _ip("-n", ns, "address", "add", f"10.77.0.{index}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.ns, "link", "set", outside, "master", "br0")
        _ip("-n", self.ns, "link", "set", outside, "up")
        machine = Machine(name, ns, f"10.77.0.{index}")
        self.machines.append(machine)
        return machine

    def host(self) -> str:
        """Plugs this machine's own network in too, at 10.77.0.254 (a chain node bound there is
        the machines' chain, as one on the internet would be; the test reaches their sites)."""
        outside, inside = f"w{self.tag}0", f"r{self.tag}0"
        _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
        _ip("link", "set", outside, "netns", self.ns)
        _ip("address", "add", "10.77.0.254/24", "dev", inside)
        _ip("link", "set", inside, "up")
        _ip("-n", self.ns, "link", "set", outside, "master", "br0")
        _ip("-n", self.ns, "link", "set", outside, "up")
        self.host_link = inside
        return "10.77.0.254"

    def capture(self, count_s: float) -> Capture:
        """tcpdump on the bridge for `count_s` seconds: every packet between the machines, each
        with its bytes in hex."""
        return Capture(["ip", "netns", "exec", self.ns, "timeout", str(count_s), "tcpdump", "-i", "br0",
                        "-n", "-l", "-X", "-U"])

    def kill(self, machine: Machine) -> None:
        """The machine dies: every process running in it is killed at once (its WireGuard too)."""
        pids = subprocess.run(["ip", "netns", "pids", machine.ns], capture_output=True, text=True,
                              check=False).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-KILL", pid], capture_output=True, check=False)

    def close(self) -> None:
        """Stops what runs in the machines (wireguard-go removes its control socket when asked
        to stop) and removes them and the wire."""
        for signal in ("TERM", "KILL"):
            for machine in self.machines:
                pids = subprocess.run(["ip", "netns", "pids", machine.ns], capture_output=True, text=True,
                                      check=False).stdout.split()
                for pid in pids:
                    subprocess.run(["kill", f"-{signal}", pid], capture_output=True, check=False)
            time.sleep(0.3)
        for machine in self.machines:
            subprocess.run(["ip", "netns", "del", machine.ns], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)
        if self.host_link:  # its peer went with the wire's namespace, which usually takes it too
            subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)


def site_mesh(wire: Wire, names: tuple[str, ...], homes: dict[str, Path], secret: str,
              confine: tuple[int, int] | None = None) -> tuple[dict[str, Machine], dict[str, str]]:
    """Machines `names` (the first the head) on the wire, joined into a site's mesh as the head's
    coordinator admits them, each listening at its wire address (which its home records, as
    `mesh join` does); with `confine`, each keeps that range of ports to the mesh. Returns the
    machines and their mesh addresses."""
    from provider.mesh import KEY_FILE, LISTEN_PORT, Coordinator, Interface, machine_key, record_address

    machines = {name: wire.machine(name) for name in names}
    head, *others = names
    coordinator = Coordinator(homes[head] / "site" / "mesh.json", secret, machine_key(homes[head]),
                              f"{machines[head].underlay}:{LISTEN_PORT}")
    addresses = {head: coordinator.head.address}
    interfaces = {name: Interface(f"wg{wire.tag}{i}", machine.prefix)
                  for i, (name, machine) in enumerate(machines.items())}
    interfaces[head].up(homes[head] / KEY_FILE, addresses[head], coordinator.state.network, forward=True)
    for name in others:
        endpoint = f"{machines[name].underlay}:{LISTEN_PORT}"
        joined = coordinator.join(secret, name, machine_key(homes[name]), endpoint)
        addresses[name] = joined["address"]
        interfaces[name].up(homes[name] / KEY_FILE, joined["address"], joined["network"])
    for name, interface in interfaces.items():
        key = coordinator.head.public_key if name == head else coordinator.state.peers[name].public_key
        interface.sync(coordinator.peers_of(key))
        if confine is not None:
            interface.confine(confine)
        record_address(homes[name], addresses[name], f"{machines[name].underlay}:{LISTEN_PORT}")
    return machines, addresses


# ── a mesh site as its operator runs it: `serve --mesh-endpoint` and `join --site` ──────────

SITE_PORT = 8443


def machine_env(home: Path, rpc_url: str) -> dict[str, str]:
    """A machine's environment for `swarm`: its own SWARM_HOME and Ray sessions directory."""
    from devnet.network import ray_tmp

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARM_", "RAY_"))}
    ray_tmp(home).mkdir(exist_ok=True)
    return env | {"SWARM_HOME": str(home), "SWARM_RPC_URL": rpc_url, "RAY_TMPDIR": str(ray_tmp(home))}


def swarm_on(machine: Machine, home: Path, rpc_url: str, *args: str,
             timeout: float = 240) -> subprocess.CompletedProcess:
    """`swarm ARGS` run on `machine` in its `home`, to its end."""
    return subprocess.run([*machine.prefix, sys.executable, "-m", "scripts.cli", *args],
                          env=machine_env(home, rpc_url), capture_output=True, text=True, timeout=timeout,
                          check=False)


def serve_mesh_site(machine: Machine, home: Path, rpc_url: str, account: int,
                    *options: str) -> tuple[subprocess.Popen, dict]:
    """`swarm provider serve --mesh-endpoint` on `machine` (the head), listening on its wire
    address, its standard error to `home`/serve.log; the process and what it printed once it
    served (its URL and fingerprint)."""
    import sys

    from provider.mesh import LISTEN_PORT
    from tests.sites import served

    home.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [*machine.prefix, sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", str(account),
         "--host", machine.underlay, "--port", str(SITE_PORT), "--mesh-endpoint",
         f"{machine.underlay}:{LISTEN_PORT}", *options, "--json"],
        env=machine_env(home, rpc_url), stdout=subprocess.PIPE, stderr=(home / "serve.log").open("a"),
        text=True, start_new_session=True)
    return process, served(process, home / "serve.log")


def mesh_interface(machine: Machine) -> str:
    """The name of `machine`'s mesh interface: one of its own on this host, where wireguard-go's
    control sockets (/var/run/wireguard/NAME.sock) are shared by every namespace (the head's is
    `swarm0`, what `serve` names it)."""
    return f"wg{machine.ns[2:8]}{machine.name}"[:15]


def join_site_machine(machine: Machine, home: Path, rpc_url: str, site: dict, head_home: Path, account: int,
                      listens: bool = True) -> subprocess.CompletedProcess:
    """`swarm provider join --site` on `machine`, with a copy of the head's token; `listens`:
    with a mesh endpoint of its own, else as a machine behind NAT. Its interface is
    `mesh_interface(machine)`."""
    import shutil

    from provider.mesh import LISTEN_PORT

    (home / "ray").mkdir(parents=True, exist_ok=True)
    (home / "ray" / "auth_token").write_text((head_home / "ray" / "auth_token").read_text())
    (home / "ray" / "auth_token").chmod(0o600)
    shutil.copytree(head_home / "deployments", home / "deployments", dirs_exist_ok=True)
    endpoint = [f"--mesh-endpoint={machine.underlay}:{LISTEN_PORT}"] if listens else []
    return swarm_on(machine, home, rpc_url, "provider", "join", "--site", site["url"], "--fingerprint",
                    site["fingerprint"], "--mesh-name", machine.name, "--interface", mesh_interface(machine),
                    *endpoint, "--account", str(account), "--json")


# ── a site's Ray on mesh machines, as the tests drive it ───────────────────────────────────

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
STOP_HEAD = """
import sys
from pathlib import Path
from compute import cluster
from compute.node import RayHome
cluster.stop(RayHome.of(Path(sys.argv[1])))
"""


def python(machine: Machine, script: str, *args: str, timeout: float = 240) -> dict:
    """`script` run by Python on `machine`; what it printed last, as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
    done = subprocess.run([*machine.prefix, sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=_PROJECT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def opens(src: Machine, address: str, port: int) -> bool:
    """Whether a TCP connection from `src` to `address`:`port` is accepted within 2 s."""
    probe = ("import socket, sys\ntry:\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
             "except OSError:\n    sys.exit(1)\n")
    return src.run(sys.executable, "-c", probe, address, str(port), check=False, timeout=20).returncode == 0
