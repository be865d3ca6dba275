"""The one place Swarm uses Ray's private APIs: `ray._raylet`, `ray._common`, the GCS's protobuf
messages, Ray Train v2's internals and the underscore keyword arguments of `ray.init` and of a
`ray.cluster_utils.Cluster` head.

Ray may change any of these in a minor release without notice. So they are named here and
nowhere else, this module refuses any Ray but the one it was written for (the version
pyproject.toml pins), and tests/test_ray_private.py pins every name and signature used here:
an upgrade of Ray fails there, in one place, instead of deep inside a job or a node.

Importing this module imports Ray, which reads its authentication settings as it loads:
import it where Ray is about to be used, after `compute.node.use_auth`, never at the top of a
module the command line loads for chain-only work.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import shutil
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray._common.utils import hex_to_binary
from ray._raylet import (  # type: ignore[attr-defined]  # a Cython module: these names have no stubs
    AuthenticationTokenLoader,
    Config,
    GcsClient,
    PlacementGroupID,
)
from ray.core.generated.gcs_pb2 import GcsNodeInfo
from ray.util.placement_group import PlacementGroup

from compute.errors import ComputeError

if TYPE_CHECKING:
    from ray._private.worker import RayContext
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.execution.callback import ControllerCallback

__all__ = [
    "RAY_VERSION", "ControllerCallback", "GcsNode", "TorchTrainer", "abort_train_controller",
    "check_version", "dashboard_modules", "dashboard_running", "gcs_client", "gcs_nodes", "init_local_node",
    "placement_group", "reload_auth_settings", "stop_cluster", "system_config_args", "train_in_place",
]

RAY_VERSION = "2.60.0"  # the version pinned in pyproject.toml, and the one every name below was read from


def check_version(installed: str) -> None:
    """Refuses a Ray other than RAY_VERSION, whose private APIs may differ from those used here."""
    if installed != RAY_VERSION:
        raise ComputeError(
            f"Swarm needs Ray {RAY_VERSION} but Ray {installed} is installed; "
            f"run `pip install 'ray[default,train,tune]=={RAY_VERSION}'`."
        )


check_version(ray.__version__)


def __getattr__(name: str) -> Any:
    """`ControllerCallback` and `TorchTrainer`, loaded on first use: Ray Train takes seconds to
    import, and only the runners need it."""
    if name == "ControllerCallback":
        from ray.train.v2._internal.execution.callback import ControllerCallback

        return ControllerCallback
    if name == "TorchTrainer":
        return _lean_torch_trainer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _lean_torch_trainer() -> type:
    """Ray Train's TorchTrainer without what a Swarm run has no use for, each an actor process
    (about 3 CPU-seconds here) or a wait:

    - the dataset manager it starts for every run, when the run has no Ray Data datasets (a
      built-in dataset or a small table reaches the workers in their config);
    - the autoscaling coordinator it asks for the run's resources before starting the workers
      and every 20 s after, waiting up to 5 s each time: a site's cluster and a lease's Ray have
      no autoscaler, their nodes come and go by the provider's hand;
    - the detached placement-group cleaner, where the cluster has no dashboard: it asks the
      dashboard's State API each second whether the controller lives, and without one it never
      learns (a lease's one-node Ray, which ends with the lease). Where a dashboard runs it stays:
      when a provider's last node is lost and Swarm kills the controller, the cleaner is what
      removes the placement group the controller was waiting on.

    `_create_default_callbacks`, `_initialize_and_run_controller` and the scaling policies are
    internal to Ray Train."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy

    class FixedScaling(FixedScalingPolicy):
        """A fixed number of workers, asked of no autoscaling coordinator."""

        def after_controller_start(self, train_run_context: Any) -> None:
            pass

        def _maybe_send_resource_request(self) -> None:
            pass

    class LeanTorchTrainer(TorchTrainer):
        def _create_default_callbacks(self) -> list[Any]:
            state_api = not ray.is_initialized() or dashboard_running()  # unknown yet: as Ray does
            return [callback for callback in super()._create_default_callbacks()
                    if (self.datasets or not isinstance(callback, DatasetsCallback))
                    and (state_api or not isinstance(callback, PlacementGroupCleanerCallback))]

        def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
            if type(controller_init_kwargs.get("scaling_policy")) is FixedScalingPolicy:
                controller_init_kwargs["scaling_policy"] = FixedScaling(self.scaling_config)
            return super()._initialize_and_run_controller(**controller_init_kwargs)

    LeanTorchTrainer.__name__ = LeanTorchTrainer.__qualname__ = "TorchTrainer"
    return LeanTorchTrainer


def dashboard_running() -> bool:
    """Whether the Ray this process is connected to serves its dashboard, and with it the State
    API: the dashboard writes its HTTP address into the GCS's key-value store as it starts, and
    the State API is asked there. A Ray started without a dashboard (`include_dashboard=False`)
    writes an address too, where nothing listens."""
    import socket

    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    address = _internal_kv_get(ray_constants.DASHBOARD_ADDRESS,
                               namespace=ray_constants.KV_NAMESPACE_DASHBOARD)
    if not address:
        return False
    host, _, port = address.decode().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
            return True
    except (OSError, ValueError):
        return False


# ── authentication ───────────────────────────────────────────────────────────

def reload_auth_settings() -> None:
    """Makes an already loaded Ray read RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH again: it reads
    them once, when it loads, and caches the token."""
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


# ── the GCS ──────────────────────────────────────────────────────────────────

@dataclass(frozen=True)
class GcsNode:
    """One node as Ray's GCS records it, copied out of its protobuf message."""

    node_id: str  # hex
    alive: bool
    head: bool
    labels: Mapping[str, str]
    resources: Mapping[str, float]  # the node's totals: {"CPU": 2.0, "provider:0x…": 1.0, …}
    ip: str

    @classmethod
    def of(cls, node_id: str, info: GcsNodeInfo) -> GcsNode:
        return cls(
            node_id=node_id,
            alive=info.state == GcsNodeInfo.ALIVE,
            head=bool(info.is_head_node),
            labels=dict(info.labels),
            resources=dict(info.resources_total),
            ip=info.node_manager_address,
        )


def gcs_client(address: str) -> GcsClient:
    """A client of the GCS at HOST:PORT, without joining the cluster as a driver.

    Raises `ray.exceptions.AuthenticationError` when the cluster refuses this process's token."""
    return GcsClient(address=address)


def gcs_nodes(client: GcsClient, timeout_s: float) -> list[GcsNode]:
    """Every node the GCS knows, alive or dead. Raises `ray.exceptions.RpcError` when the GCS does
    not answer within `timeout_s`."""
    return [GcsNode.of(node_id.hex(), info)
            for node_id, info in client.get_all_node_info(timeout=timeout_s).items()]


# ── starting Ray ─────────────────────────────────────────────────────────────

def system_config_args(config: Mapping[str, int | bool]) -> dict[str, Any]:
    """The keyword argument that overrides Ray's internal settings (RayConfig), for a
    `ray.cluster_utils.Cluster` head's `head_node_args` or a local `ray.init`."""
    return {"_system_config": dict(config)}


@contextlib.contextmanager
def dashboard_modules(names: Collection[str]) -> Iterator[None]:
    """Within it, a Ray head this process starts (`ray.init`, a `Cluster` head) runs only the
    dashboard modules `names` (class names, e.g. "JobHead"), each a process of its own: the
    dashboard's `--modules-to-load`, which neither exposes. The command line is built by
    `ray._private.services.start_api_server` and started through the same module's
    `start_ray_process`, both internal to Ray."""
    from ray._private import ray_constants, services

    start = services.start_ray_process
    load = "--modules-to-load=" + ",".join(sorted(names))

    def start_process(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == ray_constants.PROCESS_TYPE_DASHBOARD:
            command = [*command, load]
        return start(command, process_type, *args, **kwargs)

    services.start_ray_process = start_process
    try:
        yield
    finally:
        services.start_ray_process = start


def stop_cluster(cluster: Any) -> None:
    """Shuts a `ray.cluster_utils.Cluster` down, its head's autoscaler monitor first, at once:
    `shutdown` gives each process a second to end on SIGTERM before it kills it, and the monitor,
    of no use where no autoscaler runs, takes all of it. The head's `Node.kill_monitor` is
    Ray's internal API."""
    if cluster.head_node is not None:
        cluster.head_node.kill_monitor(check_alive=False)
    cluster.shutdown()


def init_local_node(*, num_cpus: int, num_gpus: int, object_store_memory: int, node_ip_address: str,
                    temp_dir: str, resources: Mapping[str, float] | None = None,
                    labels: Mapping[str, str] | None = None, include_dashboard: bool = False,
                    configure_logging: bool = False,
                    system_config: Mapping[str, int | bool] | None = None) -> RayContext:
    """Starts a one-node Ray in this process (`ray.init` without an address), bound to
    `node_ip_address`, keeping its sessions under `temp_dir` and with `system_config` as its
    internal settings: all three underscore arguments of `ray.init`, which Ray documents as
    unstable."""
    return ray.init(
        num_cpus=num_cpus, num_gpus=num_gpus, object_store_memory=object_store_memory,
        resources=dict(resources) if resources is not None else None,
        labels=dict(labels) if labels is not None else None,
        include_dashboard=include_dashboard, configure_logging=configure_logging,
        _node_ip_address=node_ip_address, _temp_dir=temp_dir,
        **(system_config_args(system_config) if system_config else {}),
    )


# ── placement groups and Ray Train ───────────────────────────────────────────

def placement_group(pg_id: str) -> PlacementGroup:
    """The placement group with this hex id, as `ray.util.placement_group_table()` lists it:
    Ray has no public way from that id to a handle `ray.util.remove_placement_group` takes."""
    return PlacementGroup(PlacementGroupID(hex_to_binary(pg_id)))


def abort_train_controller(controller: ray.actor.ActorHandle) -> ray.ObjectRef:
    """Asks Ray Train's controller actor (as a `ControllerCallback` sees it) to stop its workers
    and end the run; its `abort` method is internal to Ray Train."""
    return controller.abort.remote()


# ── one worker in this process ───────────────────────────────────────────────

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's record of a run's checkpoints


def train_in_place(train_loop: Callable[[dict[str, Any]], Any], config: dict[str, Any], run_dir: Path,
                   keep: int) -> Any:
    """Runs `train_loop(config)` as the one worker of a run in this process, as Ray Train's local
    mode does (a TorchTrainer with no workers: no Ray, no controller, no worker actor), but keeping
    what its controller keeps: every checkpoint the loop reports is copied to `run_dir` and
    registered in the run's snapshot in Ray Train's own format, the newest `keep` kept, and the
    loop's `ray.train.get_checkpoint()` is the run's latest registered one. So a run resumes from
    its last checkpoint whether it ran in place or on Ray Train's workers, and Ray Train from one
    written here. Ray Train's local mode (`LocalTrainFnUtils`, `set_train_fn_utils`) is internal."""
    from ray.train import Checkpoint, Result
    from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils, set_train_fn_utils

    class PersistedRun(LocalTrainFnUtils):
        def __init__(self) -> None:
            super().__init__(experiment_name=run_dir.name)
            run_dir.mkdir(parents=True, exist_ok=True)
            try:
                self.snapshot = json.loads((run_dir / SNAPSHOT).read_text())
            except FileNotFoundError:
                self.snapshot = {
                    "ray_version": RAY_VERSION, "checkpoint_results": [], "checkpoint_report_indices": [],
                    "latest_checkpoint_result": None, "pending_training_results": [],
                    "pending_validation_specs": [], "current_report_index": 0,
                    "validated_checkpoint_dir_names": [], "timed_out_validation_checkpoint_dir_names": [],
                    "failed_validation_checkpoint_dir_names": [],
                }
            latest = self.snapshot["latest_checkpoint_result"]
            self._last_checkpoint = (
                Checkpoint.from_directory(str(run_dir / latest["checkpoint_dir_name"])) if latest else None
            )

        def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None,
                   checkpoint_dir_name: str | None = None, **_: Any) -> None:
            self._last_metrics = metrics
            index = self.snapshot["current_report_index"]
            self.snapshot["current_report_index"] = index + 1
            if checkpoint is None:
                return
            name = checkpoint_dir_name or f"checkpoint_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S.%f}"
            staged = run_dir / f".{name}.staged"
            staged.mkdir()  # as Ray Train's upload makes it, not with the 0700 of the loop's temporary one:
            for item in Path(checkpoint.path).iterdir():  # a run resumed by another lease's user reads it
                if item.is_dir():
                    shutil.copytree(item, staged / item.name, copy_function=shutil.copyfile)
                else:
                    shutil.copyfile(item, staged / item.name)
            staged.rename(run_dir / name)
            result = {"version": 0, "checkpoint_dir_name": name, "metrics": metrics}
            results = [*self.snapshot["checkpoint_results"], result]
            indices = [*self.snapshot["checkpoint_report_indices"], index]
            dropped = results[:-keep]
            self.snapshot |= {"checkpoint_results": results[-keep:], "latest_checkpoint_result": result,
                              "checkpoint_report_indices": indices[-keep:]}
            written = run_dir / f".{SNAPSHOT}.staged"
            written.write_text(json.dumps(self.snapshot, separators=(",", ":")))
            written.replace(run_dir / SNAPSHOT)  # registered: a run from here on resumes from it
            self._last_checkpoint = Checkpoint.from_directory(str(run_dir / name))
            for old in dropped:
                shutil.rmtree(run_dir / old["checkpoint_dir_name"], ignore_errors=True)

    run = PersistedRun()
    set_train_fn_utils(run)
    try:
        train_loop(config)
    finally:
        set_train_fn_utils(None)
    return Result(metrics=run._get_last_metrics(), checkpoint=run.get_checkpoint(), path=str(run_dir),
                  error=None)
