"""The mesh between a site's machines: WireGuard, one interface a machine, coordinated by the
site's head (docs/architecture.md §4).

Every machine makes its own key pair (`machine_key`), kept in its `$SWARM_HOME/mesh/` and
never sent anywhere: it presents its public key, with the site's join secret, to the head's
`Coordinator`, which gives it an address in the mesh's network and the list of its peers
(`Coordinator.join`), and later tells it the list as it changes (`Coordinator.peers`). The
machine applies that list to its interface (`Interface.sync`). A machine that gives no
endpoint can only dial out (it is behind NAT): it dials every peer that has one and keeps
the path open, and it reaches the other machines behind NAT through the head, which forwards
between them. A machine joins again under its name with a new key to rotate it (its address
stays), and the head removes a machine from its own interface at once when it is removed; the
others drop it when they next ask for their peers.

The interface is the kernel's WireGuard where the kernel has it, else `wireguard-go` (Debian's
package), with `wg` and `ip` to configure it. Ray's servers open their ports on every interface;
a machine of a mesh site lets Ray's ports (pinned: `compute.node.binding`) be reached through
the mesh and the loopback only, with an nftables table of its own (`Interface.confine`).
`Interface` runs those commands, optionally inside a network namespace (how the tests give each
machine a network of its own).
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from compute.errors import ComputeError
from compute.node import MESH_RAY_PORTS
from core.errors import Refused
from wire.client import SiteAddress, SiteUnreachable, pinned_request

NETWORK = "10.231.0.0/16"  # a site's mesh, unless it chooses another
LISTEN_PORT = 51820
KEEPALIVE_S = 25  # how often a machine behind NAT keeps its paths open
KEY_FILE = Path("mesh") / "private.key"  # under the machine's SWARM_HOME
ADDRESS_FILE = Path("mesh") / "address"  # this machine's address in its site's mesh, once it joined
ENDPOINT_FILE = Path("mesh") / "endpoint"  # where it listens on its own network, if it does (not NAT'd)
HEAD = "head"  # the coordinating machine's name in its mesh
FIREWALL_TABLE = "swarm_mesh"  # the nftables table that keeps Ray's ports to the mesh
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_ENDPOINT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")

log = logging.getLogger(__name__)


class MeshError(ComputeError):
    """The mesh cannot be set up as asked: the sentence says what to do."""


# ── keys ────────────────────────────────────────────────────────────────────────────

def machine_key(home: Path) -> str:
    """This machine's public key, its private key made first where it has none: a file only its
    owner reads, which nothing sends anywhere."""
    return key_at(home / KEY_FILE)


def key_at(path: Path) -> str:
    """The public key of the private key in file `path`, made first (mode 0600) where there is none."""
    if not path.is_file():
        _write_key(path, replace=False)
    return public_key(path.read_text().strip())


def _write_key(path: Path, replace: bool) -> None:
    """A new private key at `path`, which appears whole or not at all: another process reading
    the file (a member refreshing its peers while the machine rotates) never sees half a key.
    Without `replace`, a key another process made first is kept."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    raw = X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(base64.b64encode(raw).decode() + "\n")
        if replace:
            os.replace(staged, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def public_key(private: str) -> str:
    """The WireGuard public key of a private key, both base64 (X25519, as `wg pubkey`)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = X25519PrivateKey.from_private_bytes(base64.b64decode(private))
    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def mesh_address(home: Path) -> str | None:
    """This machine's address in its site's mesh, if it has joined one (or is its head)."""
    path = home / ADDRESS_FILE
    return path.read_text().strip() if path.is_file() else None


def wire_host(home: Path) -> str | None:
    """The host at which this machine's site reaches it on its own network, not the mesh (its
    mesh endpoint's, as it joined or serves the mesh); None for a machine behind NAT, or off a mesh."""
    path = home / ENDPOINT_FILE
    if not path.is_file():
        return None
    return path.read_text().strip().rsplit(":", 1)[0] or None


def record_address(home: Path, address: str, endpoint: str | None) -> None:
    """Keeps this machine's mesh address, and its endpoint on its own network (None: behind NAT)."""
    path = home / ADDRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(address + "\n")
    if endpoint:
        (home / ENDPOINT_FILE).write_text(endpoint + "\n")
    else:
        (home / ENDPOINT_FILE).unlink(missing_ok=True)


def forget_address(home: Path) -> None:
    """This machine left its mesh: neither its address nor its endpoint is kept."""
    (home / ADDRESS_FILE).unlink(missing_ok=True)
    (home / ENDPOINT_FILE).unlink(missing_ok=True)


def rotate_key(home: Path) -> str:
    """A new key pair for this machine, the old one gone; its new public key. The file is
    replaced in one step, so the machine has a key at every moment."""
    _write_key(home / KEY_FILE, replace=True)
    return machine_key(home)


def _is_key(value: Any) -> bool:
    try:
        return isinstance(value, str) and len(base64.b64decode(value, validate=True)) == 32
    except ValueError:
        return False


# ── the coordinator, on the head ────────────────────────────────────────────────────

@dataclass(frozen=True)
class Peer:
    """A machine of the mesh as every other machine sees it."""

    name: str
    public_key: str
    address: str  # in the mesh's network
    endpoint: str | None = None  # host:port where it listens; None: it only dials out


@dataclass
class _State:
    network: str
    peers: dict[str, Peer] = field(default_factory=dict)  # name → peer, the head among them

    def to_json(self) -> str:
        peers = [asdict(p) for p in self.peers.values()]
        return json.dumps({"network": self.network, "peers": peers}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> _State:
        raw = json.loads(text)
        return cls(raw["network"], {p["name"]: Peer(**p) for p in raw["peers"]})


class Coordinator:
    """The head's register of its site's mesh: who is in it, at which address, reachable where.
    It knows public keys only. Kept in `path` (JSON), so a restarted head keeps its mesh."""

    def __init__(self, path: Path, secret: str, head_key: str, head_endpoint: str,
                 network: str = NETWORK) -> None:
        self.path, self.secret = path, secret
        if path.is_file():
            self.state = _State.from_json(path.read_text())
        else:
            net = ipaddress.ip_network(network)
            self.state = _State(str(net), {HEAD: Peer(HEAD, head_key, str(net[1]), head_endpoint)})
            self._save()
        head = self.state.peers[HEAD]
        if (head.public_key, head.endpoint) != (head_key, head_endpoint):  # the head's key or address moved
            self.state.peers[HEAD] = Peer(HEAD, head_key, head.address, head_endpoint)
            self._save()

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.state.network)

    @property
    def head(self) -> Peer:
        return self.state.peers[HEAD]

    def join(self, secret: str, name: str, key: str, endpoint: str | None) -> dict[str, Any]:
        """Admits machine `name` with its public `key` (listening at `endpoint`, or behind NAT
        with None) and answers its address and peers. The same name with a new key rotates it:
        the old key is out at once, the address stays."""
        self.check_secret(secret)
        if not _NAME.match(name) or name == HEAD:
            raise Refused(400, f"A machine's name is 1-32 lowercase letters, digits and dashes, not {HEAD!r} "
                               f"(got {name!r}).")
        if not _is_key(key):
            raise Refused(400, "A machine's public key is 32 bytes in base64, as `wg pubkey` prints it.")
        if endpoint is not None and not _endpoint_ok(endpoint):
            raise Refused(400, f"An endpoint is HOST:PORT where the machine listens (got {endpoint!r}); give "
                               "none for a machine that can only dial out.")
        if endpoint is not None and not _resolves(endpoint):  # else every sync of the head's would fail
            host = endpoint.rsplit(":", 1)[0]
            raise Refused(400, f"The endpoint's host {host!r} does not resolve at the head; give its "
                               "address, or a name the head resolves.")
        holder = next((p for p in self.state.peers.values() if p.public_key == key), None)
        if holder is not None and holder.name != name:
            raise Refused(409, f"That public key is machine {holder.name}'s already; every machine makes its "
                               "own.")
        known = self.state.peers.get(name)
        address = known.address if known is not None else self._free_address()
        self.state.peers[name] = Peer(name, key, address, endpoint)
        self._save()
        return {"address": address, "network": self.state.network, "peers": self.peers_of(key)}

    def remove(self, name: str) -> Peer:
        """Takes machine `name` out of the mesh (the head's own interface drops it with `sync`)."""
        peer = self.state.peers.get(name)
        if peer is None or name == HEAD:
            known = ", ".join(sorted(n for n in self.state.peers if n != HEAD)) or "none"
            raise Refused(404, f"The mesh has no machine {name!r} to remove (its machines: {known}).")
        del self.state.peers[name]
        self._save()
        return peer

    def peers(self, secret: str, key: str) -> list[dict[str, Any]]:
        """What the machine with public `key` configures now; refused once it is out."""
        self.check_secret(secret)
        if not any(p.public_key == key for p in self.state.peers.values()):
            raise Refused(403, "This machine is not in the site's mesh (removed, or its key rotated); join "
                               "again.")
        return self.peers_of(key)

    def peers_of(self, key: str) -> list[dict[str, Any]]:
        """The WireGuard peers of the machine with public `key`: every machine that listens,
        directly; a machine behind NAT directly where this one listens (it dials in), and
        through the head where neither listens."""
        me = next(p for p in self.state.peers.values() if p.public_key == key)
        through_head: list[str] = []
        wired: list[dict[str, Any]] = []
        for peer in self.state.peers.values():
            if peer.name == me.name:
                continue
            if peer.endpoint is None and me.endpoint is None and peer.name != HEAD:
                through_head.append(f"{peer.address}/32")
                continue
            wired.append({"name": peer.name, "public_key": peer.public_key, "address": peer.address,
                          "allowed_ips": [f"{peer.address}/32"], "endpoint": peer.endpoint,
                          "keepalive": KEEPALIVE_S if me.endpoint is None else 0})
        for entry in wired:
            if entry["name"] == HEAD:
                entry["allowed_ips"] += through_head
        return wired

    def _free_address(self) -> str:
        taken = {p.address for p in self.state.peers.values()}
        for host in self.network.hosts():
            if str(host) not in taken:
                return str(host)
        raise Refused(507, f"The mesh's network {self.state.network} has no free address left.")

    def check_secret(self, secret: str) -> None:
        if not hmac.compare_digest(secret.encode(), self.secret.encode()):
            raise Refused(403, "The join secret is not this site's; copy it from the head's $SWARM_HOME.")

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(self.state.to_json())
        os.replace(tmp, self.path)


def _endpoint_ok(endpoint: str) -> bool:
    found = _ENDPOINT.match(endpoint)
    return found is not None and 0 < int(found.group("port")) < 65536


def _resolves(endpoint: str) -> bool:
    """Whether the endpoint's host is an address, or a name this machine resolves, as `wg` must to
    configure the peer."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return True


# ── a machine's interface ───────────────────────────────────────────────────────────

class Interface:
    """One machine's WireGuard interface `name`, its commands run after `prefix` (`ip netns exec
    NS` for a namespace; nothing on a machine of its own)."""

    def __init__(self, name: str, prefix: Sequence[str] = ()) -> None:
        if not re.match(r"^[A-Za-z0-9_-]{1,15}$", name):
            raise MeshError(f"An interface's name is 1-15 letters, digits, '_' or '-' (got {name!r}).")
        self.name, self.prefix = name, list(prefix)
        self.implementation: str | None = None

    def up(self, key_file: Path, address: str, network: str, listen_port: int | None = LISTEN_PORT,
           forward: bool = False) -> str:
        """Brings the interface up at `address` in `network`, listening on `listen_port` (None:
        a port the system picks, for a machine that only dials out); `forward` lets it carry
        traffic between its peers (the head's). Returns which WireGuard runs it."""
        if not self._exists():
            self.implementation = self._create()
        self._run("wg", "set", self.name, "private-key", str(key_file),
                  *(("listen-port", str(listen_port)) if listen_port else ()))
        prefix = ipaddress.ip_network(network).prefixlen
        self._run("ip", "address", "replace", f"{address}/{prefix}", "dev", self.name)
        self._run("ip", "link", "set", self.name, "up")
        if forward:
            self._run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        return self.implementation or "existing"

    def make(self, key_file: Path, ports: tuple[int, int] | None = None) -> int:
        """Makes the interface with the key in `key_file`, with no address yet (a lease's link,
        moved into its namespace before it has one), listening on the first free port of `ports`
        (first, last), or where the system picks: the port."""
        if not self._exists():
            self.implementation = self._create()
        self._run("wg", "set", self.name, "private-key", str(key_file))
        if ports is not None:
            for port in range(ports[0], ports[1] + 1):
                try:
                    self._run("wg", "set", self.name, "listen-port", str(port))
                    return port
                except MeshError as exc:
                    if "in use" not in str(exc):
                        raise
            raise MeshError(f"Every UDP port from {ports[0]} to {ports[1]} is taken on this machine; a "
                            "lease's link needs one.")
        return int(self._run("wg", "show", self.name, "listen-port").strip())

    def sync(self, peers: list[dict[str, Any]]) -> None:
        """Makes the interface's peers exactly `peers` (as `Coordinator.peers_of` gives them):
        those no longer listed are removed, so a removed machine is cut off here at once."""
        wanted = {p["public_key"]: p for p in peers}
        for key in set(self.dump()) - set(wanted):
            self._run("wg", "set", self.name, "peer", key, "remove")
        for key, peer in wanted.items():
            args = ["wg", "set", self.name, "peer", key, "allowed-ips", ",".join(peer["allowed_ips"])]
            if peer.get("endpoint"):
                args += ["endpoint", peer["endpoint"]]
            args += ["persistent-keepalive", str(peer.get("keepalive") or 0)]
            self._run(*args)

    def confine(self, ports: tuple[int, int]) -> None:
        """Lets the TCP ports `ports` (first, last: Ray's on a mesh site, which Ray's servers open on
        every interface) be reached through this interface and the loopback only: an nftables
        table of Swarm's own, replaced whole each time."""
        first, last = ports
        # Only a connection's opening (SYN without ACK) is refused, so the replies to this machine's
        # own connections out pass whatever their port; and the range is kept out of the ports the
        # system hands connections out, so no connection out takes a port Ray is to listen on.
        rules = (f"table inet {FIREWALL_TABLE}\ndelete table inet {FIREWALL_TABLE}\n"
                 f"table inet {FIREWALL_TABLE} {{\n  chain input {{\n"
                 "    type filter hook input priority 0; policy accept;\n"
                 f'    iifname "lo" accept\n    iifname "{self.name}" accept\n'
                 f"    tcp dport {first}-{last} tcp flags & (syn | ack) == syn drop\n  }}\n}}\n")
        self._run("sysctl", "-q", "-w", f"net.ipv4.ip_local_reserved_ports={first}-{last}")
        self._run("nft", "-f", "-", stdin=rules)

    def dial(self, peers: list[dict[str, Any]]) -> None:
        """Starts a handshake with each peer that listens now, rather than at its next keepalive:
        what a machine behind NAT does on joining or with a new key, so that the machines that
        cannot dial it learn its path as soon as they know its key (WireGuard retries a handshake
        every few seconds until it is answered). Turning the keepalive on sends one at once."""
        for peer in peers:
            if peer.get("endpoint") and peer.get("keepalive"):
                self._run("wg", "set", self.name, "peer", peer["public_key"], "persistent-keepalive", "0")
                self._run("wg", "set", self.name, "peer", peer["public_key"], "persistent-keepalive",
                          str(peer["keepalive"]))

    def dump(self) -> dict[str, dict[str, Any]]:
        """The interface's peers: public key → endpoint, allowed IPs and last handshake (unix s)."""
        lines = self._run("wg", "show", self.name, "dump").splitlines()[1:]  # the first: the interface's own
        found = {}
        for line in lines:
            key, _psk, endpoint, allowed, handshake, *_ = line.split("\t")
            found[key] = {"endpoint": None if endpoint == "(none)" else endpoint,
                          "allowed_ips": [] if allowed == "(none)" else allowed.split(","),
                          "handshake": int(handshake)}
        return found

    def down(self) -> None:
        if self._exists():
            self._run("ip", "link", "delete", self.name)
        subprocess.run([*self.prefix, "nft", "delete", "table", "inet", FIREWALL_TABLE], capture_output=True,
                       check=False)  # none, where it confined nothing

    def _exists(self) -> bool:
        shown = subprocess.run([*self.prefix, "ip", "link", "show", self.name], capture_output=True,
                               check=False)
        return shown.returncode == 0

    def _create(self) -> str:
        """The kernel's WireGuard where it has one, else wireguard-go (which makes the interface
        and serves it from a process of its own)."""
        kernel = subprocess.run([*self.prefix, "ip", "link", "add", self.name, "type", "wireguard"],
                                capture_output=True, check=False)
        if kernel.returncode == 0:
            return "kernel"
        try:
            done = subprocess.run([*self.prefix, "wireguard-go", self.name], capture_output=True, text=True,
                                  timeout=30, check=False)
        except FileNotFoundError:
            raise MeshError("This machine's kernel has no WireGuard and wireguard-go is not installed; "
                            "install Debian's wireguard-go and wireguard-tools (`make mesh`).") from None
        deadline = time.monotonic() + 5
        while not self._exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._exists():
            why = done.stderr.strip()[-300:]
            raise MeshError(f"wireguard-go could not make interface {self.name}: {why}")
        return "wireguard-go"

    def _run(self, *args: str, stdin: str | None = None) -> str:
        try:
            done = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=30,
                                  check=False, input=stdin)
        except FileNotFoundError:
            raise MeshError(f"{args[0]} is not installed; install Debian's wireguard-tools, nftables and "
                            "iproute2 (`make mesh`).") from None
        if done.returncode != 0:
            raise MeshError(f"`{' '.join(args)}` failed: {done.stderr.strip()[-300:]}")
        return done.stdout


# ── the head's side and a machine's, over the site's API ────────────────────────────

INTERFACE = "swarm0"  # a machine's mesh interface, unless told another
POLL_S = 2.0  # how often a machine asks the head for its peers


class HeadMesh:
    """The head's mesh: its coordinator and its own interface, kept in step, so a machine
    joined or removed is in or out of the head's interface as the request returns. The site's
    API calls it from several threads at once: one request at a time reads or changes it."""

    def __init__(self, home: Path, secret: str, endpoint: str, network: str = NETWORK,
                 interface: Interface | None = None) -> None:
        if not _endpoint_ok(endpoint):
            raise MeshError(f"The head's mesh endpoint is HOST:PORT where the machines reach it (got "
                            f"{endpoint!r}).")
        key = machine_key(home)
        self.coordinator = Coordinator(home / "site" / "mesh.json", secret, key, endpoint, network)
        self.interface = interface or Interface(INTERFACE)
        self.interface.up(home / KEY_FILE, self.coordinator.head.address, self.coordinator.state.network,
                          listen_port=int(endpoint.rsplit(":", 1)[1]), forward=True)
        record_address(home, self.coordinator.head.address, endpoint)
        self.interface.confine(MESH_RAY_PORTS)
        self._lock = threading.Lock()
        self.sync()

    def sync(self) -> None:
        self.interface.sync(self.coordinator.peers_of(self.coordinator.head.public_key))

    def join(self, secret: str, name: str, key: str, endpoint: str | None) -> dict[str, Any]:
        with self._lock:
            answer = self.coordinator.join(secret, name, key, endpoint)
            self.sync()
            return answer

    def peers(self, secret: str, key: str) -> list[dict[str, Any]]:
        """What the machine with public `key` configures now (`Coordinator.peers`)."""
        with self._lock:
            return self.coordinator.peers(secret, key)

    def remove(self, secret: str, name: str) -> Peer:
        with self._lock:
            self.coordinator.check_secret(secret)
            removed = self.coordinator.remove(name)
            self.sync()
            return removed

    def machines(self, secret: str) -> list[dict[str, Any]]:
        with self._lock:
            self.coordinator.check_secret(secret)
            return [asdict(p) for p in self.coordinator.state.peers.values()]


class MeshMember:
    """A machine of the site: it joins the head's mesh over the site's API (HTTPS pinned to the
    site's certificate) with its own key, and keeps its interface's peers as the head lists them."""

    def __init__(self, home: Path, site: SiteAddress, secret: str, name: str, endpoint: str | None,
                 interface: Interface | None = None) -> None:
        self.home, self.site, self.secret, self.name, self.endpoint = home, site, secret, name, endpoint
        self.interface = interface or Interface(INTERFACE)
        self.address: str | None = None
        self.accepted: str | None = None  # the public key the head last answered

    def join(self) -> dict[str, Any]:
        """Joins (again, after a rotation) and brings the interface up with the head's answer."""
        key = machine_key(self.home)
        answer = self._call("/v1/mesh/join", {"name": self.name, "public_key": key,
                                              "endpoint": self.endpoint})
        self.accepted = key
        port = int(self.endpoint.rsplit(":", 1)[1]) if self.endpoint else None
        self.interface.up(self.home / KEY_FILE, answer["address"], answer["network"], listen_port=port)
        self.interface.confine(MESH_RAY_PORTS)
        self.interface.sync(answer["peers"])
        self.interface.dial(answer["peers"])
        self.address = answer["address"]
        record_address(self.home, answer["address"], self.endpoint)
        return answer

    def refresh(self) -> list[dict[str, Any]]:
        key = machine_key(self.home)
        peers = self._call("/v1/mesh/peers", {"public_key": key})["peers"]
        self.accepted = key
        self.interface.sync(peers)
        return peers

    def machines(self) -> dict[str, Any]:
        """The mesh's network and its machines, as the head lists them."""
        return self._call("/v1/mesh/machines", {})

    def remove(self, name: str) -> dict[str, Any]:
        """Asks the head to cut machine `name` off the mesh."""
        return self._call("/v1/mesh/remove", {"name": name})

    def keep(self, stop: threading.Event, poll_s: float = POLL_S) -> None:
        """Applies the head's list every `poll_s` until `stop` is set; a head that does not answer
        is asked again, and one that says this machine is out ends it. A key rotated meanwhile
        (`mesh join --rotate` in another process) is asked with again: the head may not know it
        yet."""
        while not stop.wait(poll_s):
            try:
                self.refresh()
            except SiteUnreachable as exc:
                log.warning("the head did not answer (%s); asking again", exc)
                continue
            except Refused as exc:
                if exc.status == 403 and machine_key(self.home) != self.accepted:
                    log.info("this machine's key was rotated; asking with the new key")
                    continue
                if exc.status == 403:  # out of the mesh: it keeps no path to any machine
                    self.interface.sync([])
                raise

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body | {"secret": self.secret}).encode()
        headers = {"Content-Type": "application/json"}
        status, payload, _ = pinned_request(self.site, "POST", path, raw, headers)
        try:
            answer = json.loads(payload)
        except ValueError:
            answer = {}
        if status != 200:
            raise Refused(status, str(answer.get("error") if isinstance(answer, dict) else "")
                          or f"The site answered {path} with HTTP {status}.")
        return answer
