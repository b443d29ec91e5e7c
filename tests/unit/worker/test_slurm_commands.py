"""Slurm's commands as the worker runs them: `scontrol --oneliner show job` parsed into jobs, and sbatch and
scancel answering with their own words, from stand-ins on PATH (real executables, no cluster)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from worker.executors.slurm import commands
from worker.executors.slurm.commands import SlurmError, SlurmJob, parse_jobs


def shown(
    job_id: int, state: str, reason: str, nodes: str, *, restarts: int = 0, exit_code: str = "0:0"
) -> str:
    """One job as Slurm 22.05's `scontrol --oneliner show job` prints it, its fields in Slurm's order; its
    output path has a space, as a value may."""
    return (
        f"JobId={job_id} JobName=trainyard-{job_id - 10} UserId=root(0) GroupId=root(0) MCS_label=N/A "
        f"Priority=4294901759 Nice=100 Account=(null) QOS=(null) JobState={state} Reason={reason} "
        f"Dependency=(null) Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode={exit_code} "
        "RunTime=00:00:05 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-27T16:22:35 "
        "Partition=trainyard AllocNode:Sid=localhost:326 ReqNodeList=(null) ExcNodeList=(null) "
        f"{nodes} NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=2 TRES=cpu=4,node=2,billing=4 Command=(null) "
        f"WorkDir=/srv/trainyard StdErr=/shared runs/.slurm/{job_id}/batch.log StdIn=/dev/null "
        f"StdOut=/shared runs/.slurm/{job_id}/batch.log Power= "
    )


def test_parse_jobs_reads_each_job_of_scontrol() -> None:
    running = "NodeList=tynode[1-2] BatchHost=tynode1"
    text = "\n".join(
        [
            shown(11, "PENDING", "Resources", "NodeList=(null)"),
            shown(12, "RUNNING", "None", running, restarts=1),
            shown(13, "COMPLETED", "None", running),
            shown(14, "FAILED", "NonZeroExitCode", running, exit_code="1:0"),
            shown(15, "CANCELLED", "None", running, exit_code="0:9"),
            # Cancelled while it waited: Slurm prints its node list empty.
            shown(16, "CANCELLED", "JobHeldUser", "NodeList="),
            "",
        ]
    )
    jobs = parse_jobs(text)
    assert sorted(jobs) == [11, 12, 13, 14, 15, 16]
    assert jobs[11] == SlurmJob(11, "trainyard-1", "PENDING", "Resources", 0, 0, None, None, nice=100)
    assert jobs[12] == SlurmJob(12, "trainyard-2", "RUNNING", "None", 0, 1, "tynode1", "tynode[1-2]", 100)
    assert (jobs[13].state, jobs[13].exit_code, jobs[13].restarts) == ("COMPLETED", 0, 0)
    assert (jobs[14].state, jobs[14].reason, jobs[14].exit_code) == ("FAILED", "NonZeroExitCode", 1)
    assert jobs[15].exit_code == -9  # "0:9": killed by signal 9
    assert jobs[16].nodes is None and jobs[16].batch_host is None


def test_the_exit_code_is_the_field_s_own_not_the_derived_one() -> None:
    line = "JobId=5 JobName=x JobState=FAILED Reason=None DerivedExitCode=0:0 ExitCode=2:0"
    assert parse_jobs(line)[5].exit_code == 2


def test_no_jobs_in_the_system_is_none() -> None:
    assert parse_jobs("No jobs in the system\n") == {}
    assert parse_jobs("") == {}


def fake(folder: Path, name: str, body: str) -> None:
    """An executable `name` on PATH that notes its arguments and stdin beside itself, then runs `body`."""
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f'#!/bin/sh\necho "$@" > "$0.args"\ncat > "$0.stdin"\n{body}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("answer", ["123", "123;cluster"])
def test_sbatch_returns_the_job_id_and_passes_the_script_on_stdin(bin_dir: Path, answer: str) -> None:
    fake(bin_dir, "sbatch", f"echo '{answer}'")
    assert commands.sbatch("#!/bin/bash\ntrue\n") == 123
    assert (bin_dir / "sbatch.args").read_text().split() == ["--parsable"]
    assert (bin_dir / "sbatch.stdin").read_text() == "#!/bin/bash\ntrue\n"


def test_sbatch_refused_says_slurm_s_words(bin_dir: Path) -> None:
    words = "sbatch: error: invalid partition specified: gpu-a100"
    fake(bin_dir, "sbatch", f"echo '{words}' >&2\nexit 1")
    with pytest.raises(SlurmError) as raised:
        commands.sbatch("#!/bin/bash\n")
    assert words in str(raised.value)


def test_sbatch_answering_no_id_is_an_error(bin_dir: Path) -> None:
    fake(bin_dir, "sbatch", "echo 'Submitted batch job 5'")
    with pytest.raises(SlurmError, match="'Submitted batch job 5', not a job id"):
        commands.sbatch("#!/bin/bash\n")


def test_a_command_that_is_not_there_is_a_slurm_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match=r"^sbatch: \[Errno 2\]"):
        commands.sbatch("#!/bin/bash\n")


def test_scancel_failing_says_slurm_s_words(bin_dir: Path) -> None:
    words = "scancel: error: Kill job error on job id 77: Invalid job id specified"
    fake(bin_dir, "scancel", f"echo '{words}' >&2\nexit 1")
    with pytest.raises(SlurmError) as raised:
        commands.cancel(77)
    assert words in str(raised.value)


def test_signal_steps_sends_the_signal_to_the_job(bin_dir: Path) -> None:
    fake(bin_dir, "scancel", "exit 0")
    commands.signal_steps(77, "TERM")
    assert (bin_dir / "scancel.args").read_text().split() == ["--signal=TERM", "77"]


def test_show_jobs_asks_scontrol_for_every_job_on_one_line_each(bin_dir: Path) -> None:
    fake(bin_dir, "scontrol", f"echo '{shown(11, 'PENDING', 'Priority', 'NodeList=(null)')}'")
    assert commands.show_jobs()[11].reason == "Priority"
    assert (bin_dir / "scontrol.args").read_text().split() == ["--oneliner", "show", "job"]


def test_cancelled_by_names_the_user_accounting_recorded(bin_dir: Path) -> None:
    fake(bin_dir, "sacct", "echo 'CANCELLED by 0'")
    assert commands.cancelled_by(77) == "root (uid 0)"
    assert (bin_dir / "sacct.args").read_text().split() == [
        "--noheader",
        "--allocations",
        "--parsable2",
        "--jobs=77",
        "--format=State",
    ]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ("CANCELLED by 4242424", "uid 4242424"),  # a user this login node does not know
        ("RUNNING", None),  # accounting has not heard of the end yet
        ("CANCELLED", None),
        ("", None),
    ],
)
def test_parse_cancelled_by(answer: str, named: str | None) -> None:
    assert commands.parse_cancelled_by(f"{answer}\n") == named


def test_cancelled_by_is_none_without_accounting_or_an_answer_in_time(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake(bin_dir, "sacct", "echo 'Slurm accounting storage is disabled' >&2\nexit 1")
    assert commands.cancelled_by(77) is None
    monkeypatch.setattr(commands, "SACCT_TIMEOUT_S", 0.2)
    fake(bin_dir, "sacct", "sleep 5\necho 'CANCELLED by 0'")
    started = time.monotonic()
    assert commands.cancelled_by(77) is None
    assert time.monotonic() - started < 2
