"""The one benchmark command: seed-style loop, hand-written ceiling and Trainyard job on one workload.

    python -m bench.run --workload alexnet|resnet50 --gpus 1|2 [--compile] [--steps N] [--seed-amp] [--smoke]

Each variant runs in a process of its own (torchrun for more than one GPU) so none inherits another's CUDA
context, allocator or compiled kernels; each prints one result line that this parent parses. The table is
printed and, unless --smoke, appended to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from bench import result
from bench.budget import Budget
from bench.report import record, section
from bench.result import SKIPPED, Result, exit_code
from bench.table import markdown_table
from bench.workload import ARCHS, Workload, preset, workload_argv

# The device tool allows a command 10 minutes; one variant must leave room for the others.
CHILD_TIMEOUT_S = 540
STOP_GRACE_S = 15


@dataclass(frozen=True)
class Child:
    name: str  # the row's name should the child fail before reporting
    argv: list[str]


def launcher(procs: int) -> list[str]:
    """What precedes `-m module`: the interpreter, and torchrun when there is more than one process (gloo
    ranks on the CPU)."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs)]
    return [sys.executable, *(torchrun if procs > 1 else [])]


def child_argv(module: str, workload: Workload, procs: int, extra: list[str]) -> list[str]:
    """`python -m module ...`, under torchrun when there is more than one process."""
    return [*launcher(procs), "-m", module, *workload_argv(workload), *extra]


def children(workload: Workload, gpus: int, compile_model: bool, seed_amp: bool) -> list[Child]:
    """Seed loop first and ceiling second: the table's ratios divide by those two rows."""
    compile_flag = ["--compile"] if compile_model else []
    return [
        Child("seed loop", child_argv("bench.seed_loop", workload, gpus, ["--amp"] if seed_amp else [])),
        Child("ceiling", child_argv("bench.ceiling_loop", workload, gpus, compile_flag)),
        # The job starts its own torchrun through the service, so this child is a single process.
        Child(
            "Trainyard job",
            child_argv("bench.trainyard_job", workload, 1, ["--gpus", str(gpus), *compile_flag]),
        ),
    ]


def run_child(child: Child, budget: Budget) -> Result:
    """Run one variant; its stderr streams through so progress and tracebacks stay visible."""
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return result.failed(child.name, f"{SKIPPED}: out of time")
    print(f"\n>>> {child.name}: {shlex.join(child.argv)}", file=sys.stderr, flush=True)
    # A session of its own, so the whole tree (torchrun, the stack's servers) can be signalled at once.
    proc = subprocess.Popen(child.argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid)
        proc.communicate()
        return result.failed(child.name, f"over {timeout:.0f}s")
    # A child that died early can leave processes behind (a rank, a server): none may outlive it.
    stop_group(proc.pid)
    found = result.parse(stdout)
    if proc.returncode or found is None:
        error = f"exit {proc.returncode}, no result" if found is None else f"exit {proc.returncode}"
        return result.failed(child.name, error)
    return found


def stop_group(group: int) -> None:
    """SIGTERM first, SIGKILL after a grace. A group kill does not reach torchrun's ranks (torchrun starts
    each in a session of its own) nor a job the worker started, but torchrun and the worker stop those
    themselves on SIGTERM, given the time."""
    with contextlib.suppress(ProcessLookupError):  # raised once no process of the group is left
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            os.killpg(group, 0)
            time.sleep(0.2)
        os.killpg(group, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=ARCHS, required=True)
    parser.add_argument("--gpus", type=int, choices=(1, 2), default=1)
    parser.add_argument("--compile", action="store_true", help="torch.compile in the ceiling and the job")
    parser.add_argument("--steps", type=int, help="timed steps (after warm-up) per variant")
    parser.add_argument("--seed-amp", action="store_true", help="seed loop with fp16 autocast + GradScaler")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (gloo); prints only")
    parser.add_argument("--budget-s", type=float, default=CHILD_TIMEOUT_S, help="skip variants past this")
    args = parser.parse_args()
    workload = preset(args.workload, smoke=args.smoke, steps=args.steps)
    budget = Budget(args.budget_s)
    children_ = children(workload, args.gpus, args.compile, args.seed_amp)
    results = [run_child(child, budget) for child in children_]
    device = next((r.device for r in results if r.device), "unknown device")
    table = markdown_table(results, seed=results[0], ceiling=results[1])
    record(section(device, args.gpus, table), args.smoke)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
