"""Slurm's own commands, run as a user would: sbatch, scontrol, scancel. Their environment is the worker's
(SLURM_CONF names the cluster)."""

from __future__ import annotations

import pwd
import re
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 30.0
# Asked only to name who cancelled a job, once at its end: a slow or absent slurmdbd must not hold the
# follower's tick longer than this.
SACCT_TIMEOUT_S = 5.0
_CANCELLED_BY = re.compile(r"^\s*CANCELLED by (\d+)\s*$", re.MULTILINE)
# `scontrol show job --oneliner`: one line per job of key=value fields. Only fields whose values hold no
# spaces are read, each by its own pattern.
_FIELDS = {
    "job_id": re.compile(r"(?:^|\s)JobId=(\d+)"),
    "name": re.compile(r"(?:^|\s)JobName=(\S+)"),
    "state": re.compile(r"(?:^|\s)JobState=(\S+)"),
    "reason": re.compile(r"(?:^|\s)Reason=(\S+)"),
    "exit_code": re.compile(r"(?:^|\s)ExitCode=(\d+:\d+)"),
    "restarts": re.compile(r"(?:^|\s)Restarts=(\d+)"),
    "batch_host": re.compile(r"(?:^|\s)BatchHost=(\S+)"),
    "nodes": re.compile(r"(?:^|\s)NodeList=(\S+)"),
    "nice": re.compile(r"(?:^|\s)Nice=(-?\d+)"),
}


class SlurmError(Exception):
    """A Slurm command failed; the message has its words."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    reason: str  # why it waits (Resources, Priority, ...), or None
    exit_code: int  # the batch script's: its status, or minus the signal that killed it
    restarts: int  # how many times Slurm has requeued it
    batch_host: str | None
    nodes: str | None
    nice: int = 0


def _run(argv: list[str], stdin: str | None = None, timeout_s: float = TIMEOUT_S) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:2])}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout


def sbatch(script: str) -> int:
    """Submit the script (its #SBATCH lines say the rest); the Slurm job id."""
    out = _run(["sbatch", "--parsable"], stdin=script).strip()
    try:
        return int(out.split(";")[0])  # "<id>" or "<id>;<cluster>"
    except ValueError as exc:
        raise SlurmError(f"sbatch answered {out!r}, not a job id") from exc


def _exit_code(field: str | None) -> int:
    status, signal = (int(part) for part in (field or "0:0").split(":"))
    return -signal if signal else status


def parse_jobs(text: str) -> dict[int, SlurmJob]:
    jobs = {}
    for line in text.splitlines():
        found = {
            name: (m.group(1) if (m := pattern.search(line)) else None) for name, pattern in _FIELDS.items()
        }
        if found["job_id"] is None or found["state"] is None:
            continue
        job = SlurmJob(
            job_id=int(found["job_id"]),
            name=found["name"] or "",
            state=found["state"],
            reason=found["reason"] or "None",
            exit_code=_exit_code(found["exit_code"]),
            restarts=int(found["restarts"] or 0),
            batch_host=None if found["batch_host"] in (None, "(null)") else found["batch_host"],
            nodes=None if found["nodes"] in (None, "(null)") else found["nodes"],
            nice=int(found["nice"] or 0),
        )
        jobs[job.job_id] = job
    return jobs


def show_jobs() -> dict[int, SlurmJob]:
    """Every job slurmctld still holds (finished ones for MinJobAge), in one call."""
    return parse_jobs(_run(["scontrol", "--oneliner", "show", "job"]))


def cancelled_by(job_id: int) -> str | None:
    """Who cancelled the job, as Slurm's accounting says ("CANCELLED by 1000"): the user's name (and uid), or
    None where accounting is not kept, has no record of the job yet, or does not answer in time."""
    try:
        states = _run(
            ["sacct", "--noheader", "--allocations", "--parsable2", f"--jobs={job_id}", "--format=State"],
            timeout_s=SACCT_TIMEOUT_S,
        )
    except SlurmError:
        return None
    return parse_cancelled_by(states)


def parse_cancelled_by(text: str) -> str | None:
    found = _CANCELLED_BY.search(text)
    if found is None:
        return None
    uid = int(found.group(1))
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # a user of the cluster this login node does not know
        return f"uid {uid}"


def signal_steps(job_id: int, signal: str) -> None:
    """The signal to every process of the job's steps (not the batch shell): the ranks checkpoint and stop."""
    _run(["scancel", f"--signal={signal}", str(job_id)])


def cancel(job_id: int) -> None:
    _run(["scancel", str(job_id)])


def set_nice(job_id: int, nice: int) -> None:
    """A waiting job's --nice, after its Trainyard priority changed."""
    _run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"])


def requeue(job_id: int) -> None:
    """Back into Slurm's queue, to run again from the same script (its restart count goes up)."""
    _run(["scontrol", "requeue", str(job_id)])


def drain_node(node: str, reason: str) -> None:
    """Slurm places no new job on the node; what runs there runs on."""
    _run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])


def resume_node(node: str) -> None:
    _run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
