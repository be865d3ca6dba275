"""The mesh between a site's machines (provider/mesh.py), on machines that network namespaces
stand in for (tests/mesh_net.py): real WireGuard interfaces (wireguard-go; this kernel has no
module), real packets on a bridge, the capture read byte by byte.

A head coordinates three machines: two that listen, one that only dials out. Each machine
makes its own key; the head knows public keys only. Every machine reaches every other over
the mesh, including the one behind NAT through the head; what crosses the wire is WireGuard
and never the plaintext; a removed machine is cut off; a rotated key keeps its address and the
old key stops working.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.mesh import (
    HEAD,
    KEY_FILE,
    LISTEN_PORT,
    Coordinator,
    Interface,
    Refused,
    machine_key,
    rotate_key,
)
from tests.mesh_net import Machine, Wire

SECRET = "the site's join secret"
PAYLOAD = "gradients-of-the-lease-7f3a"  # what must never cross the wire in the clear

SERVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); s.settimeout(20)
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.sendall(c.recv(1024)[::-1]); c.close()
"""
CALL = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
    c.sendall(sys.argv[3].encode()); print(c.recv(1024).decode())
except OSError as exc:
    print("unreachable", exc); sys.exit(1)
"""


def reached_within(src: Machine, address: str, seconds: float) -> bool:
    """Whether `src` reaches `address` before `seconds` have passed (a peer learns a change on its
    next refresh, and a handshake is retried every few seconds)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if reaches(src, address, timeout=2):
            return True
    return False


def reaches(src: Machine, address: str, port: int = 9000, timeout: float = 3.0) -> bool:
    """Whether `src` gets an answer over TCP from `address` (a listener started by `listening`)."""
    done = src.run(sys.executable, "-c", CALL, address, str(port), PAYLOAD, str(timeout), check=False,
                   timeout=timeout + 10)
    return done.returncode == 0 and done.stdout.strip() == PAYLOAD[::-1]


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[dict]:
    for tool in ("wireguard-go", "wg", "tcpdump"):
        assert shutil.which(tool), f"{tool} is missing: `make mesh` installs it"
    wire = Wire()
    machines = {name: wire.machine(name) for name in (HEAD, "gpu-1", "gpu-2", "gpu-3")}
    homes = {name: tmp_path / name for name in machines}
    interfaces = {name: Interface(f"wg{wire.tag}{i}", machines[name].prefix)
                  for i, name in enumerate(machines)}
    head = machines[HEAD]
    coordinator = Coordinator(tmp_path / "head" / "site" / "mesh.json", SECRET, machine_key(homes[HEAD]),
                              f"{head.underlay}:{LISTEN_PORT}")
    listens = {HEAD: True, "gpu-1": True, "gpu-2": True, "gpu-3": False}  # gpu-3 can only dial out
    addresses = {HEAD: coordinator.head.address}
    interfaces[HEAD].up(homes[HEAD] / KEY_FILE, addresses[HEAD], coordinator.state.network, forward=True)
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        endpoint = f"{machines[name].underlay}:{LISTEN_PORT}" if listens[name] else None
        joined = coordinator.join(SECRET, name, machine_key(homes[name]), endpoint)
        addresses[name] = joined["address"]
        interfaces[name].up(homes[name] / KEY_FILE, joined["address"], joined["network"],
                            LISTEN_PORT if listens[name] else None)
    state = {"wire": wire, "machines": machines, "homes": homes, "interfaces": interfaces,
             "coordinator": coordinator, "addresses": addresses, "listens": listens}
    refresh(state)
    servers = [m.popen(sys.executable, "-c", SERVE, addresses[n], "9000") for n, m in machines.items()]
    time.sleep(0.5)
    yield state
    for server in servers:
        server.kill()
    wire.close()


def refresh(state: dict) -> None:
    """Every machine asks the head for its peers and applies them, as its agent does on a timer."""
    coordinator = state["coordinator"]
    for name, interface in state["interfaces"].items():
        key = coordinator.state.peers[name].public_key if name in coordinator.state.peers else None
        if key is None:
            continue
        interface.sync(coordinator.peers(SECRET, key))


def test_every_machine_reaches_every_other_over_the_mesh_and_the_wire_carries_only_wireguard(mesh) -> None:
    machines, addresses = mesh["machines"], mesh["addresses"]
    assert [mesh["interfaces"][n].implementation for n in machines] == ["wireguard-go"] * 4
    capture = mesh["wire"].capture(25)
    time.sleep(1)
    unreached = [(a, b) for a in machines for b in machines
                 if a != b and not reaches(machines[a], addresses[b])]
    assert unreached == [], f"pairs that could not talk over the mesh: {unreached}"
    # Behind NAT, gpu-3 has no direct peer entry for... nothing it cannot dial: the others that
    # listen are direct, and the head carries what no one can dial.
    peers_of_3 = mesh["coordinator"].peers(SECRET, mesh["coordinator"].state.peers["gpu-3"].public_key)
    assert {p["name"] for p in peers_of_3} == {HEAD, "gpu-1", "gpu-2"}
    assert all(p["keepalive"] > 0 for p in peers_of_3), "it keeps its paths open from behind NAT"
    seen = capture.wait(timeout=40)
    # every packet between the machines (the link's own IGMP aside)
    packets = [line for line in seen.splitlines() if " IP 10.77.0." in line and "> 10.77.0." in line]
    assert packets, "the capture saw the traffic"
    assert all(f".{LISTEN_PORT} " in line or f".{LISTEN_PORT}:" in line for line in packets), [
        line for line in packets if f".{LISTEN_PORT}" not in line][:5]
    hex_payload = PAYLOAD.encode().hex()
    dumped = "".join(line.split(":", 1)[1].split("  ")[0].replace(" ", "")
                     for line in seen.splitlines() if line.strip().startswith("0x"))
    assert hex_payload not in dumped and PAYLOAD not in seen, "the payload never crossed the wire in clear"


def test_a_machines_private_key_stays_on_it_and_a_forged_join_is_refused(mesh, tmp_path: Path) -> None:
    coordinator, homes = mesh["coordinator"], mesh["homes"]
    for name, home in homes.items():
        private = (home / KEY_FILE).read_text().strip()
        assert (home / KEY_FILE).stat().st_mode & 0o777 == 0o600
        assert private not in coordinator.path.read_text(), f"the head holds no private key ({name})"
        derived = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True,
                                 check=True).stdout.strip()
        assert derived == coordinator.state.peers[name].public_key, "WireGuard's public key is the one joined"
    stranger_key = base64.b64encode(bytes(range(32))).decode()
    with pytest.raises(Refused, match="join secret is not this site's") as refused:
        coordinator.join("a guess", "gpu-9", stranger_key, None)
    assert refused.value.status == 403
    with pytest.raises(Refused, match="is machine gpu-1's already") as taken:
        coordinator.join(SECRET, "gpu-9", coordinator.state.peers["gpu-1"].public_key, None)
    assert taken.value.status == 409
    assert "gpu-9" not in coordinator.state.peers
    again = Coordinator(coordinator.path, SECRET, coordinator.head.public_key, coordinator.head.endpoint)
    assert again.state == coordinator.state, "a restarted head keeps its mesh"


def test_a_removed_machine_is_cut_off_and_a_rotated_key_keeps_its_address(mesh) -> None:
    machines, addresses, coordinator = mesh["machines"], mesh["addresses"], mesh["coordinator"]
    interfaces, homes = mesh["interfaces"], mesh["homes"]
    assert reaches(machines["gpu-1"], addresses[HEAD]) and reaches(machines[HEAD], addresses["gpu-1"])

    removed = coordinator.remove("gpu-1")
    interfaces[HEAD].sync(coordinator.peers_of(coordinator.head.public_key))  # the head, at once
    assert removed.public_key not in interfaces[HEAD].dump()
    assert not reaches(machines["gpu-1"], addresses[HEAD], timeout=2), "cut off from the head at once"
    with pytest.raises(Refused, match="not in the site's mesh") as out:
        coordinator.peers(SECRET, removed.public_key)
    assert out.value.status == 403
    refresh(mesh)  # the others drop it when they next ask
    assert not reaches(machines["gpu-2"], addresses["gpu-1"], timeout=2)
    assert reaches(machines["gpu-2"], addresses[HEAD]), "the rest of the mesh still works"

    old = coordinator.state.peers["gpu-2"].public_key
    new = rotate_key(homes["gpu-2"])
    rejoined = coordinator.join(SECRET, "gpu-2", new, f"{machines['gpu-2'].underlay}:{LISTEN_PORT}")
    assert new != old and rejoined["address"] == addresses["gpu-2"], "a new key, the same address"
    interfaces["gpu-2"].up(homes["gpu-2"] / KEY_FILE, rejoined["address"], rejoined["network"])
    refresh(mesh)
    assert old not in interfaces[HEAD].dump() and new in interfaces[HEAD].dump()
    assert reaches(machines["gpu-2"], addresses[HEAD]) and reaches(machines["gpu-3"], addresses["gpu-2"])
    with pytest.raises(Refused, match="not in the site's mesh"):
        coordinator.peers(SECRET, old)


# ── over the site's API, with the command line ─────────────────────────────────────────

HEAD_SERVER = """
import sys
from pathlib import Path

from provider.api import SiteParts, listen, make_app, serve
from provider.mesh import HeadMesh, Interface
from provider.identity import make_identity

home, (secret, endpoint, interface, host) = Path(sys.argv[1]), sys.argv[2:6]
head = HeadMesh(home, secret, endpoint, interface=Interface(interface))
identity = make_identity(home / "site", host)
listener = listen(host, 8443)
print(identity.fingerprint, flush=True)
# The site's API with its mesh; this test asks it nothing of leases, which need the chain and Ray.
nobody = "0x" + "00" * 20
serve(make_app(SiteParts(nobody, 31337, nobody, mesh=head)), listener, identity.certificate, identity.key)
"""


def mesh_interfaces(wire: Wire, machines: dict[str, Machine]) -> dict[str, Interface]:
    names = {HEAD: f"wg{wire.tag}h", "gpu-1": f"wg{wire.tag}m1", "gpu-2": f"wg{wire.tag}m2"}
    return {n: Interface(names[n], m.prefix) for n, m in machines.items()}


def swarm(machine: Machine, home: Path, *args: str, errors: Path | None = None) -> subprocess.Popen:
    """`swarm …` on `machine`, in its own SWARM_HOME (its standard error to `errors`, if given)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARM_", "RAY_"))}
    env["SWARM_HOME"] = str(home)
    return subprocess.Popen([*machine.prefix, sys.executable, "-m", "scripts.cli", *args], env=env,
                            stdout=subprocess.PIPE, text=True,
                            stderr=open(errors, "w") if errors else subprocess.PIPE)


def test_machines_join_with_the_command_line_over_the_sites_api_and_a_removal_reaches_every_peer(
        tmp_path: Path) -> None:
    import json

    wire = Wire()
    running: list[subprocess.Popen] = []
    try:
        machines = {name: wire.machine(name) for name in (HEAD, "gpu-1", "gpu-2")}
        homes = {name: tmp_path / name for name in machines}
        token = "the cluster's token, copied to each machine"
        for home in homes.values():
            (home / "ray").mkdir(parents=True)
            (home / "ray" / "auth_token").write_text(token + "\n")
        head = machines[HEAD]
        server = subprocess.Popen([*head.prefix, sys.executable, "-c", HEAD_SERVER, str(homes[HEAD]), token,
                                   f"{head.underlay}:{LISTEN_PORT}", f"wg{wire.tag}h", head.underlay],
                                  stdout=subprocess.PIPE, stderr=(tmp_path / "head.err").open("w"), text=True)
        running.append(server)
        assert server.stdout is not None
        fingerprint = server.stdout.readline().strip()
        assert len(fingerprint) == 64, (tmp_path / "head.err").read_text()
        url = f"https://{head.underlay}:8443"
        time.sleep(1.5)  # the server listens

        joined = {}
        for i, name in enumerate(("gpu-1", "gpu-2"), start=1):
            endpoint = [f"--endpoint={machines[name].underlay}:{LISTEN_PORT}"] if name == "gpu-1" else []
            member = swarm(machines[name], homes[name], "provider", "mesh", "join", url, "--fingerprint",
                           fingerprint, "--name", name, "--interface", f"wg{wire.tag}m{i}", *endpoint,
                           "--json", errors=tmp_path / f"{name}.err")
            running.append(member)
            assert member.stdout is not None
            printed = "".join(iter(member.stdout.readline, "}\n")) + "}"  # it stays, keeping its peers
            assert printed != "}", (tmp_path / f"{name}.err").read_text()
            joined[name] = json.loads(printed)
        assert joined["gpu-1"]["network"] == "10.231.0.0/16" and joined["gpu-2"]["address"] == "10.231.0.3"
        servers = [m.popen(sys.executable, "-c", SERVE, joined[n]["address"] if n != HEAD else "10.231.0.1",
                           "9000") for n, m in machines.items()]
        running += servers
        addresses = {HEAD: "10.231.0.1"} | {name: joined[name]["address"] for name in ("gpu-1", "gpu-2")}
        # gpu-1 learns gpu-2, which dials out, on its next refresh
        unreached = [(a, b) for a in machines for b in machines
                     if a != b and not reached_within(machines[a], addresses[b], 15)]
        assert unreached == [], (unreached, [(n, (tmp_path / f"{n}.err").read_text()[-2000:])
                                             for n in ("gpu-1", "gpu-2")],
                                 {n: i.dump() for n, i in mesh_interfaces(wire, machines).items()})

        listed = swarm(machines["gpu-2"], homes["gpu-2"], "provider", "mesh", "list", url, "--fingerprint",
                       fingerprint, "--json")
        machines_listed = json.loads(listed.communicate(timeout=30)[0])["machines"]
        assert {m["name"]: m["address"] for m in machines_listed} == addresses
        assert all("private" not in json.dumps(m) for m in machines_listed)

        (homes["gpu-2"] / "ray" / "auth_token").write_text("a guess\n")
        refused = swarm(machines["gpu-2"], homes["gpu-2"], "provider", "mesh", "list", url, "--fingerprint",
                        fingerprint)
        _, err = refused.communicate(timeout=30)
        assert refused.returncode == 1 and "join secret is not this site's" in err and "Traceback" not in err
        (homes["gpu-2"] / "ray" / "auth_token").write_text(token + "\n")

        old_key = (homes["gpu-2"] / KEY_FILE).read_text()
        rotated = swarm(machines["gpu-2"], homes["gpu-2"], "provider", "mesh", "join", url, "--fingerprint",
                        fingerprint, "--name", "gpu-2", "--interface", f"wg{wire.tag}m2", "--rotate",
                        "--once", "--json")
        printed, err = rotated.communicate(timeout=30)
        assert rotated.returncode == 0, err
        again = json.loads(printed)
        assert again["address"] == addresses["gpu-2"] and (homes["gpu-2"] / KEY_FILE).read_text() != old_key
        assert reaches(machines["gpu-2"], addresses[HEAD]), "the head knows the new key at once"
        assert reached_within(machines["gpu-1"], addresses["gpu-2"], 15), "the others on their next refresh"

        removal = swarm(machines["gpu-2"], homes["gpu-2"], "provider", "mesh", "remove", url, "--fingerprint",
                        fingerprint, "gpu-1", "--json")
        assert json.loads(removal.communicate(timeout=30)[0]) == {"removed": "gpu-1",
                                                                  "address": addresses["gpu-1"]}
        assert not reaches(machines["gpu-1"], addresses[HEAD], timeout=2), "the head dropped it at once"
        time.sleep(2.5)  # gpu-2's next refresh
        assert not reaches(machines["gpu-2"], addresses["gpu-1"], timeout=2), "and every peer after"
        assert reaches(machines["gpu-2"], addresses[HEAD])
    finally:
        for process in running:
            process.kill()
        wire.close()
