"""One node's task of a Slurm job: where its nodes meet, which GPUs it has, the attempt it waits for and
the torchrun command it becomes, all from Slurm's environment and the shared runs directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import Settings
from core.launch import Rendezvous
from core.slurm_script import BATCH_LOG, slurm_folder
from jobspec.files import JobFileRefused
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from worker.executors.slurm.attempts import NodeAttempt, attempt_file, wait_for_attempt, write_attempt
from worker.executors.slurm.node import allocated_cpus, allocated_gpus, main, node_command, rendezvous
from worker.executors.slurm.outcomes import node_error

ROOT = Path(__file__).resolve().parents[3]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits_ddp_cpu.json"
# What srun gives node 1 of a two-node job (each node's task sees its own SLURM_NODEID).
SECOND_NODE = {
    "SLURM_JOB_ID": "45678",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
    "SLURM_RESTART_COUNT": "0",
    "SLURM_CPUS_PER_TASK": "8",
}


def node_settings(tmp_path: Path) -> Settings:
    return Settings(
        runs_dir=tmp_path / "runs",
        data_dir=tmp_path / "data",
        compile_cache_dir=tmp_path / "compile-cache",
        rendezvous_timeout_s=120,
        environments="",
    )


def attempt(nnodes: int = 2) -> NodeAttempt:
    body = json.loads(EXAMPLE.read_text())
    body["parallel"] = {**body["parallel"], "nnodes": nnodes}
    spec = JobSpec.model_validate(body)
    config = RunConfig(job_id=7, attempt=3, spec=spec, plan=resolve_plan(spec))
    return NodeAttempt(config=config, sandboxed=False)


def test_one_node_needs_no_rendezvous(tmp_path: Path) -> None:
    env = {**SECOND_NODE, "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0"}
    assert rendezvous(7, 3, node_settings(tmp_path), env) is None


def test_two_nodes_meet_on_the_launch_node_at_a_port_from_the_job_id(tmp_path: Path) -> None:
    assert rendezvous(7, 3, node_settings(tmp_path), SECOND_NODE) == Rendezvous(
        nnodes=2,
        node_rank=1,
        endpoint="127.0.0.1:25678",  # 20000 + 45678 % 20000
        run_id="trainyard-7-3",  # a new one per attempt: a restart never meets the last attempt's agents
        local_addr="127.0.0.1",
        join_timeout_s=120,
    )


@pytest.mark.parametrize(
    ("visible", "gpus"),
    [("0,1", [0, 1]), ("3", [3]), ("", []), (None, []), ("NoDevFiles", [])],
)
def test_allocated_gpus_are_slurm_s_cuda_visible_devices(visible: str | None, gpus: list[int]) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert allocated_gpus(env) == gpus


@pytest.mark.parametrize(("cpus", "count"), [("8", 8), ("", None), (None, None)])
def test_allocated_cpus_are_the_task_s_own(cpus: str | None, count: int | None) -> None:
    assert allocated_cpus({} if cpus is None else {"SLURM_CPUS_PER_TASK": cpus}) == count


def test_wait_for_attempt_returns_the_written_attempt(tmp_path: Path) -> None:
    folder = tmp_path / "slurm"
    write_attempt(folder, 1, attempt())
    assert wait_for_attempt(folder, 1, timeout_s=1) == attempt()
    assert not list(folder.glob("*.part"))


def test_a_planted_link_in_place_of_the_attempt_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    write_attempt(elsewhere, 0, attempt())
    folder = tmp_path / "slurm"
    folder.mkdir()
    attempt_file(folder, 0).symlink_to(attempt_file(elsewhere, 0))
    with pytest.raises(JobFileRefused):
        wait_for_attempt(folder, 0, timeout_s=0.05, poll_s=0.01)


def test_wait_for_attempt_names_the_file_it_waited_for(tmp_path: Path) -> None:
    folder = tmp_path / "slurm"
    write_attempt(folder, 0, attempt())  # an earlier restart's: not the one asked for
    with pytest.raises(TimeoutError) as raised:
        wait_for_attempt(folder, 1, timeout_s=0.05, poll_s=0.01)
    assert str(attempt_file(folder, 1)) in str(raised.value)
    assert "TRAINYARD_RUNS_DIR" in str(raised.value)


def test_node_command_is_this_node_s_torchrun_without_the_worker_s_secrets(tmp_path: Path) -> None:
    settings = node_settings(tmp_path)
    (settings.runs_dir / "7").mkdir(parents=True)
    env = {
        **SECOND_NODE,
        "PATH": "/venv/bin:/usr/bin",
        "TRAINYARD_DATABASE_URL": "postgresql+psycopg://trainyard:hunter2@postgres/trainyard",
        "AWS_SECRET_ACCESS_KEY": "hunter2",
    }
    command = node_command(7, attempt(), settings, env)
    argv = " ".join(command.argv)
    assert "--nnodes 2 --node-rank 1 " in argv
    assert "--rdzv-endpoint 127.0.0.1:25678 --rdzv-id trainyard-7-3 " in argv
    assert command.argv[-2:] == ["--run-dir", str(settings.runs_dir / "7")]
    assert "TRAINYARD_DATABASE_URL" not in command.env
    assert "AWS_SECRET_ACCESS_KEY" not in command.env
    assert command.env["PATH"] == env["PATH"]
    assert command.env["CUDA_VISIBLE_DEVICES"] == ""  # a CPU job
    # The task's own cores (8), not the node's, shared by its 2 ranks.
    assert command.env["OMP_NUM_THREADS"] == "4"


def test_node_command_without_the_run_directory_names_the_setting(tmp_path: Path) -> None:
    settings = node_settings(tmp_path)
    with pytest.raises(FileNotFoundError) as raised:
        node_command(7, attempt(), settings, SECOND_NODE)
    assert str(settings.runs_dir / "7") in str(raised.value)
    assert "TRAINYARD_RUNS_DIR" in str(raised.value)


def test_a_node_s_error_reaches_the_worker_through_the_batch_log(
    env: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() prints what stops it where the batch log collects it, and the worker quotes it from there."""
    for name, value in SECOND_NODE.items():
        monkeypatch.setenv(name, value)
    folder = slurm_folder(env.runs_dir, 7)
    write_attempt(folder, 0, attempt())  # the run directory itself is missing
    with pytest.raises(SystemExit) as exited:
        main(["--job", "7"])
    assert exited.value.code == 3
    (folder / BATCH_LOG).write_text(capsys.readouterr().err)
    assert "TRAINYARD_RUNS_DIR" in (node_error(folder / BATCH_LOG, 0) or "")


def test_the_node_never_writes_through_a_launcher_log_the_ranks_planted(tmp_path: Path) -> None:
    """A run directory is the job's: a link at logs/launcher.log (from an earlier attempt's ranks) makes the
    node's task fail rather than append torchrun's output where the link points. In a process of its own,
    since the task ends by becoming its command."""
    run_dir, target = tmp_path / "runs" / "7", tmp_path / "not-the-job-s"
    (run_dir / "logs").mkdir(parents=True)
    target.write_text("untouched\n")
    (run_dir / "logs" / "launcher.log").symlink_to(target)
    script = (
        "from pathlib import Path; from core.launch import Launch; "
        "from worker.executors.slurm.node import become; "
        f"become(Launch(['echo', 'written'], {{}}), Path({str(run_dir)!r}), 'header\\n')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "written" not in done.stdout, (done.stdout, done.stderr)
    assert target.read_text() == "untouched\n"
