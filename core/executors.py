"""What each executor is, as the API and the core must know it: a torch-free description, with no worker code.

The worker's side of an executor (worker/executors/) launches, follows and ends jobs; the API and the core
ask only these traits, so that a spec is judged and a plan shown for the executor the settings chose, and a
new executor is one more entry here beside its folder under worker/executors/."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.config import Executor, Settings
from core.slurm_script import batch_script
from jobspec.plan import Plan
from jobspec.spec import JobSpec

# What an executor submits for a job, shown with its plan: (plan, spec, job id, settings, python) -> text.
SubmittedText = Callable[[Plan, JobSpec, "int | str", Settings, str], str]


@dataclass(frozen=True)
class ExecutorTraits:
    name: Executor
    # Who chooses each job's hosts and GPUs, as a user reads it in an error.
    placed_by: str
    # Trainyard's own workers place jobs: a spec is judged against the hosts they registered and may pin
    # parallel.host and parallel.gpus. Otherwise the executor's scheduler places them, and a spec no node
    # can run waits with that scheduler's reason.
    places_jobs: bool
    # What the executor submits for a job (a batch script), shown with the plan; None when it runs the
    # planned argv itself.
    submitted: SubmittedText | None


LOCAL = ExecutorTraits(Executor.LOCAL, placed_by="Trainyard", places_jobs=True, submitted=None)
SLURM = ExecutorTraits(Executor.SLURM, placed_by="Slurm", places_jobs=False, submitted=batch_script)
TRAITS = {traits.name: traits for traits in (LOCAL, SLURM)}


def executor_traits(settings: Settings) -> ExecutorTraits:
    """The traits of the executor the settings chose (TRAINYARD_EXECUTOR)."""
    return TRAITS[settings.executor]
