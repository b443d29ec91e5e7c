"""Which GPUs this worker may lease: NVML's (or a fake inventory), narrowed by its CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from core.config import Settings
from worker.gpus import GpuInfo, apply_mask, fake_gpus, host_gpus, nvml_gpus, sample_gpus

GPUS = [GpuInfo(i, f"GPU-{i}aaaa-bbbb", "H100", 81559, 0, 0) for i in range(4)]


def settings(inventory: str | None) -> Settings:
    return Settings(gpu_inventory=inventory)


def test_inventory_replaces_discovery() -> None:
    assert [g.index for g in host_gpus(settings("3, 1,0"), environ={})] == [0, 1, 3]
    assert host_gpus(settings(""), environ={}) == []  # a CPU box
    assert fake_gpus("2")[0].public() == {
        "index": 2,
        "uuid": "fake-2",
        "name": "fake",
        "memory_total_mb": 0,
        "memory_used_mb": 0,
        "utilization_pct": 0,
    }


def test_worker_mask_limits_what_it_may_lease() -> None:
    gpus = host_gpus(settings("0,1,2,3"), environ={"CUDA_VISIBLE_DEVICES": "3,1"})
    assert [g.index for g in gpus] == [1, 3]  # physical ids, whatever order the mask lists them in


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("2", [2]),
        ("GPU-1aaaa", [1]),  # a UUID prefix, as CUDA accepts
        ("0,7,2", [0]),  # CUDA stops at the first entry that names no device
        ("", []),
        ("-1", []),
    ],
)
def test_mask_forms(mask: str | None, expected: list[int]) -> None:
    assert [g.index for g in apply_mask(GPUS, mask)] == expected


def test_no_nvml_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as on a box without the library
    assert nvml_gpus() == []


class FakeNvml:
    """The slice of pynvml that discovery uses, for two GPUs; older releases return bytes for text."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.shut_down = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * 1024**3, used=handle * 1024**3)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle == 9:
            raise self.NVMLError("GPU is lost")
        return SimpleNamespace(gpu=50 * handle)


def test_nvml_discovery_reads_each_gpu_then_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert nvml_gpus() == [
        GpuInfo(0, "GPU-0", "NVIDIA H100", 81920, 0, 0),
        GpuInfo(1, "GPU-1", "NVIDIA H100", 81920, 1024, 50),
    ]
    assert nvml.shut_down


def test_a_gpu_nvml_cannot_read_is_listed_as_unreadable_beside_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reporting none would take every GPU of the host out of placement and leave the failing one unjudged."""
    nvml = FakeNvml()
    monkeypatch.setattr(nvml, "nvmlDeviceGetHandleByIndex", lambda index: 9 if index == 1 else index)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert nvml_gpus() == [
        GpuInfo(0, "GPU-0", "NVIDIA H100", 81920, 0, 0),
        GpuInfo(1, "", "unreadable (GPU is lost)", 0, 0, 0),
    ]
    assert nvml.shut_down


def test_nvml_failing_to_count_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()

    def fails() -> int:
        raise nvml.NVMLError("Unknown Error")

    monkeypatch.setattr(nvml, "nvmlDeviceGetCount", fails)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert nvml_gpus() == []


class MissingLibraryNvml:
    """pynvml on a box without the driver's library: init fails, having searched the library path."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    def __init__(self) -> None:
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        raise self.NVMLError_LibraryNotFound()


def test_a_missing_nvml_library_is_searched_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = MissingLibraryNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert nvml_gpus() == [] and sample_gpus([0]) == {} and nvml_gpus() == []
    assert nvml.inits == 1, "each heartbeat searched the library path again"
