"""What NVML says is wrong with each of this host's GPUs, read at every heartbeat (core/gpu_health.py judges
it): critical Xid events, uncorrectable ECC errors, memory pages or rows waiting for a reset to be retired or
remapped, a GPU that fell off the bus, and the slowdowns the hardware imposes.

DCGM's health watches read the same counters; NVML is what every driver install has, and what the worker
already reads (worker/gpus.py). An Xid is an event, not a counter: it is seen only by an event set registered
before it happens, so one set lives as long as the worker process (XidWatch) and each beat takes what it
caught since the last.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from core.gpu_health import Faults

log = logging.getLogger(__name__)

# The Xids DCGM and the cloud providers' GPU health checks treat as the hardware failing (NVIDIA's Xid
# catalogue); the rest (13, 31, 43: a kernel's fault, a page fault, a stopped channel) are most often the
# job's own doing and come back in its error instead.
CRITICAL_XIDS = {
    48: "a double-bit ECC error (Xid 48)",
    64: "a row remapping failed (Xid 64)",
    74: "an NVLink error (Xid 74)",
    79: "it fell off the bus (Xid 79)",
    94: "a contained ECC error (Xid 94)",
    95: "an uncontained ECC error (Xid 95)",
    119: "its GSP timed out (Xid 119)",
    120: "its GSP failed (Xid 120)",
}
# Throttle (clock event) reasons: the hardware slows the GPU down, and every job on it with it.
SLOWDOWNS = {
    0x08: "the hardware slowed it down (HW slowdown)",
    0x20: "the driver slowed it down for heat (SW thermal slowdown)",
    0x40: "it slowed itself down for heat (HW thermal slowdown)",
    0x80: "its power brake slowed it down (HW power brake)",
}


# A query this GPU or driver does not answer (ECC off, a consumer GPU, no permission in a container): nothing
# to judge, not a fault.
UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
LOST = ("NVMLError_GpuIsLost",)


def _is(pynvml: Any, exc: Exception, names: tuple[str, ...]) -> bool:
    """Whether `exc` is one of these nvidia-ml-py error classes (those this release defines)."""
    return isinstance(exc, tuple(getattr(pynvml, name) for name in names if hasattr(pynvml, name)))


def _memory_faults(pynvml: Any, handle: Any) -> list[str]:
    found = []
    uncorrected = pynvml.nvmlDeviceGetTotalEccErrors(
        handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
    )
    if uncorrected:
        errors = "error" if uncorrected == 1 else "errors"
        found.append(f"{uncorrected} uncorrectable ECC {errors} since the driver loaded")
    return found


def _retirement_faults(pynvml: Any, handle: Any) -> list[str]:
    if pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == pynvml.NVML_FEATURE_ENABLED:
        return ["memory pages wait to be retired: reset the GPU"]
    return []


def _remap_faults(pynvml: Any, handle: Any) -> list[str]:
    _corrected, _uncorrected, pending, failed = pynvml.nvmlDeviceGetRemappedRows(handle)
    found = []
    if failed:
        found.append("a memory row could not be remapped: the GPU needs service")
    if pending:
        found.append("memory rows wait to be remapped: reset the GPU")
    return found


def _slowdowns(pynvml: Any, handle: Any) -> list[str]:
    # The newer name first: nvidia-ml-py 12.535 renamed throttle reasons to clock event reasons.
    read = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons = int((read or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)(handle))
    return [said for bit, said in SLOWDOWNS.items() if reasons & bit]


CRITICAL_READS = (_memory_faults, _retirement_faults, _remap_faults)


def read_faults(pynvml: Any, indices: Iterable[int], xids: dict[int, list[int]]) -> dict[int, Faults]:
    """Each of these GPUs' faults now, with the Xids caught since the last beat; a GPU whose reads failed
    otherwise is left out (not judged this beat), one NVML no longer reaches is critical."""
    faults = {}
    for index in indices:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            critical = [CRITICAL_XIDS[xid] for xid in xids.get(index, []) if xid in CRITICAL_XIDS]
            for read in CRITICAL_READS:
                critical += _answered(pynvml, read, handle)
            faults[index] = Faults(tuple(critical), tuple(_answered(pynvml, _slowdowns, handle)))
        except pynvml.NVMLError as exc:
            if _is(pynvml, exc, LOST):
                faults[index] = Faults(("it fell off the bus: NVML no longer reaches it",))
            else:
                log.warning("NVML could not read GPU %s's health, not judging it this beat: %s", index, exc)
    return faults


def _answered(pynvml: Any, read: Any, handle: Any) -> list[str]:
    try:
        found: list[str] = read(pynvml, handle)
    except pynvml.NVMLError as exc:
        if _is(pynvml, exc, UNSUPPORTED):
            return []
        raise
    return found


class XidWatch:
    """One NVML event set for critical Xids on every GPU, registered once per worker process and drained at
    each beat. NVML's init is counted, so the per-beat init and shutdown of worker/gpus.py leave it open."""

    def __init__(self) -> None:
        self.pynvml: Any = None
        self.events: Any = None
        self.registered: set[int] = set()

    def start(self, pynvml: Any, indices: Iterable[int]) -> None:
        """Register what is not registered yet; a GPU or driver that cannot report events is left out."""
        if self.events is None:
            pynvml.nvmlInit()  # held for the process's life, so the set stays valid between beats
            self.pynvml, self.events = pynvml, pynvml.nvmlEventSetCreate()
        for index in set(indices) - self.registered:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
            except pynvml.NVMLError as exc:
                log.info("GPU %s cannot report Xid events to this worker, judging it without: %s", index, exc)
            self.registered.add(index)

    def caught(self) -> dict[int, list[int]]:
        """The Xids each GPU reported since the last call, without waiting."""
        pynvml, found = self.pynvml, dict[int, list[int]]()
        if pynvml is None:
            return {}
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(self.events, 0)
            except pynvml.NVMLError:  # NVMLError_Timeout: none left
                return found
            index = int(pynvml.nvmlDeviceGetIndex(data.device))
            found.setdefault(index, []).append(int(data.eventData))
            log.warning("GPU %s reported Xid %s", index, data.eventData)
