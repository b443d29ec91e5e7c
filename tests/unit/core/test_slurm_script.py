"""The sbatch script is a pure function of the plan, the spec and the settings: its #SBATCH lines say what
Slurm allocates, and its one srun line starts one node task per node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.config import Executor, Settings
from core.launch import show_planned
from core.slurm_script import batch_script, time_limit
from jobspec.plan import Plan, resolve_plan
from jobspec.spec import JobSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits_ddp_cpu.json"
RUNS = Path("/shared/runs")
PROJECT = Path("/srv/trainyard")
PYTHON = "/venv/bin/python"


def slurm_settings(**fields: Any) -> Settings:
    """Every field the script reads, said outright: the machine's TRAINYARD_* variables don't count."""
    defaults: dict[str, Any] = {
        "runs_dir": RUNS,
        "slurm_partition": None,
        "slurm_startup_s": 600,
        "slurm_signal_lead_s": 60,
        "slurm_cpus_per_gpu": 8,
    }
    return Settings(**{**defaults, **fields})


def two_node_spec(**sections: Any) -> JobSpec:
    """examples/digits_ddp_cpu.json on two nodes (2 ranks each); keyword arguments replace whole sections."""
    body = json.loads(EXAMPLE.read_text())
    body["parallel"] = {**body["parallel"], "nnodes": 2}
    return JobSpec.model_validate({**body, **sections})


def gpu_spec(**sections: Any) -> JobSpec:
    body = {
        "model": {"arch": "mlp"},
        "data": {"dataset": "synthetic"},
        "parallel": {"strategy": "ddp", "num_gpus": 4, "nnodes": 2},
    }
    return JobSpec.model_validate({**body, **sections})


def script_of(spec: JobSpec, settings: Settings | None = None, project: Path = PROJECT) -> str:
    return batch_script(resolve_plan(spec), spec, 7, settings or slurm_settings(), PYTHON, project)


def directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_a_two_node_cpu_job_script_is_exact() -> None:
    assert script_of(two_node_spec()) == "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --job-name=trainyard-7",
            "#SBATCH --nodes=2",
            "#SBATCH --ntasks-per-node=1",
            "#SBATCH --cpus-per-task=2",
            "#SBATCH --signal=TERM@60",
            "#SBATCH --requeue",
            "#SBATCH --nice=100",
            '#SBATCH --output="/shared/runs/.slurm/7/batch.log"',
            "#SBATCH --open-mode=append",
            "set -eu",
            "cd /srv/trainyard",
            "exec srun --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 "
            "/venv/bin/python -m worker.executors.slurm.node --job 7",
            "",
        ]
    )


def test_a_cpu_job_asks_for_no_gpu_and_no_time_limit() -> None:
    options = directives(script_of(two_node_spec()))
    assert not [option for option in options if option.startswith(("--gres", "--time", "--partition"))]


def test_a_gpu_job_asks_for_its_gpus_per_node_and_cores_per_gpu() -> None:
    script = script_of(gpu_spec(), slurm_settings(slurm_cpus_per_gpu=6))
    options = directives(script)
    assert "--nodes=2" in options
    assert "--gres=gpu:4" in options
    assert "--cpus-per-task=24" in options
    # Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation: said again, or each node's
    # task would get one core.
    assert "exec srun --ntasks-per-node=1 --cpus-per-task=24 " in script


@pytest.mark.parametrize(
    ("max_runtime_s", "startup_s", "lead_s", "expected"),
    [
        (3600, 600, 60, "1:11:00"),  # 4260 s: exactly 71 minutes
        (3601, 600, 60, "1:12:00"),  # a second over a minute is a whole minute more
        (55, 0, 5, "0:01:00"),
        (56, 0, 5, "0:02:00"),
        (1, 0, 5, "0:01:00"),  # Slurm's least: one minute
        (2 * 86400, 0, 60, "48:01:00"),  # hours past a day, not days-hours
    ],
)
def test_the_time_limit_is_runtime_startup_and_lead_in_whole_minutes(
    max_runtime_s: int, startup_s: int, lead_s: int, expected: str
) -> None:
    settings = slurm_settings(slurm_startup_s=startup_s, slurm_signal_lead_s=lead_s)
    assert time_limit(max_runtime_s, settings) == expected
    spec = two_node_spec(limits={"max_runtime_s": max_runtime_s})
    options = directives(script_of(spec, settings))
    assert f"--time={expected}" in options
    assert f"--signal=TERM@{lead_s}" in options


@pytest.mark.parametrize(("priority", "nice"), [(100, 0), (0, 100), (-100, 200), (25, 75)])
def test_priority_becomes_a_nice_that_is_never_negative(priority: int, nice: int) -> None:
    options = directives(script_of(two_node_spec(priority=priority)))
    assert [option for option in options if option.startswith("--nice")] == [f"--nice={nice}"]


def test_the_partition_is_named_only_when_set() -> None:
    assert "--partition=gpu-a100" in directives(
        script_of(two_node_spec(), slurm_settings(slurm_partition="gpu-a100"))
    )
    assert not [o for o in directives(script_of(two_node_spec())) if o.startswith("--partition")]


def test_the_srun_line_runs_one_node_task_per_node() -> None:
    script = script_of(two_node_spec())
    srun = [line for line in script.splitlines() if "srun" in line]
    assert len(srun) == 1
    assert srun[0].startswith("exec srun --ntasks-per-node=1 ")
    assert srun[0].endswith(f"{PYTHON} -m worker.executors.slurm.node --job 7")


def test_a_project_path_with_a_space_is_quoted_for_the_shell() -> None:
    script = script_of(two_node_spec(), project=Path("/home/ann/my project"))
    assert "cd '/home/ann/my project'" in script.splitlines()


@pytest.mark.parametrize(
    ("runs_dir", "output"),
    [
        # sbatch splits an #SBATCH line at spaces outside quotes, and takes an unquoted '#' for a comment.
        (Path("/home/ann/my project/var/runs"), '"/home/ann/my project/var/runs/.slurm/7/batch.log"'),
        (Path("/scratch/#1/runs"), '"/scratch/#1/runs/.slurm/7/batch.log"'),
        (Path('/scratch/say "hi"/runs'), '"/scratch/say \\"hi\\"/runs/.slurm/7/batch.log"'),
    ],
)
def test_the_batch_log_path_is_quoted_for_sbatch(runs_dir: Path, output: str) -> None:
    options = directives(script_of(two_node_spec(), slurm_settings(runs_dir=runs_dir)))
    assert f"--output={output}" in options


def planned(executor: Executor) -> tuple[Plan, JobSpec, Settings]:
    spec = two_node_spec()
    plan = resolve_plan(spec)
    settings = slurm_settings(executor=executor)
    show_planned(plan, spec, settings, 7)
    return plan, spec, settings


def test_a_dry_run_shows_the_script_with_slurm_deciding() -> None:
    plan, spec, settings = planned(Executor.SLURM)
    assert plan.batch_script == batch_script(resolve_plan(spec), spec, 7, settings, "python")
    assert "#SBATCH --nodes=2" in plan.batch_script
    assert plan.argv[:3] == ["python", "-m", "torch.distributed.run"]


def test_a_dry_run_shows_no_script_with_local_workers() -> None:
    plan, _, _ = planned(Executor.LOCAL)
    assert plan.batch_script is None
    assert plan.argv[:3] == ["python", "-m", "torch.distributed.run"]
