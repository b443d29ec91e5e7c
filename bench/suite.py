"""One command per device call: every benchmark of issues 4 and 8 in two calls of at most 9 minutes.

    python -m bench.suite --call 1|2 [--smoke]

Call 1 (issue 4): ResNet-50 on 1 GPU eager and on 2 GPUs (DDP) against the seed loop and the ceiling
(bench.run), pipeline vs model parallel (bench.pipeline), then the compiled 1-GPU table, which takes what
time is left (compiling costs a minute or more per process).
Call 2 (issues 8 and 4): scaling of ResNet-50 over 1, 2, 4 GPUs with DP beside (bench.scaling), the
service's overheads (bench.overheads), then AlexNet's scaling with what time is left.

Each step runs in a process group of its own with a budget it keeps by skipping what does not fit (a skipped
or failed variant is a row saying so); a step that overruns its budget anyway is stopped and noted in
RESULTS.md, and the suite goes on. It ends by saying where RESULTS.md is, for the device command to copy it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass

from bench.budget import MIN_USEFUL_S, Budget
from bench.report import RESULTS_MD, record, section
from bench.run import stop_group

# A device command may run 10 minutes and the lead's allows 9: this leaves time to install the wheels,
# stop the last step's servers and copy RESULTS.md.
TOTAL_S = 500
# What a step may overrun its own budget by (a job started near the end, then cancelled; servers stopping)
# before the suite stops it.
GRACE_S = 60


@dataclass(frozen=True)
class Step:
    module: str
    args: list[str]
    cap_s: float  # its budget when time allows; the last step of a call takes whatever is left

    def argv(self, budget_s: float, smoke: bool) -> list[str]:
        args = [*self.args, "--smoke"] if smoke else self.args
        return [sys.executable, "-m", self.module, *args, "--budget-s", f"{budget_s:.0f}"]


def steps(call: int, smoke: bool) -> list[Step]:
    """The steps of a call; the GPU step counts (warm-up 20 + these) keep each within its cap."""
    timed = (lambda n: []) if smoke else (lambda n: ["--steps", str(n)])
    if call == 1:
        return [
            Step("bench.run", ["--workload", "resnet50", "--gpus", "1", *timed(60)], 120),
            Step("bench.run", ["--workload", "resnet50", "--gpus", "2", *timed(60)], 120),
            Step("bench.pipeline", timed(60), 120),
            Step("bench.run", ["--workload", "resnet50", "--gpus", "1", "--compile", *timed(30)], TOTAL_S),
        ]
    return [
        Step("bench.scaling", ["--workload", "resnet50", "--gpus", "1,2,4", *timed(40)], 170),
        Step("bench.overheads", [], 270),
        Step("bench.scaling", ["--workload", "alexnet", "--gpus", "1,2,4", *timed(60)], TOTAL_S),
    ]


def run_step(step: Step, budget: Budget, smoke: bool) -> str:
    """Run one step within what the suite has left; what went wrong, or "" when it ran to the end."""
    left = budget.remaining() - GRACE_S
    if left < MIN_USEFUL_S:
        return "skipped: out of time"
    argv = step.argv(min(step.cap_s, left), smoke)
    print(f"\n=== {' '.join(argv[2:])}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(argv, start_new_session=True)  # its group: the stack's servers and ranks too
    try:
        code = proc.wait(timeout=min(step.cap_s, left) + GRACE_S)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid)
        proc.wait()
        return f"stopped after {min(step.cap_s, left) + GRACE_S:.0f}s"
    stop_group(proc.pid)  # nothing it started may outlive it into the next step
    return f"exit {code}" if code else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call", type=int, choices=(1, 2), required=True)
    parser.add_argument("--smoke", action="store_true", help="every step with --smoke, on the CPU")
    args = parser.parse_args()
    budget = Budget(TOTAL_S)
    outcomes = [(step, run_step(step, budget, args.smoke)) for step in steps(args.call, args.smoke)]
    lines = [f"- `{step.module} {' '.join(step.args)}`: {why or 'done'}" for step, why in outcomes]
    trouble = any(why for _, why in outcomes)
    # Steps that ran to the end recorded their own tables; a note is kept only when some did not.
    record(section(f"bench.suite call {args.call}", None, "\n".join(lines)), args.smoke or not trouble)
    print(f"\nRESULTS.md: {RESULTS_MD}  (device command: cp bench/RESULTS.md $OUT/)", flush=True)
    return 1 if trouble else 0


if __name__ == "__main__":
    sys.exit(main())
