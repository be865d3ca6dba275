"""A mesh site as its operator runs it, end to end: `swarm provider serve --mesh-endpoint` on the
head machine and `swarm provider join --site` on two others, each machine a network namespace
on one wire (tests/mesh_net.py), the chain a real anvil the machines reach across that wire.
`join` brings the machine into the mesh with its own key and binds its Ray node to its mesh
address; one machine listens, the other can only dial out. Between the machines the wire
carries WireGuard and the site's HTTPS, never Ray. `leave` takes the machine's node and its
mesh down; a `join` the site refuses leaves nothing behind."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from devnet.network import ray_tmp
from ledger import stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import deploy, error_decoder
from ledger.tx import Sender
from ledger.units import ONE
from provider.lease.network import LINK_PORTS, host_of
from provider.mesh import HEAD, LISTEN_PORT, mesh_address, wire_host
from tests.mesh_net import (
    SITE_PORT,
    Machine,
    Wire,
    join_site_machine,
    mesh_interface,
    serve_mesh_site,
    swarm_on,
)
from tests.sites import stop_served
from tests.test_mesh import SERVE, reached_within
from wire.client import SiteAddress, SiteClient

PROVIDER = dev_account(1)


def _no_interface(machine: Machine) -> bool:
    return machine.run("ip", "link", "show", mesh_interface(machine), check=False).returncode != 0


def _alive(head: Machine, home: Path, rpc_url: str) -> dict[str, bool]:
    listed = swarm_on(head, home, rpc_url, "provider", "nodes", "--json")
    return {n["node_id"]: n["alive"] for n in json.loads(listed.stdout)["nodes"]}


def test_machines_join_a_served_mesh_site_with_one_command_and_leave_it(tmp_path: Path) -> None:
    assert shutil.which("wireguard-go") and shutil.which("tcpdump"), "`make mesh` installs them"
    wire = Wire()
    chain_node = None
    head_process = None
    homes = {name: tmp_path / name for name in (HEAD, "m1", "m2")}
    try:
        root = wire.host()
        machines = {name: wire.machine(name) for name in homes}
        chain_node = AnvilNode(AnvilConfig(home=tmp_path / "chain", host=root, port=free_port()))
        chain_node.start()
        rpc_url = chain_node.config.url
        chain = connect(rpc_url)
        deployed = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), homes[HEAD])
        swarm = Swarm(chain, deployed.deployment)
        sender = swarm.sender(PROVIDER.key)
        stake.register(swarm, sender, b"\x11" * 32, 1)
        stake.stake(swarm, sender, 1_000 * ONE)

        head = machines[HEAD]
        head_process, site = serve_mesh_site(head, homes[HEAD], rpc_url, 1, "--shared-dir",
                                             str(tmp_path / "shared"))
        url, fingerprint = site["url"], site["fingerprint"]
        assert url == f"https://{head.underlay}:{SITE_PORT}"

        # Bad input first: a site whose certificate is not the one given, and a join without a
        # name. Each is refused in one sentence, and leaves no interface and no node behind.
        m2 = (machines["m2"], homes["m2"], rpc_url)
        wrong = join_site_machine(*m2, site | {"fingerprint": "ab" * 32}, homes[HEAD], 1, listens=False)
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr, wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1 and "certificate" in wrong.stderr, wrong.stderr
        unnamed = swarm_on(*m2, "provider", "join", "--site", url, "--fingerprint", fingerprint,
                           "--account", "1")
        assert unnamed.returncode == 1 and "--mesh-name" in unnamed.stderr, unnamed.stderr
        assert _no_interface(machines["m2"]) and not (homes["m2"] / "ray" / "nodes").exists()

        joined = {}
        for name in ("m1", "m2"):  # m1 listens; m2 can only dial out
            done = join_site_machine(machines[name], homes[name], rpc_url, site, homes[HEAD], 1,
                                     listens=name == "m1")
            assert done.returncode == 0, done.stderr[-3000:]
            joined[name] = json.loads(done.stdout)
        mesh = {name: joined[name]["mesh"]["address"] for name in joined}
        assert joined["m1"]["head_address"].startswith("10.231.0.1:"), "the head's Ray, on the mesh"
        assert set(mesh.values()) == {"10.231.0.2", "10.231.0.3"}
        # A lease's own links listen on the wire of a machine that listens there, else on the mesh.
        assert host_of(homes["m1"], mesh["m1"]) == (machines["m1"].underlay, LINK_PORTS)
        assert host_of(homes[HEAD], "10.231.0.1") == (head.underlay, LINK_PORTS)
        assert host_of(homes["m2"], mesh["m2"]) == (mesh["m2"], None)

        listed = swarm_on(head, homes[HEAD], rpc_url, "provider", "nodes", "--json")
        nodes = {n["node_id"]: n for n in json.loads(listed.stdout)["nodes"]}
        for name in joined:
            node = nodes[joined[name]["node_id"]]
            assert node["alive"] and node["kind"] == "joined" and node["ip"] == mesh[name], node
        info = SiteClient(SiteAddress(PROVIDER.address, url, fingerprint), None, chain.chain_id,  # type: ignore[arg-type]
                          swarm.market.address).info()
        assert len(info["capacity"]["machines"]) == 3 and info["capacity"]["across_nodes"], info

        # m2 dials out only: m1, which joined first, learns its key from the head on its keeper's
        # next refresh, and m2 reaches m1 directly.
        listeners = [machines[n].popen(sys.executable, "-c", SERVE, mesh[n], "9000") for n in ("m1", "m2")]
        try:
            kept = homes["m1"] / "mesh" / "keeper.log"
            assert reached_within(machines["m1"], mesh["m2"], 20), kept.read_text()
            assert reached_within(machines["m2"], mesh["m1"], 20)
            # Between the machines, the wire carries WireGuard and the site's HTTPS; never Ray.
            capture = wire.capture(8)
            seen = capture.wait(timeout=60)
        finally:
            for listener in listeners:
                listener.kill()
        underlay = {m.underlay for m in machines.values()}
        between = []
        for line in seen.splitlines():
            parts = line.split()
            if len(parts) > 6 and parts[1] == "IP":
                source, target = parts[2].rsplit(".", 1), parts[4].rstrip(":").rsplit(".", 1)
                if source[0] in underlay and target[0] in underlay:
                    between.append((source[1], target[1], parts[5]))
        assert between, "Ray's heartbeats cross the wire, inside WireGuard"
        strays = [b for b in between if not {b[0], b[1]} & {str(LISTEN_PORT), str(SITE_PORT)}]
        assert strays == [], strays[:5]
        assert all(b[2] == "UDP," for b in between if str(LISTEN_PORT) in b[:2])

        left = swarm_on(*m2, "provider", "leave", "--account", "1", "--json")
        assert left.returncode == 0, left.stderr
        assert json.loads(left.stdout) | {"node_id": None} == {"provider": PROVIDER.address, "stopped": True,
                                                               "node_id": None,
                                                               "mesh_down": mesh_interface(machines["m2"])}
        assert _no_interface(machines["m2"]) and not (homes["m2"] / "mesh" / "keeper.json").exists()
        assert mesh_address(homes["m2"]) is None and wire_host(homes["m2"]) is None
        deadline = time.monotonic() + 60
        while _alive(head, homes[HEAD], rpc_url).get(joined["m2"]["node_id"]) and time.monotonic() < deadline:
            time.sleep(1)
        alive = _alive(head, homes[HEAD], rpc_url)
        assert not alive.get(joined["m2"]["node_id"]) and alive[joined["m1"]["node_id"]], alive
        still = swarm_on(machines["m1"], homes["m1"], rpc_url, "provider", "mesh", "list", url,
                         "--fingerprint", fingerprint, "--json")
        assert "m2" in {m["name"] for m in json.loads(still.stdout)["machines"]}, "until `mesh remove`"
    finally:  # the machines' processes (nodes, keepers, WireGuard) end with their namespaces
        if head_process is not None:
            stop_served(head_process)
        if chain_node is not None:
            chain_node.stop()
        wire.close()
        for home in homes.values():
            shutil.rmtree(ray_tmp(home), ignore_errors=True)
