"""What this host's side spends on one eager CUDA operation of no size (Python's dispatch and the launch),
here and now: what an eager step's launches and fsdp's hooks are made of, so a step bound by its host moves
with it from one machine to the next where its GPU-bound steps do not (bench/RESULTS.md, 2026-11-30 18:12).
The forecast scales its host-side terms by it (estimate.py). `python -m trainers.forecast.host_probe` prints
it in seconds for the worker, which runs it in a process of its own at its start and never creates a CUDA
context itself (worker/executors/local/host_probe.py); bench/forecast.py calls host_op_s()."""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

# A rank runs on whichever of the host's CPUs the scheduler gives it, and one CPU can launch slower than
# another: one probe per row, on whichever CPU it ran, read 7.1-7.5 or 9.5-10.5 us on one H200 host
# (bench/RESULTS.md, 2026-11-30 20:35). The figure is the mean over the CPUs this process may run on, this
# many of them at most, spread over the list.
CPUS = 32
WARM_UP = 200  # operations on a CPU before it is timed: the first after a move run from cold caches
OPERATIONS = 1000  # timed on each CPU


def host_op_s() -> float | None:
    """Seconds per tiny eager operation on GPU 0, the mean over this process's CPUs; None without a GPU."""
    if not torch.cuda.is_available():
        return None
    return statistics.fmean(per_cpu_op_s().values())


def per_cpu_op_s() -> dict[int, float]:
    """Seconds per tiny eager operation on GPU 0 from each CPU sampled, moving this process from one to the
    next, and back to all of them after."""
    allowed = sorted(os.sched_getaffinity(0))
    sampled = allowed[:: max(1, len(allowed) // CPUS)]
    counter = torch.zeros(1, device="cuda")
    try:
        return {cpu: _op_s_on(cpu, counter) for cpu in sampled}
    finally:
        os.sched_setaffinity(0, allowed)


def _op_s_on(cpu: int, counter: torch.Tensor) -> float:
    os.sched_setaffinity(0, {cpu})
    for _ in range(WARM_UP):
        counter.add_(1)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(OPERATIONS):
        counter.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / OPERATIONS


def main() -> int:
    op_s = host_op_s()
    if op_s is None:
        print("no CUDA device is visible to this process", file=sys.stderr)
        return 1
    print(op_s, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
