"""Liveness probes: a small task pinned to a provider's nodes returns the node's clock and
a GPU snapshot. A provider with no live node in the cluster (gone, or never joined) is
recorded as down at once; one whose nodes do not answer within the timeout (dead, not yet
noticed by the head) is recorded as down when it runs out; a probe never waits longer than
its timeout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import ray

from compute.nvml import GpuSnapshot, gpu_snapshot
from compute.placement import providers_in_cluster, task_options

# Liveness must not queue behind a provider's jobs: the probe asks for no whole CPU.
PROBE_CPUS = 0
NO_LIVE_NODE = "no live node in the cluster"


@dataclass(frozen=True)
class ProbeResult:
    provider: str
    alive: bool
    node_id: str | None  # the Ray node that answered
    stamp: float | None  # time.time() on that node
    latency_s: float  # from sending the probe to its answer (or to giving up)
    gpu: GpuSnapshot | None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@ray.remote(max_retries=0)
def _probe_task() -> tuple[str, float, GpuSnapshot]:
    return ray.get_runtime_context().get_node_id(), time.time(), gpu_snapshot()


def _send(provider: str):
    return _probe_task.options(**task_options(provider, num_cpus=PROBE_CPUS)).remote()


def _collect(provider: str, ref, sent: float, answered_at: float | None) -> ProbeResult:
    if answered_at is None:
        ray.cancel(ref, force=True)
        return ProbeResult(provider, False, None, None, time.monotonic() - sent, None,
                           error="no answer within the timeout")
    latency = answered_at - sent
    try:
        node_id, stamp, gpu = ray.get(ref)
    except ray.exceptions.RayError as exc:  # the node died while the probe ran
        return ProbeResult(provider, False, None, None, latency, None,
                           error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    return ProbeResult(provider, True, node_id, stamp, latency, gpu)


def probe_all(providers: Sequence[str], timeout_s: float) -> list[ProbeResult]:
    """Probes every provider at once; the whole call takes at most about `timeout_s`."""
    sent = time.monotonic()
    present = set(providers_in_cluster())
    refs = {p: _send(p) for p in dict.fromkeys(providers) if p in present}
    answered_at: dict[Any, float] = {}
    pending = list(refs.values())
    deadline = sent + timeout_s
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            answered_at[ref] = time.monotonic()
    collected = {p: _collect(p, ref, sent, answered_at.get(ref)) for p, ref in refs.items()}
    return [collected.get(p) or ProbeResult(p, False, None, None, 0.0, None, error=NO_LIVE_NODE)
            for p in providers]


def probe(provider: str, timeout_s: float) -> ProbeResult:
    """Probes one provider: alive with its node's stamp and GPUs, or down after `timeout_s`."""
    return probe_all([provider], timeout_s)[0]
