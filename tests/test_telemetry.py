"""Liveness probes on a real Ray cluster: every live provider answers with its node's clock
and an honest GPU snapshot; a provider whose node is gone is recorded as down within the
timeout, never waited on.

The GPUs expected are this host's, read independently of the code under test: the kernel's
device nodes and torch's CUDA count for NVML's snapshot, and that snapshot, taken here, for what
a probe reports from a node of the local cluster (every node of it runs on this host, so NVML
sees the same GPUs there whatever the node declares to Ray)."""

from __future__ import annotations

import glob
import os
import re
import time

from anvil import dev_account
from compute.nvml import DeviceReading, GpuSnapshot, gpu_snapshot, reading_from_raw
from compute.placement import provider_nodes
from compute.telemetry import NO_LIVE_NODE, probe, probe_all
from tests.ray_cluster import PROVIDER_A, PROVIDER_B, PROVIDER_C

PROVIDER_D = dev_account(4).address  # joins for one test, then loses its only node


def _gpu_device_files() -> int:
    """GPUs the kernel exposes (/dev/nvidia0, /dev/nvidia1, ...), independent of NVML."""
    return len([p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)])


def _identities(snapshot: GpuSnapshot) -> list[tuple[int, str, float | None]]:
    """What does not change between two readings of the same GPUs: index, name and memory."""
    return [(d.index, d.name, d.memory_total_mb) for d in snapshot.devices]


def test_gpu_snapshot_reports_this_machines_gpus_and_invents_none() -> None:
    import torch

    snapshot = gpu_snapshot()
    assert snapshot.gpus == _gpu_device_files()
    if torch.cuda.is_available() and "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert snapshot.gpus == torch.cuda.device_count()
    assert len(snapshot.devices) == snapshot.gpus
    if snapshot.gpus == 0:  # a machine without GPUs: NVML cannot start, and the snapshot says why
        assert snapshot.devices == []
        assert snapshot.error is not None and "NVML" in snapshot.error
    else:
        assert snapshot.error is None
    for device in snapshot.devices:
        assert device.name and device.memory_total_mb is not None and device.memory_total_mb > 0


def test_raw_nvml_units_become_mebibytes_and_watts() -> None:
    reading = reading_from_raw(0, b"NVIDIA H100 80GB HBM3", 87, 40 * 1024**3, 80 * 1024**3, 64, 312_500)
    assert reading == DeviceReading(0, "NVIDIA H100 80GB HBM3", 87.0, 40_960.0, 81_920.0, 64.0, 312.5)
    unsupported = reading_from_raw(1, "Tesla T4", 0, 0, 15 * 1024**3, None, None)
    assert (unsupported.temperature_c, unsupported.power_w) == (None, None)


def test_probe_of_each_live_provider_answers_from_its_own_node(ray_cluster) -> None:
    host = gpu_snapshot()
    before = time.time()
    results = probe_all([PROVIDER_A, PROVIDER_B, PROVIDER_C], timeout_s=60)
    after = time.time()
    for provider, result in zip((PROVIDER_A, PROVIDER_B, PROVIDER_C), results, strict=True):
        assert result.provider == provider
        assert result.alive, result.error
        assert result.node_id in {n["NodeID"] for n in provider_nodes(provider)}
        assert result.stamp is not None and before <= result.stamp <= after
        assert 0 < result.latency_s <= after - before
        assert result.gpu is not None
        assert (result.gpu.gpus, _identities(result.gpu)) == (host.gpus, _identities(host))


def test_probe_of_a_dead_node_records_downtime_within_the_timeout(ray_cluster) -> None:
    node = ray_cluster.add_node(PROVIDER_D)
    ray_cluster.cluster.wait_for_nodes()
    joined = probe(PROVIDER_D, timeout_s=60)
    assert joined.alive and joined.node_id == node.node_id

    ray_cluster.remove_node(node)
    down, live = probe_all([PROVIDER_D, PROVIDER_A], timeout_s=5)  # bench/failfast.py times the give-up

    assert not down.alive and down.node_id is None and down.stamp is None and down.gpu is None
    assert down.error
    assert live.alive  # one dead provider does not hold up the others

    deadline = time.monotonic() + 60  # once the head has marked the node dead, nothing is sent
    while provider_nodes(PROVIDER_D) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert probe(PROVIDER_D, timeout_s=60).error == NO_LIVE_NODE


def test_probe_of_a_provider_that_never_joined_is_down_without_sending_a_task(ray_cluster) -> None:
    result = probe(dev_account(5).address, timeout_s=2)
    assert not result.alive and result.error == NO_LIVE_NODE and result.latency_s == 0.0
