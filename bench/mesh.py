"""The mesh's cost on the wire: TCP throughput between two machines over WireGuard
(`provider.mesh`, wireguard-go: this kernel has no module) against the same two over plain veth.

Run: make bench-mesh   (or .venv/bin/python bench/mesh.py --runs 5 --seconds 5)

Two network namespaces stand in for the machines (tests/mesh_net.py: veth to one bridge); a head
coordinates them as a site's does, and iperf3 (Debian's) sends one TCP stream for `--seconds`
from one to the other, first to the other's address on the wire, then to its mesh address.
Medians of `--runs`; on this 2-core machine wireguard-go's encryption and the iperf3 processes
share the same two cores, which a site's separate machines would not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provider.mesh import HEAD, KEY_FILE, LISTEN_PORT, Coordinator, Interface, machine_key
from tests.mesh_net import Wire

RESULTS = Path(__file__).resolve().parent / "results" / "mesh.json"


def throughput(client, server_address: str, seconds: int) -> float:
    """Gbit/s of one TCP stream from `client` to the iperf3 server at `server_address`."""
    done = client.run("iperf3", "-c", server_address, "-t", str(seconds), "-J", timeout=seconds + 30)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    wire = Wire()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            head, other = wire.machine(HEAD), wire.machine("gpu-1")
            homes = {HEAD: Path(tmp) / "head", "gpu-1": Path(tmp) / "gpu-1"}
            coordinator = Coordinator(homes[HEAD] / "mesh.json", "secret", machine_key(homes[HEAD]),
                                      f"{head.underlay}:{LISTEN_PORT}")
            joined = coordinator.join("secret", "gpu-1", machine_key(homes["gpu-1"]),
                                      f"{other.underlay}:{LISTEN_PORT}")
            interfaces = {HEAD: Interface(f"wg{wire.tag}0", head.prefix),
                          "gpu-1": Interface(f"wg{wire.tag}1", other.prefix)}
            interfaces[HEAD].up(homes[HEAD] / KEY_FILE, coordinator.head.address, joined["network"])
            interfaces["gpu-1"].up(homes["gpu-1"] / KEY_FILE, joined["address"], joined["network"])
            interfaces[HEAD].sync(coordinator.peers_of(coordinator.head.public_key))
            interfaces["gpu-1"].sync(joined["peers"])
            server = head.popen("iperf3", "-s")
            time.sleep(0.5)
            try:
                veth, mesh = [], []
                throughput(other, head.underlay, 1)  # warm-up, and the handshake
                throughput(other, coordinator.head.address, 1)
                for _ in range(args.runs):
                    veth.append(throughput(other, head.underlay, args.seconds))
                    mesh.append(throughput(other, coordinator.head.address, args.seconds))
            finally:
                server.kill()
            implementation = interfaces[HEAD].implementation
    finally:
        wire.close()
    result = {
        "implementation": implementation,
        "seconds": args.seconds,
        "veth_gbps": veth,
        "mesh_gbps": mesh,
        "veth_median_gbps": statistics.median(veth),
        "mesh_median_gbps": statistics.median(mesh),
        "ratio": statistics.median(mesh) / statistics.median(veth),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
