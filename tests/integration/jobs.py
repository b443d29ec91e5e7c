"""What a user of the HTTP API does in these tests: submit, poll, and look for a job's processes."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from jobspec.events import LOG_DIR, rank_log_name
from jobspec.startup import STANDBY_ID_ENV
from tests.integration.servers import ROOT
from worker.executors.local.kill import STANDBY_FILES

TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "pruned"}
# A user's bundle whose steps take a set time, asleep: a job that a test needs running for a while, not
# training, leaves the cores to the suite's other tests.
PACED = Path(__file__).with_name("bundles") / "paced"


def example_spec(name: str, **overrides: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((ROOT / "examples" / name).read_text())
    for section, values in overrides.items():
        spec[section] = {**spec.get(section, {}), **values}
    return spec


def submit(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()["job"]
    return job


def polls(first_s: float = 0.05, longest_s: float = 0.5) -> Iterator[float]:
    """The pauses of a test that polls the API: short at first, as most waits end soon, then twice a second.
    A GET costs the API and the test milliseconds of CPU; at ten a second, the minutes a test waits for a
    job cost its neighbours a tenth of a core."""
    return itertools.chain(
        itertools.takewhile(lambda s: s < longest_s, (first_s * 1.5**n for n in itertools.count())),
        itertools.repeat(longest_s),
    )


def wait_status(client: httpx.Client, job_id: int, wanted: set[str], timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    for pause in polls():
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in wanted:
            return job
        if job["status"] in TERMINAL or time.monotonic() > deadline:
            break
        time.sleep(pause)
    raise AssertionError(f"job {job_id} never reached {wanted}: {job.get('status')} {job.get('message')}")


def metric_values(client: httpx.Client, job_id: int, name: str) -> list[tuple[int, float]]:
    rows = client.get(f"/v1/jobs/{job_id}/metrics", params={"name": name, "limit": 10000}).json()["data"]
    return [(row["step"], row["value"]) for row in rows]


def statuses(client: httpx.Client, job_id: int) -> list[str]:
    return [event["to_status"] for event in client.get(f"/v1/jobs/{job_id}/events").json()["data"]]


def job_processes(runs_dir: Path, job_id: int) -> list[psutil.Process]:
    """Every live process started for this job (torchrun, ranks, their children), found by the mark the
    worker puts in their environment: its token and its run directory, or, for a standby that took the job
    on and the ranks it forked, the standby's id that the worker wrote into the run directory."""
    run_dir = runs_dir / str(job_id)
    standbys = {line for path in run_dir.glob(STANDBY_FILES.format("*")) for line in path.read_text().split()}
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        token = env.get("TRAINYARD_JOB_TOKEN", "")
        if env.get(STANDBY_ID_ENV) in standbys or (
            token.split("/")[1:2] == [str(job_id)] and env.get("TRAINYARD_RUN_DIR") == str(run_dir)
        ):
            found.append(proc)
    return found


def rank_processes(runs_dir: Path, job_id: int, rank: int) -> list[psutil.Process]:
    """The job's processes that write rank `rank`'s log, lowest pid (the rank's own) first: a rank forked
    from the standby shows neither its RANK nor trainers.run in /proc, only the files it has open."""
    log = (runs_dir / str(job_id) / LOG_DIR / rank_log_name(rank)).resolve()
    found = []
    for proc in job_processes(runs_dir, job_id):
        try:
            if any(Path(file.path) == log for file in proc.open_files()):
                found.append(proc)
        except psutil.Error:
            continue
    return found
