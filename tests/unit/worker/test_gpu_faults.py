"""A GPU's faults as NVML reports them, at nvidia-ml-py's boundary: its real error classes and constants, and
for each fault kind the answers NVML gives a GPU that has it (recorded from NVML's documentation of each
query), so what is judged is exactly what a driver would say."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from core.gpu_health import Faults
from worker import gpus as worker_gpus
from worker.gpu_faults import XidWatch, read_faults

# A sound H100's answers: ECC on and clean, no pages pending retirement (older GPUs) and no rows pending
# remapping (Ampere on), clocks held back only because the GPU idles (GPU idle, 0x1).
SOUND: dict[str, Any] = {
    "nvmlDeviceGetTotalEccErrors": 0,
    "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVML_FEATURE_DISABLED,
    "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
    "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
}


class RecordedNvml:
    """pynvml's slice that health reads, answering as recorded per GPU; events as queued."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, answers: dict[int, dict[str, Any]]) -> None:
        self.answers = answers
        self.events: list[tuple[int, int]] = []  # (GPU, Xid) as the driver queues them
        self.registered: list[int] = []
        self.inits = 0

    def _answer(self, name: str, handle: int) -> Any:
        answer = self.answers[handle].get(name, SOUND.get(name))
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.answers[index].get("lost"):
            raise pynvml.NVMLError_GpuIsLost()
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return int(self._answer("nvmlDeviceGetTotalEccErrors", handle))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return int(self._answer("nvmlDeviceGetRetiredPagesPendingStatus", handle))

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        rows: tuple[int, int, int, int] = self._answer("nvmlDeviceGetRemappedRows", handle)
        return rows

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return int(self._answer("nvmlDeviceGetCurrentClocksEventReasons", handle))

    def nvmlEventSetCreate(self) -> str:
        return "event set"

    def nvmlDeviceRegisterEvents(self, handle: int, kinds: int, events: str) -> None:
        assert kinds == pynvml.nvmlEventTypeXidCriticalError and events == "event set"
        self._answer("nvmlDeviceRegisterEvents", handle)
        self.registered.append(handle)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0, "a beat must never wait for events"
        if not self.events:
            raise pynvml.NVMLError_Timeout()
        gpu, xid = self.events.pop(0)
        return SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)


def faults_of(answers: dict[str, Any], xids: list[int] | None = None) -> Faults:
    nvml = RecordedNvml({0: answers})
    return read_faults(nvml, [0], {0: xids or []})[0]


def test_a_sound_gpu_has_no_faults() -> None:
    assert faults_of({}) == Faults()


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        ({"nvmlDeviceGetTotalEccErrors": 3}, "3 uncorrectable ECC errors since the driver loaded"),
        (
            {"nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVML_FEATURE_ENABLED},
            "memory pages wait to be retired: reset the GPU",
        ),
        ({"nvmlDeviceGetRemappedRows": (2, 1, 1, 0)}, "memory rows wait to be remapped: reset the GPU"),
        (
            {"nvmlDeviceGetRemappedRows": (0, 8, 0, 1)},
            "a memory row could not be remapped: the GPU needs service",
        ),
    ],
)
def test_each_memory_fault_is_critical(answers: dict[str, Any], said: str) -> None:
    assert faults_of(answers) == Faults(critical=(said,))


def test_a_gpu_nvml_no_longer_reaches_fell_off_the_bus() -> None:
    nvml = RecordedNvml({0: {}, 1: {"lost": True}})
    assert read_faults(nvml, [0, 1], {}) == {
        0: Faults(),
        1: Faults(critical=("it fell off the bus: NVML no longer reaches it",)),
    }


def test_slowdowns_the_hardware_imposes_degrade_and_idle_clocks_do_not() -> None:
    hot = faults_of({"nvmlDeviceGetCurrentClocksEventReasons": 0x1 | 0x4 | 0x40 | 0x80})  # idle, power cap
    assert hot == Faults(
        slow=(
            "it slowed itself down for heat (HW thermal slowdown)",
            "its power brake slowed it down (HW power brake)",
        )
    )


def test_queries_a_gpu_does_not_answer_are_not_faults() -> None:
    """ECC off, a GPU without page retirement (Ampere on) or row remapping (before Ampere), or no permission
    to ask inside a container: nothing to judge."""
    answers = {
        "nvmlDeviceGetTotalEccErrors": pynvml.NVMLError_NotSupported(),
        "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVMLError_NotSupported(),
        "nvmlDeviceGetRemappedRows": pynvml.NVMLError_NoPermission(),
    }
    assert faults_of(answers) == Faults()


def test_a_failed_read_leaves_the_gpu_unjudged_this_beat() -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceGetTotalEccErrors": pynvml.NVMLError_Unknown()}, 1: {}})
    assert read_faults(nvml, [0, 1], {}) == {1: Faults()}


def test_critical_xids_drain_and_the_jobs_own_do_not() -> None:
    assert faults_of({}, xids=[13, 31, 43]) == Faults()  # a kernel's fault, a page fault: the job's
    assert faults_of({}, xids=[79, 48]) == Faults(
        critical=("it fell off the bus (Xid 79)", "a double-bit ECC error (Xid 48)")
    )


def test_the_xid_watch_registers_once_and_takes_what_was_caught_between_beats() -> None:
    nvml = RecordedNvml({0: {}, 1: {"nvmlDeviceRegisterEvents": pynvml.NVMLError_NotSupported()}})
    watch = XidWatch()
    watch.start(nvml, [0, 1])
    watch.start(nvml, [0, 1])
    assert nvml.registered == [0] and nvml.inits == 1  # GPU 1 cannot report events: judged without them
    assert watch.caught() == {}
    nvml.events += [(0, 79), (0, 13)]
    assert watch.caught() == {0: [79, 13]}
    assert watch.caught() == {}


def test_each_beat_reads_health_through_the_workers_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = RecordedNvml({0: {"nvmlDeviceGetTotalEccErrors": 1}, 1: {}})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(worker_gpus, "_xids", XidWatch())
    nvml.events.append((1, 95))
    assert worker_gpus.gpu_faults([0, 1]) == {
        0: Faults(critical=("1 uncorrectable ECC error since the driver loaded",)),
        1: Faults(critical=("an uncontained ECC error (Xid 95)",)),
    }
    assert nvml.inits == 1, "the watch keeps NVML open; each beat's own init is shut down"
