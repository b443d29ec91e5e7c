"""What a child process reports to `bench.run`: one prefixed JSON line on stdout.

No torch import, so the parent and the unit tests can use it cheaply.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

# An error starting so is a variant deliberately not run (no GPU for it, out of time), not a failure.
SKIPPED = "skipped"
# Libraries (torchrun, NCCL, torch.compile) may print to stdout too; the prefix keeps the result findable.
PREFIX = "BENCH_RESULT "


@dataclass(frozen=True)
class Result:
    variant: str
    images_per_s: float | None  # global: all ranks together
    peak_mem_mb: float | None  # the largest of the ranks' peaks; None where not measured (CPU)
    latency_s: float | None = None  # Trainyard only: POST to the first optimizer step
    device: str = ""
    world_size: int = 1
    final_loss: float | None = None  # proof that the timed steps trained, not only ran
    error: str = ""  # set by the parent when the child gave no result
    tail_s: float | None = None  # overheads: from the last step's report to done (the final checkpoint)
    phases: tuple[tuple[str, float], ...] = ()  # Trainyard only: the job's start-up timings, phase by phase


def failed(variant: str, error: str) -> Result:
    """A row without numbers: the variant failed, or was skipped (see SKIPPED), and `error` says why."""
    return Result(variant=variant, images_per_s=None, peak_mem_mb=None, error=error)


def exit_code(results: list[Result]) -> int:
    """1 when a variant failed; skipped ones are not failures."""
    return 1 if any(r.error and not r.error.startswith(SKIPPED) for r in results) else 0


def emit(result: Result) -> None:
    print(PREFIX + json.dumps(asdict(result)), flush=True)


def parse(stdout: str) -> Result | None:
    """The last result line of a child's stdout, or None when it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(PREFIX):
            fields = json.loads(line[len(PREFIX) :])
            # JSON has no tuples: the phases come back as lists of lists.
            fields["phases"] = tuple((name, seconds) for name, seconds in fields.get("phases", ()))
            return Result(**fields)
    return None
