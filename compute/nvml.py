"""Every NVML call of the project: a GPU snapshot read through `pynvml` (nvidia-ml-py).

A machine where NVML cannot start (no driver, no GPU) reports `gpus=0`, no devices and
the reason. A field a GPU does not support (power on some boards) is `None`. Nothing
here makes up a number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024


@dataclass(frozen=True)
class DeviceReading:
    index: int
    name: str
    utilization_pct: float | None
    memory_used_mb: float | None
    memory_total_mb: float | None
    temperature_c: float | None
    power_w: float | None


@dataclass(frozen=True)
class GpuSnapshot:
    gpus: int
    devices: list[DeviceReading] = field(default_factory=list)
    error: str | None = None  # why NVML gave no reading (e.g. no driver on this machine)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reading_from_raw(
    index: int,
    name: str | bytes,
    utilization_gpu: int | None,
    memory_used_bytes: int | None,
    memory_total_bytes: int | None,
    temperature_c: int | None,
    power_mw: int | None,
) -> DeviceReading:
    """Converts NVML's raw units (bytes, milliwatts) into a reading (MiB, watts)."""
    return DeviceReading(
        index=index,
        name=name.decode() if isinstance(name, bytes) else name,
        utilization_pct=None if utilization_gpu is None else float(utilization_gpu),
        memory_used_mb=None if memory_used_bytes is None else memory_used_bytes / MIB,
        memory_total_mb=None if memory_total_bytes is None else memory_total_bytes / MIB,
        temperature_c=None if temperature_c is None else float(temperature_c),
        power_w=None if power_mw is None else power_mw / 1000.0,
    )


def _optional(read, *args):
    """One NVML field, or None where the device does not support it."""
    try:
        return read(*args)
    except pynvml.NVMLError:
        return None


def _read_device(index: int) -> DeviceReading:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    utilization = _optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
    return reading_from_raw(
        index=index,
        name=pynvml.nvmlDeviceGetName(handle),
        utilization_gpu=None if utilization is None else utilization.gpu,
        memory_used_bytes=None if memory is None else memory.used,
        memory_total_bytes=None if memory is None else memory.total,
        temperature_c=_optional(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        power_mw=_optional(pynvml.nvmlDeviceGetPowerUsage, handle),
    )


@dataclass(frozen=True)
class Identity:
    """What NVML says a GPU is: what the oracle holds against the provider's declared spec."""

    name: str
    memory_total_mb: float
    uuid: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def identity(device: str) -> Identity | None:
    """The identity of the GPU `device` names — an index or a UUID, as CUDA_VISIBLE_DEVICES
    gives them — or None where NVML cannot read it."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        handle = _handle(device)
        name = pynvml.nvmlDeviceGetName(handle)
        return Identity(name=name.decode() if isinstance(name, bytes) else name,
                        memory_total_mb=pynvml.nvmlDeviceGetMemoryInfo(handle).total / MIB,
                        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)))
    except (pynvml.NVMLError, ValueError):
        return None
    finally:
        pynvml.nvmlShutdown()


def _handle(device: str):
    """NVML's handle of the GPU `device` names: a UUID (GPU-…, MIG-…) or an index, as
    CUDA_VISIBLE_DEVICES and Ray name GPUs; NVMLError or ValueError when there is none."""
    if device.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(device)
    return pynvml.nvmlDeviceGetHandleByIndex(int(device))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpu_snapshot() -> GpuSnapshot:
    """The GPUs of this machine as NVML sees them now; gpus=0 where NVML cannot start."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuSnapshot(gpus=0, devices=[], error=f"NVML unavailable: {exc}")
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        return GpuSnapshot(gpus=0, devices=[], error=f"NVML could not count the devices: {exc}")
    try:
        return GpuSnapshot(gpus=count, devices=[_read_device(i) for i in range(count)])
    except pynvml.NVMLError as exc:
        # The GPUs are there but unreadable (a lost device): say how many, invent no readings.
        return GpuSnapshot(gpus=count, devices=[], error=f"NVML could not read the devices: {exc}")
    finally:
        pynvml.nvmlShutdown()


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of this machine as a lease is given it: the id Ray assigned it by (an index or a
    UUID, as CUDA_VISIBLE_DEVICES names GPUs), NVML's index and UUID, and the minor number of
    its device node, `/dev/nvidia<minor>`."""

    assigned: str
    index: int
    uuid: str
    minor: int
    pci_bus_id: str = ""  # as the driver names its entry under /proc/driver/nvidia/gpus: 0000:3b:00.0

    @property
    def node(self) -> str:
        return f"nvidia{self.minor}"


def gpu_devices(ids: list[str]) -> tuple[list[GpuDevice], str | None]:
    """The GPUs `ids` name on this machine, as NVML knows them; or, where NVML cannot start or
    names none of them, what it found (nothing) and why, in a clause."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"NVML cannot start on this machine ({exc})"
    try:
        found = []
        for assigned in ids:
            try:
                handle = _handle(assigned)
                found.append(GpuDevice(assigned, pynvml.nvmlDeviceGetIndex(handle),
                                       _text(pynvml.nvmlDeviceGetUUID(handle)),
                                       pynvml.nvmlDeviceGetMinorNumber(handle),
                                       _proc_name(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))))
            except (pynvml.NVMLError, ValueError) as exc:
                return found, f"NVML knows no GPU {assigned!r} on this machine ({exc})"
        return found, None
    finally:
        pynvml.nvmlShutdown()


def _proc_name(bus_id: str) -> str:
    """NVML's PCI bus id ("00000000:3B:00.0") as the driver's /proc entry names it ("0000:3b:00.0")."""
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}".lower() if rest else bus_id.lower()


def visible_uuids() -> list[str]:
    """The UUIDs of the GPUs this process can open (inside a lease: those bound into it); a GPU
    NVML counts but cannot open, its device node absent, is not one it sees."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        seen = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                seen.append(_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))))
            except pynvml.NVMLError:
                continue
        return seen
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()
