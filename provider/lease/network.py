"""A lease's own network, for a lease across nodes (docs/architecture.md §4).

Each node of such a lease runs in a sandbox whose network namespace holds a loopback and one
WireGuard interface of the lease's own, and nothing else. The interface is made in the
machine's namespace, where its UDP socket stays, and is then moved into the lease's namespace,
so what the sandbox sends leaves only through it. Its UDP socket listens on the machine's own
network where the machine listens there (it joined the mesh with an endpoint): the lease's
packets then cross between machines encrypted once, by the link, not a second time by the mesh
(what that saves DDP: BENCHMARKS.md). A machine behind NAT is reached over the mesh, and nodes
on one machine over the loopback. Its peers are the lease's other nodes alone, each allowed its
own address: WireGuard's routing by key drops anything to any other address, so the lease reaches
neither the site's Ray, nor the machine, nor another lease, and only the holders of its nodes'
keys (made here, on each machine, for this attempt, and never shown to the lease) reach it. No
process in the sandbox can change the interface: it has no capabilities.

Every lease has the same small network (`LEASE_NETWORK`; node i at its (i+1)th address), since
no two leases share a namespace. A node's link is opened in two steps, so the nodes can learn
each other's keys and ports through the site: `LeaseLink.open` makes the key, the interface and
the namespace and says where its UDP socket listens; `LeaseLink.connect` sets the peers, moves
the interface into the namespace and brings it up.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.mesh import Interface, MeshError, key_at, wire_host

LEASE_NETWORK = ipaddress.ip_network("10.232.0.0/24")
# The link's name inside a node's namespace, the same on every node: what a lease's collectives
# (gloo, NCCL's sockets) are told to use (`SOCKET_ENV`), rather than the address its host name has.
INTERFACE = "lease0"
SOCKET_ENV = {"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE}
# A link whose packets cross the machines' own network (MTU 1500) carries 1420 bytes, less 80 of
# WireGuard's own (IPv6 outer header, UDP, its header and tag), as the mesh does; one whose
# packets travel inside the mesh (a node behind NAT), 80 bytes less again, so none is split in two.
WIRE_MTU = 1420
LINK_MTU = WIRE_MTU - 80
# A link on a machine's own network listens on the first free UDP port of this range, which the
# operator opens between the site's machines (docs/operations.md).
LINK_PORTS = (51821, 51999)
KEY = "link.key"  # a node's private key, in its lease directory on its machine (the site's side)
LINK = "link"  # a node's link there (its interface, its namespace's holder), so a later attempt on
# the machine removes one left behind


def node_address(index: int) -> str:
    """Node `index`'s address in its lease's network (node 0 runs the lease's Ray head)."""
    return str(LEASE_NETWORK.network_address + index + 1)


@dataclass
class LeaseLink:
    """Node `index`'s end of a lease's network: interface `name`, and the namespace held by
    process `holder` (a `sleep` that only keeps it; the sandbox enters it by that process)."""

    name: str
    index: int
    directory: Path  # the node's lease directory on this machine
    holder: int = 0

    @property
    def netns(self) -> Path:
        return Path(f"/proc/{self.holder}/ns/net")

    @property
    def address(self) -> str:
        return node_address(self.index)

    @classmethod
    def open(cls, directory: Path, index: int, host: str,
             ports: tuple[int, int] | None = None) -> tuple[LeaseLink, dict[str, Any]]:
        """Makes node `index`'s key, interface and namespace; `host` is this machine's address the
        other nodes reach it at (see `host_of`), its UDP socket on the first free port of `ports`,
        or any. Returns the link and what the other nodes need of it: its index, public key and
        endpoint."""
        directory.mkdir(parents=True, exist_ok=True)
        remove_left(directory)
        link = cls("swl" + secrets.token_hex(4), index, directory)
        key_file = directory / KEY
        key_file.unlink(missing_ok=True)
        public = key_at(key_file)  # fresh for each attempt
        try:
            link.holder = _hold_namespace()
            (directory / LINK).write_text(json.dumps({"name": link.name, "holder": link.holder}))
            port = Interface(link.name).make(key_file, ports)
        except (MeshError, OSError):
            link.close()
            raise
        return link, {"index": index, "public_key": public, "endpoint": f"{host}:{port}",
                      "wire": ports is not None}

    def connect(self, nodes: list[dict[str, Any]]) -> None:
        """Makes the lease's other nodes (as `open` described them) this link's only peers, and
        moves the interface into the lease's namespace, up at this node's address: at the wire's
        MTU when every other node is reached across the machines' wire, else the mesh's."""
        interface = Interface(self.name)
        others = [n for n in nodes if n["index"] != self.index]
        interface.sync([{"public_key": n["public_key"], "endpoint": n["endpoint"],
                         "allowed_ips": [f"{node_address(n['index'])}/32"]} for n in others])
        mtu = WIRE_MTU if all(n.get("wire") for n in others) else LINK_MTU
        # Moved, the interface loses its address and state: both are set again inside.
        _ip("link", "set", self.name, "netns", str(self.holder))
        inside = ("nsenter", f"--net={self.netns}", "--")
        _ip("link", "set", self.name, "name", INTERFACE, prefix=inside)
        _ip("address", "add", f"{self.address}/{LEASE_NETWORK.prefixlen}", "dev", INTERFACE, prefix=inside)
        _ip("link", "set", INTERFACE, "mtu", str(mtu), "up", prefix=inside)
        _ip("link", "set", "lo", "up", prefix=inside)

    def close(self) -> None:
        """Ends the namespace (and the interface in it, once its sandbox has ended too), the
        interface if it was never moved, and the key."""
        close_link(self.name, self.holder)
        (self.directory / KEY).unlink(missing_ok=True)
        (self.directory / LINK).unlink(missing_ok=True)


def host_of(home: Path, node_ip: str) -> tuple[str, tuple[int, int] | None]:
    """Where the other nodes reach a node's link on this machine, and the ports it may listen
    on: the machine's own network and `LINK_PORTS` where it listens there (its mesh endpoint's
    host), else its Ray node's address (`node_ip`: its mesh address on a mesh site) on any port."""
    wire = wire_host(home)
    return (wire, LINK_PORTS) if wire else (node_ip, None)


def close_link(name: str, holder: int) -> None:
    if holder and _is_holder(holder):
        os.kill(holder, signal.SIGKILL)
    subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
    # wireguard-go ends with its interface; one whose interface is gone but still runs is stopped
    subprocess.run(["pkill", "-f", f"^wireguard-go {name}$"], capture_output=True, check=False)
    # and one that ended with its namespace leaves its control socket behind, under its first name
    Path("/var/run/wireguard", f"{name}.sock").unlink(missing_ok=True)


def remove_left(directory: Path) -> None:
    """Removes the link an earlier attempt on this machine left behind (its launcher was killed)."""
    left = directory / LINK
    try:
        found = json.loads(left.read_text())
        close_link(str(found["name"]), int(found["holder"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    left.unlink(missing_ok=True)


HOLD = ("unshare", "--net", "--", "sleep", "infinity")


def _hold_namespace() -> int:
    """A new network namespace, held by a process of its own (its own session, so nothing that
    stops a lease's processes ends it before its link is closed, and killed with the process
    that made it, so a node whose launcher died leaves no namespace): the holder's pid."""
    holder = subprocess.Popen(HOLD, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True,
                              preexec_fn=_die_with_maker)  # noqa: PLW1509 - only a prctl, before exec
    ours = os.stat("/proc/self/ns/net").st_ino
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{holder.pid}/ns/net").st_ino != ours and _is_holder(holder.pid):
                return holder.pid
        except FileNotFoundError:
            break
        time.sleep(0.01)
    holder.kill()
    raise MeshError("this machine could not make a network namespace for the lease (`unshare --net`).")


def _die_with_maker() -> None:
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _is_holder(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"infinity"]
    except OSError:
        return False


def _ip(*args: str, prefix: tuple[str, ...] = ()) -> None:
    done = subprocess.run([*prefix, "ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise MeshError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()[-300:]}")
