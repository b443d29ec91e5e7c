"""Fixtures for the worker's unit tests (load with `pytest_plugins`): a fresh SQLite database and settings
per test, a helper to add and read job rows, and a doorbell that records rings instead of sending them."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from sqlalchemy import select

from core import doorbell as core_doorbell
from core import launch
from core.config import get_settings
from core.db import get_engine, session_scope
from core.launch import Launch
from core.models import GpuLease, Job
from core.states import JobStatus
from jobspec.plan import Plan, resolve_plan
from jobspec.spec import JobSpec
from tests.unit.conftest import RING_WAIT_S, _clear_caches, create_schema
from worker.executors.local import runner
from worker.executors.local.reaper import beat

if TYPE_CHECKING:
    from worker.executors.local.leases import ClaimOutcome


class WorkerDb:
    host: ClassVar[str] = "testhost"
    gpus: ClassVar[list[int]] = [0, 1, 2, 3]  # the fake inventory

    def __init__(self, root: Path) -> None:
        self.runs_dir = root / "runs"

    @staticmethod
    def spec(**parallel: Any) -> dict[str, Any]:
        return {
            "model": {"arch": "mlp"},
            "data": {"dataset": "synthetic"},
            "parallel": parallel,
            "train": {"epochs": 1, "batch_size": 64},
        }

    def add_job(self, spec: dict[str, Any] | None = None, **fields: Any) -> int:
        """Insert a job row the way the API does: the spec as given and its resolved plan."""
        spec = spec or self.spec()
        plan = resolve_plan(JobSpec.model_validate(spec))
        with session_scope() as session:
            job = Job(name="test", spec=spec, plan=plan.public(), **fields)
            session.add(job)
            session.flush()
            return job.id

    def job(self, job_id: int) -> Job:
        with session_scope() as session:
            job = session.get(Job, job_id)
            assert job is not None, f"job {job_id} is gone"
            return job


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerDb]:
    yield from worker_db(tmp_path, monkeypatch, f"sqlite:///{tmp_path}/db.sqlite")


def worker_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[WorkerDb]:
    """Settings and fresh tables for worker tests against any database (the integration tests give
    PostgreSQL)."""
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", database_url)
    monkeypatch.setenv("TRAINYARD_BROKER_URL", f"sqla+sqlite:///{tmp_path}/broker.db")
    monkeypatch.setenv("TRAINYARD_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("TRAINYARD_HOSTNAME", WorkerDb.host)
    monkeypatch.setenv("TRAINYARD_GPU_INVENTORY", ",".join(map(str, WorkerDb.gpus)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _clear_caches()
    create_schema(get_engine())
    beat()  # this host's worker registers its GPUs, as a live worker's reaper does at once
    yield WorkerDb(tmp_path)
    get_engine().dispose()
    _clear_caches()


class Doorbell:
    """Stands in for the Celery app: records the job ids rung instead of sending messages. No worker takes
    them, so each stays pending until a test clears `rung`."""

    def __init__(self) -> None:
        self._rung: list[int] = []
        self.nodes: list[tuple[str, list[int]]] = []  # (host queue, [job, attempt, node rank])

    @property
    def sent(self) -> list[int]:
        """The rings that have reached this stand-in so far, without waiting for the ringing thread."""
        return self._rung

    @property
    def rung(self) -> list[int]:
        """The jobs rung for, once the rings asked for are sent: a released dependant's or a new trial's ring
        comes from the process's ringing thread (core/doorbell.py ring_soon), which sends one for many."""
        assert core_doorbell.drain_rings(RING_WAIT_S), f"rings still unsent after {RING_WAIT_S} s"
        return self._rung

    def send_task(self, name: str, args: list[int], queue: str | None = None) -> None:
        if name == core_doorbell.RUN_NODE_TASK:
            assert queue is not None
            self.nodes.append((queue, args))
            return
        assert name == core_doorbell.RUN_JOB_TASK
        self._rung.extend(args)


@pytest.fixture
def doorbell(monkeypatch: pytest.MonkeyPatch) -> Doorbell:
    bell = Doorbell()
    monkeypatch.setattr(core_doorbell, "get_celery", lambda: bell)
    # What the broker holds, as the worker's own thread asks it: the rings sent, never a wait for the ringing
    # thread's (the tests' reads of `rung` wait for that).
    monkeypatch.setattr(core_doorbell, "pending_rings", lambda: len(bell.sent))
    return bell


# Stands in for torchrun + trainers.run: writes a few events to the run directory given as argv[1], then
# behaves as argv[2] says. Starts in milliseconds, where torch takes seconds.
FAKE_TRAINER = textwrap.dedent(
    """
    import json, pathlib, sys, time
    run_dir, mode = pathlib.Path(sys.argv[1]), sys.argv[2]

    def emit(event):
        with (run_dir / "events.jsonl").open("a") as f:
            f.write(json.dumps(event) + "\\n")

    emit({"kind": "phase", "phase": "running"})
    emit({"kind": "metrics", "step": 5, "total_steps": 10, "epoch": 0, "values": {"loss": 0.5}})
    if mode == "hang":
        time.sleep(120)
    if mode == "error_file":
        error = {"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "..."}}}
        (run_dir / "error.json").write_text(json.dumps(error))
    if mode == "crash":
        print("Traceback (most recent call last):\\nRuntimeError: out of cheese", file=sys.stderr)
    if mode == "device_error":
        said = "RuntimeError: CUDA error: an illegal memory access was encountered"
        (run_dir / "error.json").write_text(json.dumps({"message": {"message": said, "extraInfo": {}}}))
    if mode == "user_code_error":
        said = "UserCodeError: user_code_error: model.factory 'models:build' raised KeyError: 1"
        record = {"message": f"{said}\\n  models.py, line 3, in build", "extraInfo": {"py_callstack": "..."}}
        (run_dir / "error.json").write_text(json.dumps({"message": record}))
    if mode == "fill_disk":
        (run_dir / "filler").write_bytes(b"x" * (3 << 20))
        time.sleep(120)
    if mode == "checkpoint":
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "checkpoints" / "step-10.pt").write_bytes(b"weights")
        saved = {"step": 10, "epoch": 0, "path": "checkpoints/step-10.pt", "size_bytes": 7}
        emit({"kind": "checkpoint", **saved})
    if mode in ("stop_on_term", "ignore_term"):  # the stop agreement: a checkpoint, then exit 143
        import signal

        def save(step):
            name = f"checkpoints/step-{step}.pt"
            (run_dir / "checkpoints").mkdir(exist_ok=True)
            (run_dir / name).write_bytes(b"weights")
            emit({"kind": "checkpoint", "step": step, "epoch": 0, "path": name, "size_bytes": 7})

        def stop(signum, frame):
            save(10)
            sys.exit(143)

        signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore_term" else stop)
        save(5)
        time.sleep(120)
    emit({"kind": "done", "step": 10})
    sys.exit(0 if mode in ("ok", "checkpoint") else 1)
    """
)


@pytest.fixture
def fake_trainer(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Call with a mode (ok, checkpoint, hang, error_file, crash, user_code_error, device_error: CUDA's
    illegal address, fill_disk: 3 MiB, then hang; stop_on_term: a checkpoint at step 5, another at step 10
    on SIGTERM; ignore_term: step 5, then ignores SIGTERM) to make the runner start FAKE_TRAINER instead;
    modes joined by commas are taken one per launch, the last for every launch after."""
    monkeypatch.setenv("TRAINYARD_CANCEL_GRACE_S", "2")
    get_settings.cache_clear()
    monkeypatch.setattr(runner, "SHUTDOWN", threading.Event())

    def use(modes: str) -> None:
        ahead = modes.split(",")

        def build(plan: Plan, **kwargs: Any) -> Launch:
            real = launch.build_launch(plan, **kwargs)
            mode = ahead.pop(0) if len(ahead) > 1 else ahead[0]
            return Launch([sys.executable, "-c", FAKE_TRAINER, str(kwargs["run_dir"]), mode], real.env)

        monkeypatch.setattr(runner, "build_launch", build)

    return use


def claim_at_once(jobs: list[int]) -> dict[int, ClaimOutcome]:
    """Every job claims from a thread of its own, all released by one barrier: the outcome of each."""
    from worker.executors.local.leases import claim_job

    barrier = threading.Barrier(len(jobs))
    outcomes: dict[int, ClaimOutcome] = {}

    def claim(job_id: int) -> None:
        barrier.wait()
        outcomes[job_id] = claim_job(job_id).outcome

    threads = [threading.Thread(target=claim, args=(job_id,)) for job_id in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def race_sixteen_jobs_for_four_gpus(database: WorkerDb) -> dict[int, int]:
    """16 jobs (half by GPU id, half by count) claim at once from threads; returns GPU -> job held.

    Exactly four win, and no GPU goes to two of them: the lease table's primary key decides, whatever the
    database."""
    from worker.executors.local.leases import ClaimOutcome

    specs = [database.spec(num_gpus=1) if i % 2 else database.spec(gpus=[i % 4]) for i in range(16)]
    outcomes = claim_at_once([database.add_job(spec) for spec in specs])
    assert Counter(outcomes.values()) == {ClaimOutcome.CLAIMED: 4, ClaimOutcome.WAITING: 12}
    with session_scope() as session:
        started = session.scalars(select(Job).where(Job.status == JobStatus.STARTING)).all()
        held = {gpu: job.id for job in started for gpu in job.gpu_ids or []}
        leased = {gpu: job for gpu, job in session.execute(select(GpuLease.gpu_index, GpuLease.job_id))}
    assert sorted(held) == database.gpus  # four jobs, one GPU each, none shared
    assert leased == held
    return held
