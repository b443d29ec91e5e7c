"""A job outside the sandbox compiles into the host's shared torch.compile cache, so the next job like it
finds its graphs and kernels there (a sandboxed job's launch leaves the variable out: tests/unit/core)."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from core import launch
from core.config import get_settings
from core.launch import Launch
from core.states import JobStatus
from jobspec.plan import Plan
from worker.executors.local import runner
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

# Writes where its Inductor would cache, as the rank's environment says, then ends as a finished run.
SAYS_WHERE_IT_CACHES = textwrap.dedent(
    """
    import json, os, pathlib, sys
    run_dir = pathlib.Path(sys.argv[1])
    (run_dir / "cache_dir").write_text(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "<unset>"))
    with (run_dir / "events.jsonl").open("a") as f:
        for event in ({"kind": "phase", "phase": "running"}, {"kind": "done", "step": 1}):
            f.write(json.dumps(event) + "\\n")
    """
)


def test_a_job_outside_the_sandbox_shares_the_host_s_compile_cache(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("TRAINYARD_COMPILE_CACHE_DIR", str(tmp_path / "compile-cache"))
    get_settings.cache_clear()

    def build(plan: Plan, **kwargs: Any) -> Launch:
        real = launch.build_launch(plan, **kwargs)
        return Launch([sys.executable, "-c", SAYS_WHERE_IT_CACHES, str(kwargs["run_dir"])], real.env)

    monkeypatch.setattr(runner, "build_launch", build)
    job_id = database.add_job()
    run_job(job_id)
    assert database.job(job_id).status == JobStatus.SUCCEEDED, database.job(job_id).message
    written = (database.runs_dir / str(job_id) / "cache_dir").read_text()
    assert written == str(tmp_path / "compile-cache")
