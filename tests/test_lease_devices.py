"""A lease's GPUs: the site binds exactly the device nodes of the GPUs Ray reserved for it,
names them in CUDA_VISIBLE_DEVICES, and a lease that bought GPUs and cannot see them fails as
the provider's fault, charged nothing.

Without a GPU, stand-in device nodes (character devices made with mknod, of /dev/null's
numbers) take the place of a GPU's: a lease lists what it sees of them. The `gpu` tests run a
CUDA program in the same sandbox with the host's real GPU bound.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute.jobs import ComputeJob
from compute.nvml import GpuDevice, gpu_snapshot
from provider.lease.devices import DRIVER_NODES, DeviceError, assign, bind, check
from provider.lease.launch import launch, lease_sandbox
from provider.lease.outcome import Outcome
from provider.lease.plan import LeasePlan

pytestmark = pytest.mark.light

# What a lease's program prints of the GPUs it sees: /dev's GPU nodes, which it could open for
# writing, and its CUDA environment.
LIST_WHAT_IT_SEES = """
import json, os
nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
opened = []
for n in nodes:
    with open("/dev/" + n, "wb") as f:
        f.write(b"x")
    opened.append(n)
print(json.dumps({"nodes": nodes, "opened": opened, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "order": os.environ.get("CUDA_DEVICE_ORDER")}))
"""

SHOW_DRIVER_LIST = """
print(json.dumps(sorted(os.listdir({!r}))))
"""


@pytest.fixture
def stand_ins() -> Iterator[Path]:
    """A host's /dev as a two-GPU machine has it: nvidia0, nvidia1, nvidiactl, nvidia-uvm and
    nvidia-modeset, as character devices (of /dev/null's numbers) outside /tmp."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: `make test` installs Debian's `bubblewrap` package")
    dev = Path("/var/tmp") / f"swarm-dev-{uuid.uuid4().hex[:8]}"
    dev.mkdir(mode=0o755)
    null = os.stat("/dev/null").st_rdev
    for name in ("nvidia0", "nvidia1", *DRIVER_NODES, "nvidia-modeset"):
        os.mknod(dev / name, stat.S_IFCHR | 0o666, null)
        os.chmod(dev / name, 0o666)
    for bus in ("0000:3b:00.0", "0000:5e:00.0"):  # the driver's list of its GPUs, as /proc has it
        (dev / "gpus" / bus).mkdir(parents=True)
        (dev / "gpus" / bus / "information").write_text(f"Bus Location: {bus}\n")
    yield dev
    shutil.rmtree(dev, ignore_errors=True)


def plan(gpus: int = 1, number: int = 40_105) -> LeasePlan:  # a number no Ray test's site reaches
    code = {"uri": "s3://code/0.tar", "sha256": "ab" * 32}
    job = ComputeJob.of("dev-1", "ray", "0xabc",
                        {"entrypoint": "python main.py", "requirements": [], "env": {}, "code": code})
    return LeasePlan(job_id=1, number=number, job=job, cpus=1, gpus=gpus, memory_bytes=2**30, wall_seconds=60,
                     max_units=100, result="s3://results/dev-1")


def test_a_lease_sees_the_nodes_of_its_own_gpus_and_of_the_driver_and_no_other_gpu(
        stand_ins: Path, tmp_path: Path) -> None:
    given = bind([GpuDevice("1", 1, "GPU-11111111-2222-3333-4444-555555555555", 1, "0000:5e:00.0")],
                 dev=stand_ins, driver_gpus=stand_ins / "gpus")
    # The stand-in driver list is in the lease's sight, as /proc is, before the site covers it.
    sandbox = lease_sandbox(tmp_path / "lease", plan(), ((stand_ins / "gpus", False),), gpus=given)
    listing = SHOW_DRIVER_LIST.format(str(stand_ins / "gpus"))
    done = sandbox.run([sys.executable, "-c", LIST_WHAT_IT_SEES + listing])
    assert done.returncode == 0, done.stderr
    *_, printed, listed = done.stdout.strip().splitlines()
    seen = json.loads(printed)
    assert json.loads(listed) == ["0000:5e:00.0"], "the driver's list shows its own GPU alone"
    # Its GPU (minor 1), the driver's two nodes and the optional one the host has; not nvidia0.
    assert seen["nodes"] == ["nvidia-modeset", "nvidia-uvm", "nvidia1", "nvidiactl"]
    assert seen["opened"] == seen["nodes"]  # device nodes it may open, not empty files
    assert seen["cuda"] == "GPU-11111111-2222-3333-4444-555555555555" and seen["order"] == "PCI_BUS_ID"


def test_a_cpu_lease_sees_no_gpu_node_and_no_gpu_in_its_environment(stand_ins: Path, tmp_path: Path) -> None:
    given = assign(0, env={"CUDA_VISIBLE_DEVICES": "0,1"})  # a CPU lease on a machine whose GPUs Ray shows
    assert given.devices == () and given.binds == ()
    sandbox = lease_sandbox(tmp_path / "lease", plan(gpus=0), gpus=given)
    done = sandbox.run([sys.executable, "-c", LIST_WHAT_IT_SEES])
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["nodes"] == [] and seen["cuda"] == ""


def test_a_missing_driver_node_is_the_providers_to_fix_in_one_sentence(stand_ins: Path) -> None:
    (stand_ins / "nvidia-uvm").unlink()
    with pytest.raises(DeviceError) as refused:
        bind([GpuDevice("0", 0, "GPU-0", 0)], dev=stand_ins)
    message = str(refused.value)
    assert f"{stand_ins / 'nvidia-uvm'} is not a device node" in message and "nvidia-modprobe" in message
    assert message.count(". ") == 0 and message.endswith(")."), message


def test_the_check_in_the_sandbox_refuses_nodes_that_are_no_gpu(stand_ins: Path, tmp_path: Path) -> None:
    """Stand-ins bound as a GPU's nodes: the device check the launcher runs in the lease's
    sandbox, before the buyer's code, finds neither CUDA nor NVML showing the GPU, and says so."""
    given = bind([GpuDevice("0", 0, "GPU-00000000-0000-0000-0000-000000000000", 0)], dev=stand_ins)
    sandbox = lease_sandbox(tmp_path / "lease", plan(), gpus=given)
    seen_nothing = r"sandbox sees 0 GPU\(s\) through CUDA and \[\] through NVML, not the 1 GPU the site bound"
    with pytest.raises(DeviceError, match=seen_nothing + r" into it \(GPU-00000000"):
        check(sandbox, given)


def test_what_an_earlier_attempt_left_in_the_lease_cannot_answer_the_check_for_it(
        stand_ins: Path, tmp_path: Path) -> None:
    """A lease's directory outlives an attempt (its checkpoints), so a buyer's program can leave a
    `provider/lease/devices.py` of its own there, printing that it sees its GPU. The check runs
    isolated from the lease's directory and environment: Swarm's own code answers, and sees none."""
    from provider.lease.devices import SEEN

    uuid_ = "GPU-00000000-0000-0000-0000-000000000000"
    given = bind([GpuDevice("0", 0, uuid_, 0)], dev=stand_ins)
    sandbox = lease_sandbox(tmp_path / "lease", plan(), gpus=given)
    forged = tmp_path / "lease" / "work" / "provider" / "lease"
    forged.mkdir(parents=True)
    for package in (forged, forged.parent):
        (package / "__init__.py").write_text("")
    (forged / "devices.py").write_text(
        f"import sys\ndef main():\n    print({SEEN!r} + '{{\"nvml\": [\"{uuid_}\"], \"cuda\": 1}}')\n"
        "    return 0\n")
    with pytest.raises(DeviceError, match=r"sees 0 GPU\(s\) through CUDA and \[\] through NVML"):
        check(sandbox, given)


@pytest.mark.parametrize("visible", [None, "", "beyond"])
def test_a_lease_that_bought_a_gpu_it_is_not_given_fails_as_the_providers_fault_charged_nothing(
        tmp_path: Path, visible: str | None) -> None:
    """Through the launcher, as Ray runs it: no GPU reserved, or one this machine's NVML does
    not know (on a GPU host, the index past its last GPU). Nothing runs in the sandbox."""
    beyond = visible == "beyond"
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": str(gpu_snapshot().gpus) if beyond else visible}
    outcome = launch(tmp_path / "lease", plan(), env=env)
    assert (outcome.state, outcome.fault, outcome.units, outcome.devices) == ("failed", "provider", 0, [])
    assert outcome.error is not None and outcome.error.startswith(
        "the site could not give the lease the 1 GPU it bought: ")
    assert outcome.error.endswith(".") and "\n" not in outcome.error
    if beyond:
        assert ("NVML cannot start" in outcome.error) == (gpu_snapshot().gpus == 0), outcome.error
    else:
        assert "Ray reserved 0 for it" in outcome.error
    assert Outcome.read(tmp_path / "lease") == outcome
    assert not (tmp_path / "lease" / "log").exists(), "the sandbox never ran"


# ── on a GPU ─────────────────────────────────────────────────────────────────────────────

CUDA_PROGRAM = """
import json, torch
x = torch.randn(512, 512, device="cuda")
y = (x @ x).sum().item()
print(json.dumps({"device": str(x.device), "name": torch.cuda.get_device_name(0),
                  "count": torch.cuda.device_count(), "finite": y == y}))
"""


@pytest.mark.gpu
def test_a_cuda_program_computes_on_the_gpu_the_site_bound_into_its_sandbox(tmp_path: Path) -> None:
    given = assign(1, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert len(given.devices) == 1 and given.devices[0].uuid.startswith(("GPU-", "MIG-"))
    sandbox = lease_sandbox(tmp_path / "lease", plan(), gpus=given)
    seen = check(sandbox, given)
    assert seen["nvml"] == given.uuids and seen["cuda"] == 1
    done = sandbox.run([sys.executable, "-c", CUDA_PROGRAM])
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    assert ran["device"] == "cuda:0" and ran["count"] == 1 and ran["finite"]
    assert ran["name"] == gpu_snapshot().devices[given.devices[0].index].name


@pytest.mark.gpu
def test_on_a_gpu_host_a_cpu_lease_sees_no_gpu(tmp_path: Path) -> None:
    from provider.lease.devices import SEEN

    given = assign(0, env={"CUDA_VISIBLE_DEVICES": "0"})
    done = lease_sandbox(tmp_path / "lease", plan(gpus=0), gpus=given).run(
        [sys.executable, "-m", "provider.lease.devices"])
    seen = json.loads(done.stdout.strip().splitlines()[-1].removeprefix(SEEN))
    assert gpu_snapshot().gpus >= 1 and (seen["nvml"], seen["cuda"]) == ([], 0)


CUDA_MAIN = """
import json, os, pathlib, torch
x = torch.randn(256, 256, device="cuda")
(x @ x).sum().item()
pathlib.Path(os.environ["SWARM_OUTPUT_DIR"], "metrics.json").write_text(json.dumps(
    {"device": str(x.device), "device_name": torch.cuda.get_device_name(0)}))
"""

CUDA_ON_ITS_RAY = """
import json, os, pathlib, ray
ray.init()  # the lease's own Ray, with the lease's one GPU

@ray.remote(num_gpus=1)
def where():
    import torch
    x = torch.ones(64, 64, device="cuda")
    return str((x @ x).device), torch.cuda.get_device_name(0), [str(i) for i in ray.get_gpu_ids()]

device, name, ids = ray.get(where.remote())
pathlib.Path(os.environ["SWARM_OUTPUT_DIR"], "metrics.json").write_text(json.dumps(
    {"device": device, "device_name": name, "ray_gpu_ids": ids}))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("main", [pytest.param(CUDA_MAIN, id="plain"),
                                  pytest.param(CUDA_ON_ITS_RAY, id="its-ray", marks=pytest.mark.ray)])
def test_a_buyers_program_computes_on_the_gpu_its_lease_bought_and_is_billed_gpu_seconds(
        tmp_path: Path, main: str) -> None:
    from tests.programs import program_plan

    lease_plan = program_plan(tmp_path, main, ray=main is CUDA_ON_ITS_RAY).but(gpus=1)
    outcome = launch(tmp_path / "lease", lease_plan, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert outcome.state == "succeeded", (outcome.error, (tmp_path / "lease" / "log").read_text()[-3000:])
    assert outcome.unit == "gpu-seconds" and len(outcome.devices) == 1
    assert outcome.units == pytest.approx(outcome.seconds, abs=1.0), "one GPU for as long as it ran"
    metrics = json.loads((tmp_path / "results" / "job-1" / "outputs" / "metrics.json").read_text())
    assert metrics["device"] == "cuda:0" and metrics["device_name"] == gpu_snapshot().devices[0].name
    if main is CUDA_ON_ITS_RAY:
        assert len(metrics["ray_gpu_ids"]) == 1
