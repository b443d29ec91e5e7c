"""The commands of the README and the guides, run as a newcomer types them: every block marked runnable
(tests/doc_blocks.py) of every page, in bash at the top of the repository, against a service as fresh as
`make run` on a new clone, so the README's job 1, 2 and 3 are this stack's, and sweeps.md's sweep 1. curl and
the `trainyard` command find it through TRAINYARD_URL, as the README tells a reader to set it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.states import JobStatus
from tests.doc_blocks import ROOT, Block, doc_files, fenced_blocks
from tests.integration.servers import Stack

pytestmark = pytest.mark.own_services

# A shown command that answers an HTTP error fails its block: `curl -s` alone exits 0 on a 404.
PREAMBLE = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n'
CURL_HTTP_ERROR = 22
# A page's jobs have ended when its blocks have (a job's metrics stream ends with it), or seconds later: the
# trials of a sweep the page cancelled stop as a cancel stops a job.
ENDING_S = 120
WITH_RUNNABLE_BLOCKS = [path for path in doc_files() if any(b.runnable for b in fenced_blocks(path))]


@pytest.fixture(scope="module")
def fresh_stack(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    """A stack of its own, code bundles included: the shared one has other tests' jobs and bundles, and the
    README counts its jobs from 1."""
    workdir = tmp_path_factory.mktemp("stack-docs")
    # make run's settings: the other stacks let webhooks reach the tests' receivers on loopback.
    running = Stack.embedded(workdir, TRAINYARD_WEBHOOK_ALLOW="")
    yield running
    stopping += running.terminate()


def run_block(block: Block, stack: Stack) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # .venv/bin: trainyard
        "TRAINYARD_URL": stack.url,
        "COLUMNS": "200",
    }
    return subprocess.run(
        ["bash", "-c", PREAMBLE + block.code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def check(block: Block, done: subprocess.CompletedProcess[str]) -> None:
    said = f"{block.where()} exited {done.returncode}:\n{block.code}\n{done.stdout}\n{done.stderr}"
    if block.refused:
        assert done.returncode == CURL_HTTP_ERROR and '"status":422' in done.stdout.replace(" ", ""), said
    else:
        assert done.returncode == 0, said


def jobs_once_ended(stack: Stack, after: int) -> list[dict[str, Any]]:
    """The jobs made after job `after`, once all have ended or ENDING_S has passed: the next page starts on
    an idle service."""
    deadline = time.monotonic() + ENDING_S
    with stack.client() as client:
        while True:
            jobs = client.get("/v1/jobs", params={"limit": 100}).json()["data"]
            made = [job for job in jobs if job["id"] > after]
            if time.monotonic() > deadline or all(JobStatus(job["status"]).is_terminal for job in made):
                return made
            time.sleep(0.5)


@pytest.mark.parametrize("path", WITH_RUNNABLE_BLOCKS, ids=lambda path: path.name)
def test_the_runnable_commands_of_a_page_run(path: Path, fresh_stack: Stack) -> None:
    before = fresh_stack.sql("SELECT coalesce(max(id), 0) FROM jobs")
    for block in (b for b in fenced_blocks(path) if b.runnable):
        check(block, run_block(block, fresh_stack))
    jobs = jobs_once_ended(fresh_stack, before)
    with fresh_stack.client() as client:
        sweeps = client.get("/v1/sweeps", params={"limit": 100}).json()["data"]
    cancelled = {sweep["id"] for sweep in sweeps if sweep["status"] == "cancelled"}
    # Every job a page submitted succeeds, but the trials of a sweep it cancelled, which end cancelled.
    unfinished = {
        job["id"]: job["status"]
        for job in jobs
        if job["status"] != "succeeded"
        and not (job["sweep_id"] in cancelled and job["status"] == "cancelled")
    }
    assert not unfinished, f"every job {path.name} submitted succeeds by the end of the page: {unfinished}"
