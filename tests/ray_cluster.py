"""One real Ray cluster per test session: a head with no CPUs and three simulated
providers — A with two nodes, B and C with one — each node a raylet with one CPU,
labelled provider=<address> and carrying the provider:<address> resource.

Ray gives each node's raylet a fixed 30 s to register, which a loaded machine can miss: a node
whose raylet still ran when Ray gave up is started once more (compute.node.RayStart), as a
lease's own Ray is."""

from __future__ import annotations

import os
import secrets

# Ray reads its authentication settings when it is first imported: set them before that.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
# No usage report: Ray Data's would query a Prometheus that is not there after every dataset.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import pytest

from anvil import dev_account
from compute.node import (  # a site's settings, ahead of the light lane
    LOCAL_HEALTH_CHECKS,
    WORKER_NICENESS,
    RayStart,
)
from compute.placement import node_labels, node_resources

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

PROVIDER_A, PROVIDER_B, PROVIDER_C = (dev_account(i).address for i in (1, 2, 3))
OBJECT_STORE = 80 * 1024 * 1024
RAY_START_ATTEMPTS = 2
T = TypeVar("T")


@dataclass
class RayCluster:
    cluster: Cluster
    address: str
    nodes: dict[str, list] = field(default_factory=dict)  # provider → its Node objects

    def add_node(self, provider: str, num_cpus: int = 1):
        node = started(lambda: self.cluster.add_node(
            num_cpus=num_cpus,
            labels=node_labels(provider),
            resources=node_resources(provider),
            object_store_memory=OBJECT_STORE,
        ))
        self.nodes.setdefault(provider, []).append(node)
        return node

    def remove_node(self, node, allow_graceful: bool = False) -> None:
        self.cluster.remove_node(node, allow_graceful=allow_graceful)
        for nodes in self.nodes.values():
            if node in nodes:
                nodes.remove(node)


def started(start: Callable[[], T]) -> T:
    """What `start` returns, a Ray node it starts in this process; started once more if Ray's own
    deadline passed while the node still started."""
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        attempted = RayStart()
        try:
            return start()
        except Exception as exc:
            if attempt == RAY_START_ATTEMPTS or not attempted.slow(exc):
                raise
            attempted.stop()
    raise AssertionError("unreachable")


_running: list[RayCluster] = []


def release_ray_cluster() -> None:
    """Stops the session's cluster once its last test is done (tests/conftest.py)."""
    import ray

    from compute.ray_private import stop_cluster

    while _running:
        ray.shutdown()
        stop_cluster(_running.pop().cluster)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    import ray
    from ray.cluster_utils import Cluster

    from compute.ray_private import system_config_args

    cluster = started(lambda: Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "object_store_memory": OBJECT_STORE,
                        **system_config_args(LOCAL_HEALTH_CHECKS | {"worker_niceness": WORKER_NICENESS})},
    ))
    rc = RayCluster(cluster=cluster, address=cluster.address)
    for provider, count in ((PROVIDER_A, 2), (PROVIDER_B, 1), (PROVIDER_C, 1)):
        for _ in range(count):
            rc.add_node(provider)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    _running.append(rc)
    yield rc
    release_ray_cluster()
