"""A worker's state on disk, with secrets in it, and a job launched into the sandbox the way
worker/executors/local/runner.py launches one (build_launch, sandbox_for, confine, prepare_run_dir), with a
rank program of the test's own in place of `-m trainers.run`. No service runs: the tests look at what the
sandbox lets the ranks reach."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings
from core.launch import Launch, build_launch
from core.project import PROJECT_ROOT
from core.sandbox import Sandbox, confine
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from worker.executors.local.kill import JobMark, mark_for
from worker.rundir import prepare_run_dir
from worker.sandbox import sandbox_for

SECRET = "hunter2-do-not-leak"
CODE_ID = "sha256:" + "ab" * 32
JOB_ID = 7
HOST = "box"


@dataclass(frozen=True)
class Deployment:
    """var/ as a worker keeps it: runs, code bundles, data, the SQLite database and broker files."""

    var: Path
    settings: Settings

    @property
    def run_dir(self) -> Path:
        return self.settings.runs_dir / str(JOB_ID)

    @property
    def bundle(self) -> Path:
        return self.settings.code_dir / CODE_ID.removeprefix("sha256:")

    @property
    def secrets(self) -> dict[str, Path]:
        """Files the job must not read, by name."""
        var = self.var
        return {
            "database": var / "trainyard.db",
            "broker": var / "broker.db",
            "other job": self.settings.runs_dir / "8" / "checkpoint.pt",
            "other bundle": self.settings.code_dir / ("cd" * 32) / "model.py",
            "archive": self.settings.code_dir / "archives" / "x.tar",
        }


def deploy(var: Path, **settings: object) -> Deployment:
    """Lays out var/ with SECRET in every file the job must not read; `settings` override the defaults."""
    config = Settings(
        runs_dir=var / "runs",
        code_dir=var / "code",
        data_dir=var / "data",
        database_url=f"sqlite:///{var}/trainyard.db",
        broker_url=f"sqla+sqlite:///{var}/broker.db",
        **settings,  # type: ignore[arg-type]
    )
    deployment = Deployment(var, config)
    for path in deployment.secrets.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{SECRET} in {path.name}\n")
    deployment.bundle.mkdir(parents=True)
    (deployment.bundle / "models.py").write_text("WIDTH = 512\n")
    (var / "data" / "cifar").mkdir(parents=True)
    (var / "data" / "cifar" / "batch_1").write_text("images\n")
    deployment.run_dir.mkdir(parents=True)
    return deployment


def job_spec(nproc: int, **sections: dict[str, object]) -> JobSpec:
    """A user-code job's spec: its bundle, a data root, `nproc` ranks of ddp; `sections` replace parts."""
    spec: dict[str, object] = {
        "code": CODE_ID,
        "model": {"arch": "mlp"},
        "data": {"dataset": "cifar10", "root": "cifar"},
        "parallel": {"strategy": "ddp", "nproc_per_node": nproc},
    }
    return JobSpec.model_validate({**spec, **sections})


def sandboxed_job(
    deployment: Deployment, rank: list[str], worker_env: Mapping[str, str], spec: JobSpec | None = None
) -> tuple[Launch, Sandbox, JobMark]:
    """The worker's launch of a one-host CPU job (one rank unless `spec` says otherwise), each rank running
    `rank` in place of `-m trainers.run --run-dir DIR`, and the sandbox it runs in."""
    settings = deployment.settings
    spec = spec or job_spec(1)
    plan = resolve_plan(spec)
    mark = mark_for(JOB_ID, 1, HOST, settings.runs_dir)
    command = build_launch(
        plan,
        job_id=JOB_ID,
        attempt=1,
        host=HOST,
        run_dir=mark.run_dir,
        data_dir=settings.data_dir,
        gpu_ids=[],
        python=sys.executable,
        worker_env=worker_env,
        cpu_count=2,
    )
    assert command.argv[-4:] == ["-m", "trainers.run", "--run-dir", str(mark.run_dir)]
    command = Launch([*command.argv[:-4], *rank] if rank else command.argv, command.env)
    box = sandbox_for(settings, spec, plan, mark.run_dir, deployment.bundle, PROJECT_ROOT)
    config = RunConfig(job_id=JOB_ID, attempt=1, spec=spec, plan=plan, code_dir=str(deployment.bundle))
    prepare_run_dir(mark.run_dir, config, owner=box.run_as)
    return confine(command, box), box, mark


def start(command: Launch) -> subprocess.Popen[bytes]:
    """As worker/executors/local/warm/launcher.py starts a sandboxed job: cold, in a session of its own, from
    the project root."""
    return subprocess.Popen(
        command.argv,
        env=command.env,
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
