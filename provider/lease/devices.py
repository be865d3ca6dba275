"""A lease's GPUs: the device nodes the site binds into its sandbox, and the check that the
lease sees exactly those.

Ray reserves a GPU lease's GPUs for its launcher (the Ray job's `entrypoint_num_gpus`) and
names them in the launcher's CUDA_VISIBLE_DEVICES. The launcher looks each up in NVML, for
its UUID and the minor number of its device node, and binds into the sandbox the node of each
(`/dev/nvidia<minor>`) and the driver's nodes every CUDA program opens (`nvidiactl` and
`nvidia-uvm`, and `nvidia-uvm-tools` and `nvidia-modeset` where the host has them). The rest
of the sandbox's /dev is bubblewrap's own (null, zero, random, a tty), so no other GPU's node
is there to open, nor can the lease make one (no capabilities, no new privileges:
nvidia-modprobe's setuid bit does nothing); and the driver's list of GPUs in /proc
(`/proc/driver/nvidia/gpus`) shows only the lease's, as NVIDIA's container runtime shows a
container's. Inside, CUDA_VISIBLE_DEVICES names the lease's GPUs by UUID, and
CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them as NVML does.

Before the lease's work starts, the launcher runs `python -m provider.lease.devices` in the
lease's sandbox, before anything of the buyer's runs there: it prints the UUIDs NVML sees and
how many GPUs CUDA counts. A lease that bought GPUs and would see fewer, or others, fails as
the provider's fault, and is charged nothing. A CPU lease is bound no GPU node at all.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from compute.errors import ComputeError
from compute.nvml import GpuDevice, gpu_devices, visible_uuids
from provider.lease import PROJECT
from provider.lease.sandbox import Limits, Sandbox

DEV = Path("/dev")
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")  # an entry per GPU; a lease's shows only its own
DRIVER_NODES = ("nvidiactl", "nvidia-uvm")  # opened by every CUDA program
OPTIONAL_DRIVER_NODES = ("nvidia-uvm-tools", "nvidia-modeset")  # bound where the host has them
CHECK_SECONDS = 120.0  # the in-sandbox check loads torch and initializes CUDA
CHECK_MEMORY_BYTES = 2 * 2**30
SEEN = "swarm-lease-devices: "  # the check's one line of output, as JSON


class DeviceError(ComputeError):
    """The site cannot give a lease the GPUs it bought: the provider's fault."""


@dataclass(frozen=True)
class LeaseGpus:
    """The GPUs a lease was given: NVML's account of each, the device nodes bound into its
    sandbox (the host's path, and where the lease sees it), and its CUDA environment."""

    devices: tuple[GpuDevice, ...] = ()
    binds: tuple[tuple[Path, str], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    covered: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the driver's /proc entries of its GPUs alone

    @property
    def uuids(self) -> list[str]:
        return [d.uuid for d in self.devices]


def assign(gpus: float, env: Mapping[str, str] | None = None, dev: Path = DEV) -> LeaseGpus:
    """The GPUs Ray reserved for this launcher (`env`'s CUDA_VISIBLE_DEVICES), for a lease that
    bought `gpus`; DeviceError, in one sentence, when this machine cannot give it them."""
    wanted = math.ceil(gpus)
    if wanted <= 0:
        return LeaseGpus(env={"CUDA_VISIBLE_DEVICES": ""})
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    ids = [part.strip() for part in (visible or "").split(",") if part.strip()]
    if len(ids) < wanted:
        raise DeviceError(f"the site could not give the lease the {_count(wanted)} it bought: Ray reserved "
                          f"{len(ids)} for it (CUDA_VISIBLE_DEVICES is {visible!r} on its machine).")
    devices, why = gpu_devices(ids[:wanted])
    if why is not None:
        raise DeviceError(f"the site could not give the lease the {_count(wanted)} it bought: {why}.")
    return bind(devices, dev)


def bind(devices: list[GpuDevice], dev: Path = DEV, driver_gpus: Path = DRIVER_GPUS) -> LeaseGpus:
    """What a lease given `devices` is bound: each one's node and the driver's, found under
    `dev` (the host's /dev) and seen by the lease at /dev, and of the driver's list of GPUs
    (`driver_gpus`) their entries alone; DeviceError when a node is missing."""
    binds: list[tuple[Path, str]] = []
    for name in [d.node for d in devices] + list(DRIVER_NODES):
        if not _char_device(dev / name):
            raise DeviceError(f"the site could not give the lease the {_count(len(devices))} it bought: "
                              f"{dev / name} is not a device node on its machine; load the NVIDIA driver's "
                              "modules (`nvidia-modprobe -u -c=0` as root makes nvidia-uvm).")
        binds.append((dev / name, str(DEV / name)))
    binds += [(dev / name, str(DEV / name)) for name in OPTIONAL_DRIVER_NODES if _char_device(dev / name)]
    env = {"CUDA_VISIBLE_DEVICES": ",".join(d.uuid for d in devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    entries = tuple(d.pci_bus_id for d in devices if d.pci_bus_id and (driver_gpus / d.pci_bus_id).is_dir())
    covered = ((str(driver_gpus), entries),) if driver_gpus.is_dir() else ()
    return LeaseGpus(tuple(devices), tuple(binds), env, covered)


def check(sandbox: Sandbox, gpus: LeaseGpus) -> dict[str, object]:
    """Runs the device check in the lease's sandbox (its binds, its environment) and returns
    what the lease sees; DeviceError unless it sees exactly the GPUs it was given."""
    probe = replace(sandbox, limits=Limits(memory_bytes=max(sandbox.limits.memory_bytes, CHECK_MEMORY_BYTES),
                                           max_processes=sandbox.limits.max_processes,
                                           wall_seconds=CHECK_SECONDS))
    # Isolated (-I): neither the lease's directory, which may hold what an earlier attempt left,
    # nor its environment decides what code runs; the project's is named first on the path.
    code = (f"import sys; sys.path.insert(0, {str(PROJECT)!r}); "
            "from provider.lease.devices import main; sys.exit(main())")
    done = probe.run([sys.executable, "-I", "-c", code])
    seen = _seen(done.stdout)
    if seen is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise DeviceError(f"the site could not check the lease's {_count(len(gpus.devices))} in its sandbox: "
                          f"{last}.")
    nvml, cuda = seen.get("nvml"), seen.get("cuda")
    if sorted(nvml if isinstance(nvml, list) else []) != sorted(gpus.uuids) or cuda != len(gpus.devices):
        bound = ", ".join(gpus.uuids)
        raise DeviceError(f"the lease's sandbox sees {cuda} GPU(s) through CUDA and {nvml} through NVML, not "
                          f"the {_count(len(gpus.devices))} the site bound into it ({bound}).")
    return seen


def _seen(stdout: str) -> dict[str, object] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(SEEN):
            try:
                raw = json.loads(line[len(SEEN):])
            except ValueError:
                return None
            return raw if isinstance(raw, dict) else None
    return None


def _char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def _count(gpus: int) -> str:
    return f"{gpus} GPU" + ("" if gpus == 1 else "s")


def main() -> int:
    """In the lease's sandbox: the GPUs NVML and CUDA show it, as one line of JSON."""
    seen: dict[str, object] = {"nvml": visible_uuids(), "cuda": 0, "names": [],
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import torch

        if torch.cuda.is_available():
            seen["cuda"] = torch.cuda.device_count()
            seen["names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except (ImportError, RuntimeError, AssertionError) as exc:  # a CUDA that fails to start sees no GPU
        seen["error"] = f"{type(exc).__name__}: {exc}"[:300]
    print(SEEN + json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
