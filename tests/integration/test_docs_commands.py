"""The commands of the README and the guides, run as a newcomer types them: every block marked runnable
(tests/doc_blocks.py), in bash at the top of the repository, against a service as fresh as `make run` on a
new clone, so the README's job 1, 2 and 3 are this stack's. curl and the `trainyard` command find it through
TRAINYARD_URL, as the README tells a reader to set it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, Block, doc_files, fenced_blocks
from tests.integration.servers import Stack

pytestmark = pytest.mark.own_services

# A shown command that answers an HTTP error fails its block: `curl -s` alone exits 0 on a 404.
PREAMBLE = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n'
CURL_HTTP_ERROR = 22
WITH_RUNNABLE_BLOCKS = [path for path in doc_files() if any(b.runnable for b in fenced_blocks(path))]


@pytest.fixture(scope="module")
def fresh_stack(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    """A stack of its own, code bundles included: the shared one has other tests' jobs and bundles, and the
    README counts its jobs from 1."""
    workdir = tmp_path_factory.mktemp("stack-docs")
    running = Stack.embedded(workdir)
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


@pytest.mark.parametrize("path", WITH_RUNNABLE_BLOCKS, ids=lambda path: path.name)
def test_the_runnable_commands_of_a_page_run(path: Path, fresh_stack: Stack) -> None:
    before = fresh_stack.sql("SELECT coalesce(max(id), 0) FROM jobs")
    for block in (b for b in fenced_blocks(path) if b.runnable):
        check(block, run_block(block, fresh_stack))
    with fresh_stack.client() as client:
        jobs = client.get("/v1/jobs", params={"limit": 100}).json()["data"]
    # A job curl submitted is followed by its metrics stream, which ends with the job whatever its outcome.
    unfinished = {
        job["id"]: job["status"] for job in jobs if job["id"] > before and job["status"] != "succeeded"
    }
    assert not unfinished, f"every job {path.name} submitted succeeds by the end of the page: {unfinished}"
