"""Ray's private APIs, as compute/ray_private.py uses them. Every name and signature that
module relies on is pinned here against the installed Ray, without starting a cluster, so an
upgrade of Ray that moves one of them fails here by name rather than inside a job or a node."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
import tomllib
from pathlib import Path

import pytest
import ray

from compute import ray_private
from compute.errors import ComputeError
from compute.node import LOCAL_HEALTH_CHECKS, SITE_RAY_CONFIG
from provider.lease.worker import LEASE_RAY_CONFIG

pytestmark = pytest.mark.light

ROOT = Path(__file__).resolve().parents[1]
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


# ── the version it was written for ───────────────────────────────────────────

def test_the_seam_is_written_for_the_ray_that_pyproject_pins_and_that_is_installed() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d.split("==")[1] for d in dependencies if d.startswith("ray[")]
    assert pins == [ray_private.RAY_VERSION]
    assert ray.__version__ == ray_private.RAY_VERSION


def test_another_ray_version_is_refused_in_one_sentence_naming_both() -> None:
    with pytest.raises(ComputeError) as refused:
        ray_private.check_version("2.61.0")
    message = str(refused.value)
    assert "Ray 2.61.0 is installed" in message and f"Ray {ray_private.RAY_VERSION}" in message
    assert "\n" not in message and message.endswith(".") and message.count(". ") == 0


def test_importing_the_seam_under_another_ray_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "__version__", "3.0.0")
    source = ROOT / "compute" / "ray_private.py"
    spec = importlib.util.spec_from_file_location("ray_private_under_test", source)
    assert spec is not None and spec.loader is not None
    with pytest.raises(ComputeError, match=r"Ray 3\.0\.0 is installed"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


# ── starting Ray: the underscore keyword arguments ───────────────────────────

def test_ray_init_still_takes_the_underscore_arguments_swarm_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """ray.init takes them through **kwargs and refuses, before starting anything, any it does
    not know: an unknown one beside them is named alone."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own before checking
    try:
        with pytest.raises(RuntimeError, match=r"^Unknown keyword argument\(s\): _not_a_ray_argument$"):
            ray.init(_node_ip_address="127.0.0.1", _temp_dir="/tmp/ray", _not_a_ray_argument=1,
                     **ray_private.system_config_args(LOCAL_HEALTH_CHECKS))
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert not ray.is_initialized()


def test_init_local_node_passes_only_arguments_ray_init_names() -> None:
    from ray._private.worker import RayContext

    ray_init = inspect.signature(ray.init).parameters
    passed = set(inspect.signature(ray_private.init_local_node).parameters) - {"node_ip_address", "temp_dir",
                                                                          "system_config"}
    assert passed <= set(ray_init), passed - set(ray_init)
    # What a local ray.init returns; the lease reads the GCS address from its address_info.
    assert "address_info" in inspect.signature(RayContext.__init__).parameters


def test_a_cluster_head_takes_the_system_config_and_knows_every_health_check_setting() -> None:
    from ray._private.parameter import RayParams
    from ray._raylet import Config  # type: ignore[attr-defined]  # a Cython module: no stub names it

    params = RayParams(**ray_private.system_config_args(SITE_RAY_CONFIG))
    assert params._system_config == SITE_RAY_CONFIG and LOCAL_HEALTH_CHECKS.items() <= SITE_RAY_CONFIG.items()
    for name in LOCAL_HEALTH_CHECKS:  # each a RayConfig entry: the raylet refuses an unknown one at start
        assert isinstance(getattr(Config, name)(), int), name
    # Python's Config shows only some entries: every one a site's or a lease's Ray is given is a
    # setting the installed raylet knows by that name (a NUL-terminated string in its binary).
    raylet = (Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet").read_bytes()
    for name in SITE_RAY_CONFIG | LEASE_RAY_CONFIG:
        assert b"\0" + name.encode() + b"\0" in raylet, name
    assert b"\0not_a_ray_setting\0" not in raylet


# ── authentication ───────────────────────────────────────────────────────────

def test_a_loaded_ray_reads_a_new_token_file_once_its_auth_settings_are_reloaded(tmp_path: Path) -> None:
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # as Config above

    token = tmp_path / "auth_token"
    token.write_text("ab" * 32)
    token.chmod(0o600)
    saved = {name: os.environ.get(name) for name in AUTH_VARS}
    try:
        os.environ.pop("RAY_AUTH_TOKEN", None)
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
        ray_private.reload_auth_settings()
        assert AuthenticationTokenLoader.instance().get_raw_token() == "ab" * 32
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        ray_private.reload_auth_settings()


# ── the GCS ──────────────────────────────────────────────────────────────────

def test_the_gcs_client_still_lists_nodes_with_a_timeout() -> None:
    """Its constructor cannot be pinned here (it waits 40 s for a GCS that is not there);
    tests/test_cluster_cli.py reads a real cluster's nodes through it."""
    from ray._raylet import GcsClient, InnerGcsClient  # type: ignore[attr-defined]  # as Config above

    assert "__getattr__" in vars(GcsClient)  # it forwards every call to an InnerGcsClient
    listing = inspect.signature(InnerGcsClient.get_all_node_info)
    assert "timeout" in listing.parameters
    assert "GcsNodeInfo" in str(listing.return_annotation)


def test_a_gcs_node_message_reads_as_alive_or_dead_with_its_labels_and_resources() -> None:
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    assert GcsNodeInfo.ALIVE == 0 and GcsNodeInfo.DEAD == 1
    info = GcsNodeInfo(state=GcsNodeInfo.ALIVE, is_head_node=False, node_manager_address="10.0.0.7",
                       labels={"provider": "0xabc"}, resources_total={"CPU": 2.0, "provider:0xabc": 1.0})
    node = ray_private.GcsNode.of("ff" * 28, info)
    assert node == ray_private.GcsNode(node_id="ff" * 28, alive=True, head=False,
                                       labels={"provider": "0xabc"},
                                       resources={"CPU": 2.0, "provider:0xabc": 1.0}, ip="10.0.0.7")
    info.state = GcsNodeInfo.DEAD
    assert not ray_private.GcsNode.of("ff" * 28, info).alive


# ── placement groups and Ray Train ───────────────────────────────────────────

def test_a_placement_group_id_from_the_table_becomes_a_handle_with_that_id() -> None:
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup

    pg_id = PlacementGroupID.from_random().hex()
    handle = ray_private.placement_group(pg_id)
    assert isinstance(handle, PlacementGroup)
    assert handle.id.hex() == pg_id


def test_ray_trains_controller_still_calls_and_aborts_for_a_controller_callback() -> None:
    from ray.train.v2._internal.execution.callback import ControllerCallback
    from ray.train.v2._internal.execution.controller import controller

    assert ray_private.ControllerCallback is ControllerCallback
    # The controller picks its callbacks by this very class, so a subclass of it is called.
    assert controller.ControllerCallback is ControllerCallback
    for hook, arguments in (("after_controller_start", ["self", "train_run_context"]),
                            ("after_controller_finish", ["self", "result"])):
        assert list(inspect.signature(getattr(ControllerCallback, hook)).parameters) == arguments, hook
    assert list(inspect.signature(controller.TrainController.abort).parameters) == ["self"]


def test_the_provider_watch_is_a_controller_callback() -> None:
    from compute.runners.supervise import ProviderWatch

    assert issubclass(ProviderWatch, ray_private.ControllerCallback)


def test_swarms_torch_trainer_starts_no_dataset_manager_for_a_run_without_datasets() -> None:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    lean = ray_private.TorchTrainer
    assert issubclass(lean, TorchTrainer) and lean.__name__ == "TorchTrainer"

    def kinds(trainer) -> set[type]:
        return {type(callback) for callback in trainer._create_default_callbacks()}

    def loop() -> None:
        pass

    one = ScalingConfig(num_workers=1)
    plain = kinds(TorchTrainer(loop, scaling_config=one))
    assert {PlacementGroupCleanerCallback, DatasetsCallback} <= plain  # what Ray Train starts by default
    assert not ray.is_initialized()  # so the cleaner stays: whether a dashboard runs is not known yet
    assert kinds(lean(loop, scaling_config=one)) == plain - {DatasetsCallback}
    assert kinds(lean(loop, scaling_config=one, datasets={"train": lambda: None})) == plain


def test_the_names_swarms_torch_trainer_replaces_ray_trains_scaling_policy_by_are_there() -> None:
    """Where a run's scaling policy comes from and goes (the lease's check that no autoscaling
    coordinator is asked is in tests/test_market_service.py), and where the dashboard leaves its
    address."""
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get
    from ray.train import ScalingConfig
    from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy, create_scaling_policy
    from ray.train.v2._internal.execution.scaling_policy.scaling_policy import ScalingPolicy
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    assert type(create_scaling_policy(ScalingConfig(num_workers=2))) is FixedScalingPolicy
    fit = inspect.getsource(DataParallelTrainer.fit)
    assert "scaling_policy=create_scaling_policy(self.scaling_config)" in fit
    controller = inspect.signature(DataParallelTrainer._initialize_and_run_controller).parameters
    assert [p.kind for p in controller.values()][-1] is inspect.Parameter.VAR_KEYWORD
    for name in ("after_controller_start", "_maybe_send_resource_request"):
        assert name in vars(ScalingPolicy), name
    assert "self._maybe_send_resource_request()" in inspect.getsource(FixedScalingPolicy)
    assert "namespace" in inspect.signature(_internal_kv_get).parameters
    assert ray_constants.DASHBOARD_ADDRESS == "dashboard"
    assert ray_constants.KV_NAMESPACE_DASHBOARD == b"dashboard"


def _counting_loop(config: dict) -> int:
    """A worker that counts on from its checkpoint, one report and checkpoint per step."""
    import json
    import tempfile

    import ray.train

    start = ray.train.get_checkpoint()
    done = 0 if start is None else json.loads(Path(start.path, "n").read_text())
    for n in range(done + 1, done + config["steps"] + 1):
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "n").write_text(str(n))
            ray.train.report({"n": n}, checkpoint=ray.train.Checkpoint.from_directory(directory))
    return done


def _kept(run_dir: Path) -> list[str]:
    return sorted(Path(p, "n").read_text() for p in run_dir.glob("checkpoint_*") if p.is_dir())


def test_a_run_in_place_keeps_and_registers_its_checkpoints_as_ray_train_does(tmp_path: Path) -> None:
    """One worker in this process and no Ray: each checkpoint reported is copied to the run's
    directory and registered in a snapshot Ray Train's own checkpoint manager reads, the newest
    two kept, and the run started again resumes from the last."""
    from ray.train.v2._internal.execution.checkpoint.checkpoint_manager import _CheckpointManagerState

    from compute.checkpoints import registered_checkpoint

    run_dir = tmp_path / "results" / "job-1"
    first = ray_private.train_in_place(_counting_loop, {"steps": 3}, run_dir, keep=2)
    assert first.metrics == {"n": 3} and Path(first.checkpoint.path, "n").read_text() == "3"
    assert registered_checkpoint(run_dir) == Path(first.checkpoint.path)
    umask = os.umask(0o022)
    os.umask(umask)
    assert Path(first.checkpoint.path).stat().st_mode & 0o777 == 0o777 & ~umask  # not the loop's 0700
    assert _kept(run_dir) == ["2", "3"]
    state = _CheckpointManagerState.parse_obj(json.loads((run_dir / ray_private.SNAPSHOT).read_text()))
    assert [r.metrics["n"] for r in state.checkpoint_results] == [2, 3]
    assert state.checkpoint_report_indices == [1, 2] and state.current_report_index == 3

    again = ray_private.train_in_place(_counting_loop, {"steps": 2}, run_dir, keep=2)
    assert again.metrics == {"n": 5}  # two steps on from the third
    assert _kept(run_dir) == ["4", "5"]
    assert not ray.is_initialized()  # no Ray was started for it


def test_a_cluster_still_stops_its_heads_monitor_as_stop_cluster_asks() -> None:
    """tests/test_cluster_cli.py checks that `swarm cluster down` leaves no process of the cluster."""
    from ray._private.node import Node
    from ray.cluster_utils import Cluster

    assert list(inspect.signature(Node.kill_monitor).parameters) == ["self", "check_alive"]
    assert "self.head_node = None" in inspect.getsource(Cluster.__init__)
    assert list(inspect.signature(Cluster.shutdown).parameters) == ["self"]


def test_ray_data_provisions_as_many_parquet_footer_readers_as_the_variable_swarm_sets_says(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """compute.tabular.read and a lease's environment set DATA_FOOTER_READERS: without it each
    Parquet read of Ray Data starts 32 actor processes before it reads a row."""
    from ray.data._internal.datasource_v2.formats.parquet.footer_file_indexer import FooterFileIndexer
    from ray.data._internal.datasource_v2.formats.parquet.parquet_datasource_v2 import ParquetDatasourceV2

    from compute.node import DATA_FOOTER_READERS

    (name, value), = DATA_FOOTER_READERS.items()
    monkeypatch.delenv(name, raising=False)
    assert FooterFileIndexer(ignore_missing_paths=False)._num_actors == 32
    monkeypatch.setenv(name, value)
    assert FooterFileIndexer(ignore_missing_paths=False)._num_actors == int(value) == 1
    assert "FooterFileIndexer(" in inspect.getsource(ParquetDatasourceV2._get_file_indexer)


def test_a_sites_head_starts_neither_monitor_when_its_parameters_say_so() -> None:
    """compute.cluster.HEAD_WITHOUT, passed to the head through `Cluster(head_node_args=…)`;
    tests/test_cluster_cli.py lists what a site's head runs."""
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    from compute.cluster import HEAD_WITHOUT

    params = RayParams(**HEAD_WITHOUT)
    assert params.no_monitor is True and not params.include_log_monitor
    heads = inspect.getsource(Node.start_head_processes)
    assert "if not self._ray_params.no_monitor:" in heads and "self.start_monitor()" in heads
    assert "if self._ray_params.include_log_monitor:" in inspect.getsource(Node.start_ray_processes)


def test_a_head_started_within_dashboard_modules_asks_its_dashboard_for_those_alone(tmp_path: Path) -> None:
    """compute.ray_private.dashboard_modules: the command Ray starts its dashboard with, through the
    real `start_ray_process`, ends with `--modules-to-load`; other processes' commands, and the
    dashboard's outside the block, are Ray's own. tests/test_cluster_cli.py lists a site's modules."""
    import sys

    from ray._private import ray_constants, services
    from ray.dashboard.subprocesses.module import SubprocessModule
    from ray.dashboard.utils import get_all_modules

    from compute.cluster import SITE_DASHBOARD_MODULES

    def argv(process_type: str) -> list[str]:
        out = tmp_path / f"{process_type}.json"
        with out.open("w") as stdout:
            show = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv))"]
            info = services.start_ray_process(show, process_type, fate_share=False, stdout_file=stdout)
            info.process.wait(timeout=60)
        return json.loads(out.read_text())[1:]

    with ray_private.dashboard_modules(["StateHead", "JobHead"]):
        assert argv(ray_constants.PROCESS_TYPE_DASHBOARD) == ["--modules-to-load=JobHead,StateHead"]
        assert argv(ray_constants.PROCESS_TYPE_RAYLET) == []
    assert argv(ray_constants.PROCESS_TYPE_DASHBOARD) == []
    # Ray builds the dashboard's command in start_api_server, which starts it so; the dashboard reads
    # the flag; and the site's modules are dashboard modules of this Ray.
    source = inspect.getsource(services.start_api_server)
    assert "start_ray_process(" in source and "ray_constants.PROCESS_TYPE_DASHBOARD" in source
    assert "--modules-to-load" in (Path(ray.__file__).parent / "dashboard" / "dashboard.py").read_text()
    assert set(SITE_DASHBOARD_MODULES) <= {cls.__name__ for cls in get_all_modules(SubprocessModule)}
