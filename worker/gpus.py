"""This host's GPUs: NVML discovery, narrowed by the worker's own CUDA_VISIBLE_DEVICES; fakes for tests."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from core.config import Settings
from core.gpu_health import Faults
from core.gpu_series import GpuQuantity
from core.sandbox import GpuDevice
from worker.gpu_faults import XidWatch, read_faults

log = logging.getLogger(__name__)

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuInfo:
    index: int  # physical id: NVML's index, PCI bus order
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int
    utilization_pct: int

    def public(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes for names and UUIDs.
    return value.decode() if isinstance(value, bytes) else value


# The pynvml module whose library could not be loaded: asked again at every heartbeat, it searched the
# library path anew each time, most of an idle worker's CPU on a box without a driver. A library that is
# not installed does not appear under a running worker.
_library_missing: list[object] = []


@contextmanager
def _nvml(what: str) -> Iterator[Any]:
    """pynvml, initialised, for the block (shut down after it); None on a box without NVML."""
    try:
        import pynvml
    except ImportError as exc:
        log.debug("no NVML, so no %s: %s", what, exc)
        yield None
        return
    if pynvml in _library_missing:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, or DriverNotLoaded, on a CPU box
        if isinstance(exc, getattr(pynvml, "NVMLError_LibraryNotFound", ())):
            _library_missing.append(pynvml)
        log.debug("no NVML, so no %s: %s", what, exc)
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def nvml_gpus() -> list[GpuInfo]:
    """Every GPU NVML sees; [] on a box without a driver, where init fails."""
    with _nvml("GPUs") as pynvml:
        return [] if pynvml is None else _listed(pynvml)


def _listed(pynvml: Any) -> list[GpuInfo]:
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        log.warning("NVML failed while counting GPUs, reporting none: %s", exc)
        return []
    return [_gpu(pynvml, index) for index in range(count)]


def _gpu(pynvml: Any, index: int) -> GpuInfo:
    """One GPU as NVML describes it; one NVML cannot read (fallen off the bus, say) is still listed, as
    unreadable, so that the host keeps its other GPUs and this one is judged (worker/gpu_faults.py)."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuInfo(
            index=index,
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_total_mb=int(memory.total) // _MIB,
            memory_used_mb=int(memory.used) // _MIB,
            utilization_pct=int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        )
    except pynvml.NVMLError as exc:
        log.warning("NVML could not read GPU %s, listing it as unreadable: %s", index, exc)
        return GpuInfo(index, "", f"unreadable ({exc})", 0, 0, 0)


def sample_gpus(indices: list[int]) -> dict[int, dict[GpuQuantity, float]]:
    """Each of these physical GPUs' telemetry now; {} where NVML cannot say (no driver, or it failed), since
    a missed sample must not cost the heartbeat that takes it."""
    with _nvml("GPU telemetry") as pynvml:
        return {} if pynvml is None else _sampled(pynvml, indices)


def _sampled(pynvml: Any, indices: list[int]) -> dict[int, dict[GpuQuantity, float]]:
    try:
        samples = {}
        for index in indices:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            samples[index] = {
                GpuQuantity.UTIL: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                GpuQuantity.MEMORY: float(int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB),
                GpuQuantity.POWER: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,  # milliwatts
                GpuQuantity.TEMPERATURE: float(
                    pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
                ),
                GpuQuantity.SM_CLOCK: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            }
        return samples
    except pynvml.NVMLError as exc:
        log.warning("NVML failed while sampling GPUs %s, skipping this sample: %s", indices, exc)
        return {}


_xids = XidWatch()


def gpu_faults(indices: list[int]) -> dict[int, Faults]:
    """What NVML says is wrong with each of these physical GPUs now (worker/gpu_faults.py); {} where it cannot
    say, so a GPU is never judged on a failed read."""
    with _nvml("GPU health") as pynvml:
        if pynvml is None:
            return {}
        try:
            _xids.start(pynvml, indices)
            return read_faults(pynvml, indices, _xids.caught())
        except pynvml.NVMLError as exc:
            log.warning(
                "NVML failed while reading GPU health %s, not judging them this beat: %s", indices, exc
            )
            return {}


def gpu_devices(indices: list[int]) -> list[GpuDevice]:
    """The UUID and device file of each of these physical GPUs, for a sandbox: the minor number of a GPU's
    /dev/nvidia file need not be its index. Raises when NVML cannot say, rather than bind the wrong file."""
    import pynvml

    pynvml.nvmlInit()
    try:
        devices = []
        for index in indices:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            devices.append(GpuDevice(uuid, f"/dev/nvidia{pynvml.nvmlDeviceGetMinorNumber(handle)}"))
        return devices
    finally:
        pynvml.nvmlShutdown()


def fake_gpus(inventory: str) -> list[GpuInfo]:
    ids = sorted({int(part) for part in inventory.split(",") if part.strip()})
    return [GpuInfo(i, f"fake-{i}", "fake", 0, 0, 0) for i in ids]


def apply_mask(gpus: list[GpuInfo], mask: str | None) -> list[GpuInfo]:
    """The GPUs a CUDA_VISIBLE_DEVICES value lets through, by index or UUID (prefix), in physical order.

    Like CUDA, the list ends at the first entry that names no GPU, so "-1" or "" hides them all.
    """
    if mask is None:
        return gpus
    kept: dict[int, GpuInfo] = {}
    for entry in (part.strip() for part in mask.split(",")):
        match = next((g for g in gpus if entry == str(g.index) or (entry and g.uuid.startswith(entry))), None)
        if match is None:
            break
        kept[match.index] = match
    return sorted(kept.values(), key=lambda g: g.index)


def host_gpus(settings: Settings, environ: Mapping[str, str] | None = None) -> list[GpuInfo]:
    """The GPUs this worker may lease: discovered (or faked), then narrowed by the worker's own mask."""
    env = os.environ if environ is None else environ
    found = fake_gpus(settings.gpu_inventory) if settings.gpu_inventory is not None else nvml_gpus()
    return apply_mask(found, env.get("CUDA_VISIBLE_DEVICES"))
