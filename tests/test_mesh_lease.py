"""A lease across two of a site's machines, over the site's mesh: network namespaces stand in for a
head and three machines (tests/mesh_net.py), each machine's Ray node joined to the head's over
WireGuard with its ports pinned, as a mesh site runs (they answer on the mesh and not on the
wire). The site's coordinator places the lease's two nodes on two machines; each node's sandbox
reaches the other over the lease's own link, which rides the mesh. A buyer's Ray Train script
trains with DDP across them; the wire carries WireGuard only; the lease cannot reach the site's
Ray head. Then the machine under the lease's second node is killed mid-run: the attempt ends
without a verdict, and the next one, placed on the machines left (the third stood by), resumes
from its checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from compute.jobs import ComputeJob
from compute.node import MESH_GCS_PORT, MESH_PORTS, MESH_RAY_PORTS, RayHome, auth_env, binding
from provider.lease import PLAN_ENV, PROJECT
from provider.lease.network import LINK_PORTS, node_address
from provider.lease.outcome import verdict
from provider.lease.plan import LeasePlan
from provider.mesh import HEAD, LISTEN_PORT
from tests.mesh_net import (
    JOIN,
    START_HEAD,
    STOP_HEAD,
    TOKEN,
    Machine,
    Wire,
    opens,
    python,
    site_mesh,
    wire_packets,
)
from tests.programs import RESUMING, pinned_code

PROVIDER = "0x" + "cd" * 20
SECRET_MARK = "weights-of-the-lease-91c2"  # crosses between the lease's nodes, never the wire in the clear
# The resuming script, and before it two things the lease tries: the site's Ray head (refused: the
# lease's network has no way there) and a task on its other node returning a marked payload.
PROBES = f'''
import os, socket, ray
def _reaches(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False
ray.init()
others = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] != ray.util.get_node_ip_address()]
@ray.remote(num_cpus=0)
def mark():
    return ray.util.get_node_ip_address(), "{SECRET_MARK}" * 20000
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
where, blob = ray.get(mark.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    others[0]["NodeID"], soft=False)).remote())
with open(os.path.join(os.environ["SWARM_OUTPUT_DIR"], "probes.json"), "a") as f:
    f.write(__import__("json").dumps({{"site_head": _reaches(os.environ["SITE_HEAD"], {MESH_GCS_PORT}),
                                       "marked_from": where, "marked_bytes": len(blob)}}) + "\\n")
'''


def _setup(wire: Wire, tmp_path: Path) -> dict:
    names = (HEAD, "m1", "m2", "m3")
    homes = {name: tmp_path / name for name in names}
    for home in homes.values():
        (home / "ray").mkdir(parents=True)
        (home / "ray" / "auth_token").write_text(TOKEN)
        (home / "ray" / "auth_token").chmod(0o600)
    machines, addresses = site_mesh(wire, names, homes, TOKEN, confine=MESH_RAY_PORTS)
    address = python(machines[HEAD], START_HEAD, str(homes[HEAD]), PROVIDER, addresses[HEAD])["address"]
    nodes = {name: python(machines[name], JOIN, str(homes[name]), address, PROVIDER,
                          addresses[name])["node_id"] for name in ("m1", "m2", "m3")}
    return {"machines": machines, "homes": homes, "addresses": addresses, "address": address, "nodes": nodes}


def _assert_ports_kept_to_the_mesh(site: dict) -> None:
    """A joined machine's Ray node listens on its pinned ports, which answer on the mesh and not
    on the wire: Ray's servers open every interface, the machine's firewall keeps them to the mesh."""
    head, other, address = site["machines"][HEAD], site["machines"]["m1"], site["addresses"]["m1"]
    bound = binding(address)
    assert MESH_PORTS <= bound.node_manager_port < bound.max_worker_port
    listening = other.run("ss", "-ltnpH", check=False).stdout
    for port in (bound.node_manager_port, bound.object_manager_port):
        assert f":{port} " in listening, listening
    unpinned = [line for line in listening.splitlines() if not any(
        f"{ip}:{port} " in line for ip in ("*", "0.0.0.0", "[::]", address)
        for port in range(MESH_RAY_PORTS[0], MESH_RAY_PORTS[1] + 1)) and "127.0.0.1:" not in line]
    assert unpinned == [], unpinned
    for port in (bound.node_manager_port, bound.object_manager_port):
        assert not opens(head, other.underlay, port), f"port {port} answers on the wire, outside the mesh"
        assert opens(head, address, port), f"port {port} does not answer on the mesh"
    assert not opens(other, head.underlay, MESH_GCS_PORT) and opens(other, site["addresses"][HEAD],
                                                                     MESH_GCS_PORT)


def _coordinator(site: dict, plan: LeasePlan, name: str) -> subprocess.Popen:
    env = auth_env(RayHome.of(site["homes"][HEAD])) | {PLAN_ENV: plan.encode(),
                                                       "RAY_ADDRESS": site["address"]}
    env = {k: v for k, v in env.items() if not (k.startswith("RAY_") and k not in (
        "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"))}
    head: Machine = site["machines"][HEAD]
    return subprocess.Popen([*head.prefix, sys.executable, "-m", "provider.lease.gang", name], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=PROJECT)


def test_a_lease_trains_across_two_machines_over_the_mesh_and_resumes_after_losing_one(
        tmp_path: Path) -> None:
    assert shutil.which("wireguard-go") and shutil.which("tcpdump"), "`make mesh` installs them"
    wire = Wire()
    site: dict = {}
    try:
        site = _setup(wire, tmp_path)
        _assert_ports_kept_to_the_mesh(site)
        program = {"entrypoint": "python probes.py && python main.py", "requirements": [], "ray": True,
                   "env": {"SITE_HEAD": site["addresses"][HEAD]},
                   "code": pinned_code(tmp_path, {"main.py": RESUMING, "probes.py": PROBES}), "inputs": {}}
        plan = LeasePlan(job_id=3, number=43, job=ComputeJob.of("job-3", "ray", PROVIDER, program), cpus=1,
                         gpus=0, memory_bytes=3 * 2**30, wall_seconds=540, max_units=4_000,
                         result=str(tmp_path / "results" / "job-3"), verdict_key="m" * 32, nodes=2,
                         shared=str(tmp_path / "shared" / "lease-3"))
        progress = Path(plan.shared) / "outputs" / "progress.jsonl"
        capture = wire.capture(360)  # until the lease has checkpointed twice (ended below)
        first = _coordinator(site, plan, "lease-3")
        placed: dict[int, str] = {}
        for line in first.stdout:  # type: ignore[union-attr]
            if line.startswith("node ") and " on the site's node " in line:
                placed[int(line.split()[1])] = line.split(" on the site's node ")[1].split()[0]
            if len(placed) == 2:
                break
        deadline = time.monotonic() + 300
        while not (progress.is_file() and len(progress.read_text().splitlines()) >= 2):
            assert time.monotonic() < deadline and first.poll() is None, "the lease never checkpointed"
            time.sleep(0.2)
        seen = capture.stop()

        # The machine under node 1 dies (under node 0, where node 1 is on the head's machine, whose
        # provider node the placement may take too): everything on it, its Ray node and the lease's
        # node with it.
        index, lost = next((i, name) for i in (1, 0) for name, node_id in site["nodes"].items()
                           if node_id == placed[i])
        wire.kill(site["machines"][lost])
        said, _ = first.communicate(timeout=180)
        assert verdict(said, plan.verdict_key) is None, said[-3000:]
        assert f"the lease lost node {index}" in said, said[-3000:]

        again = _coordinator(site, plan.but(attempt=2), "lease-3")
        done, _ = again.communicate(timeout=600)
        outcome = verdict(done, plan.verdict_key)
        assert outcome is not None and outcome.state == "succeeded", done[-5000:]
    finally:
        if site:
            subprocess.run([*site["machines"][HEAD].prefix, sys.executable, "-c", STOP_HEAD,
                            str(site["homes"][HEAD])], timeout=120, capture_output=True, check=False,
                           cwd=PROJECT)
        wire.close()

    outputs = tmp_path / "results" / "job-3" / "outputs"
    probes = [json.loads(line) for line in (outputs / "probes.json").read_text().splitlines()]
    assert all(not p["site_head"] for p in probes), "a lease's node reached the site's Ray head"
    assert all(p["marked_from"] == node_address(1) and p["marked_bytes"] > 400_000 for p in probes), probes
    # The machines listen on their wire, so the lease's own link crosses it directly, on its ports;
    # everything else between the machines is the mesh's. WireGuard both, nothing in the clear.
    packets = wire_packets(seen)
    linked = [p for p in packets if all(LINK_PORTS[0] <= port <= LINK_PORTS[1] for port in (p[1], p[3]))]
    assert len(linked) > 50, "the lease's nodes spoke across the wire on their link"
    assert all(p in linked or LISTEN_PORT in (p[1], p[3]) for p in packets), [
        p for p in packets if p not in linked and LISTEN_PORT not in (p[1], p[3])][:5]
    assert SECRET_MARK not in seen and SECRET_MARK.encode().hex() not in seen.replace(" ", "")
    epochs = [json.loads(line) for line in (outputs / "progress.jsonl").read_text().splitlines()]
    resumed = [e for e in epochs if e["from"] > 1]
    assert resumed and resumed[0]["from"] - 1 in [e["epoch"] for e in epochs if e["from"] == 1], epochs
    assert epochs[-1]["epoch"] == 8
