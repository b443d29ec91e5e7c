"""The MLflow exporter in-process against a real `mlflow server` (SQLite, on loopback, one per module): jobs
whose rows are written through the worker's own code paths (the event tail, the transitions) become runs
whose params, metric points, tags, status and checkpoint match Trainyard's; a server that goes away mid-job
leaves the job alone and ends with the same complete run once it is back, no point twice."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from app.services.integrations.mlflow_params import mlflow_key, spec_params
from app.services.integrations.mlflow_runs import CLAIM_HOLD, export_due, tracking_client
from core.clock import as_utc
from core.config import Settings, get_settings
from core.db import session_scope
from core.models import Metric, MlflowExport, utcnow
from core.states import JobStatus
from core.transitions import move
from jobspec.events import CheckpointEvent, MetricsEvent, PhaseEvent
from tests.unit.mlflow_fixtures import MlflowServer
from worker.tail import apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer.at_free_port(tmp_path_factory.mktemp("mlflow")).start()
    yield server
    server.stop()


@pytest.fixture
def exporting(database: WorkerDb, mlflow_server: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TRAINYARD_MLFLOW_URI", mlflow_server.uri)
    monkeypatch.setenv("TRAINYARD_MLFLOW_POLL_S", "0.05")
    monkeypatch.setenv("TRAINYARD_PUBLIC_URL", "https://trainyard.example.com")
    get_settings.cache_clear()
    return get_settings()


def tracked_spec(database: WorkerDb, **mlflow: Any) -> dict[str, Any]:
    return {
        **database.spec(strategy="single"),
        "train": {"epochs": 1, "batch_size": 64, "lr": 0.05},
        "tracking": {"mlflow": {"experiment": "unit", **mlflow}},
    }


def start(job_id: int) -> None:
    with session_scope() as session:
        move(session, job_id, JobStatus.QUEUED, JobStatus.STARTING)
    report(job_id, PhaseEvent(phase="running"))


def report(job_id: int, *events: Any, run_dir: Path | None = None) -> None:
    """Events through the worker's tail, as it stores what rank 0 wrote."""
    uploads = Uploads(job_id, run_dir or Path("/nonexistent"), launcher_log=True)
    with session_scope() as session:
        apply_events(session, job_id, list(events), uploads)


def metrics(first: int, last: int) -> list[MetricsEvent]:
    return [
        MetricsEvent(
            step=s, total_steps=100, epoch=0, values={"loss": 1 / s, "lr": 0.05, "eval:acc@1": s / 100}
        )
        for s in range(first, last + 1)
    ]


def end(job_id: int, status: JobStatus) -> None:
    with session_scope() as session:
        move(session, job_id, JobStatus.RUNNING, status)


def export_until_done(job_id: int, settings: Settings, client: Any, timeout: float = 30) -> MlflowExport:
    deadline = time.monotonic() + timeout
    while True:
        export_due(client, settings)
        with session_scope() as session:
            row = session.get(MlflowExport, job_id)
            assert row is not None
            if row.done:
                return row
        assert time.monotonic() < deadline, row.last_error
        time.sleep(0.05)


def trainyard_points(job_id: int) -> dict[str, list[tuple[int, float, int]]]:
    with session_scope() as session:
        rows = session.execute(
            select(Metric).where(Metric.job_id == job_id).order_by(Metric.name, Metric.step)
        )
        points: dict[str, list[tuple[int, float, int]]] = {}
        for (metric,) in rows:
            at = int(as_utc(metric.at).timestamp() * 1000)
            points.setdefault(metric.name, []).append((metric.step, metric.value, at))
    return points


def mlflow_points(client: Any, run_id: str, key: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key))


def test_a_finished_job_is_a_run_with_its_params_every_metric_point_tags_and_status(
    database: WorkerDb, exporting: Settings
) -> None:
    client = tracking_client(exporting.mlflow_uri or "")
    job_id = database.add_job(tracked_spec(database, run_name="first"))
    start(job_id)
    report(job_id, *metrics(1, 30))
    export_due(client, exporting)  # part of the run while it trains
    report(job_id, *metrics(31, 60))
    end(job_id, JobStatus.SUCCEEDED)
    row = export_until_done(job_id, exporting, client)

    assert row.run_id is not None
    run = client.get_run(row.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert client.get_experiment(run.info.experiment_id).name == "unit"
    assert run.data.params == spec_params(database.job(job_id).spec)
    assert run.data.params["train.lr"] == "0.05" and run.data.params["model.arch"] == "mlp"
    tags = run.data.tags
    assert tags["trainyard.job_id"] == str(job_id) and tags["trainyard.owner"] == "local"
    assert tags["trainyard.strategy"] == "single"
    assert tags["trainyard.url"] == f"https://trainyard.example.com/#/jobs/{job_id}"
    ours = trainyard_points(job_id)
    assert {name: len(points) for name, points in ours.items()} == {"eval:acc@1": 60, "loss": 60, "lr": 60}
    # ':' and '@' are no characters of an MLflow key: the name is kept readable, and told apart by a digest.
    keys = sorted(run.data.metrics)
    assert keys[0].startswith("eval_acc_1-") and keys[1:] == ["loss", "lr"]
    for name, key in zip(sorted(ours), keys, strict=True):
        assert mlflow_points(client, row.run_id, key) == ours[name]


@pytest.mark.parametrize("status", ENDED[1:])
def test_each_end_is_the_runs_status(database: WorkerDb, exporting: Settings, status: JobStatus) -> None:
    client = tracking_client(exporting.mlflow_uri or "")
    job_id = database.add_job(tracked_spec(database))
    start(job_id)
    report(job_id, *metrics(1, 3))
    end(job_id, JobStatus.CANCELLING if status is JobStatus.CANCELLED else status)
    if status is JobStatus.CANCELLED:
        with session_scope() as session:
            move(session, job_id, JobStatus.CANCELLING, JobStatus.CANCELLED)
    row = export_until_done(job_id, exporting, client)
    expected = {JobStatus.CANCELLED: "KILLED"}.get(status, "FAILED")
    assert client.get_run(row.run_id).info.status == expected


def test_a_server_that_goes_away_mid_job_ends_with_the_same_complete_run(
    database: WorkerDb, exporting: Settings, mlflow_server: MlflowServer
) -> None:
    client = tracking_client(exporting.mlflow_uri or "")
    job_id = database.add_job(tracked_spec(database))
    start(job_id)
    report(job_id, *metrics(1, 20))
    export_due(client, exporting)
    mlflow_server.stop()
    try:
        report(job_id, *metrics(21, 40))
        time.sleep(0.1)
        export_due(client, exporting)  # refused: recorded, not raised
        end(job_id, JobStatus.SUCCEEDED)
        with session_scope() as session:
            row = session.get(MlflowExport, job_id)
            assert row is not None and not row.done
            assert row.failures >= 1 and row.last_error, row.last_error
            assert row.exported_through["loss"] == 20
        assert database.job(job_id).status == JobStatus.SUCCEEDED
    finally:
        mlflow_server.start()
    row = export_until_done(job_id, exporting, client)
    assert row.run_id is not None and client.get_run(row.run_id).info.status == "FINISHED"
    assert mlflow_points(client, row.run_id, "loss") == trainyard_points(job_id)["loss"]  # none twice
    assert row.failures == 0 and row.last_error is None


def test_the_last_checkpoint_is_the_runs_artifact_read_through_the_confined_opener(
    database: WorkerDb, exporting: Settings, tmp_path: Path
) -> None:
    client = tracking_client(exporting.mlflow_uri or "")
    runs: dict[str, int] = {}
    for name, linked in (("kept", False), ("linked", True)):
        job_id = database.add_job(tracked_spec(database, log_checkpoint=True))
        run_dir = database.runs_dir / str(job_id)
        (run_dir / "checkpoints").mkdir(parents=True)
        start(job_id)
        for step in (5, 10):
            weights = f"weights at {step}".encode()
            (run_dir / "checkpoints" / f"step-{step}.pt").write_bytes(weights)
            saved = CheckpointEvent(
                step=step,
                epoch=0,
                path=f"checkpoints/step-{step}.pt",
                size_bytes=len(weights),
                sha256=hashlib.sha256(weights).hexdigest(),
            )
            report(job_id, saved, run_dir=run_dir)
        if linked:  # the job swaps its last checkpoint for a link to a file of the service's
            secret = tmp_path / "secret.pt"
            secret.write_bytes(b"weights at 10")
            (run_dir / "checkpoints" / "step-10.pt").unlink()
            (run_dir / "checkpoints" / "step-10.pt").symlink_to(secret)
        end(job_id, JobStatus.SUCCEEDED)
        runs[name] = job_id

    kept = export_until_done(runs["kept"], exporting, client)
    folder = Path(client.download_artifacts(kept.run_id, "checkpoints", str(tmp_path)))
    assert [p.name for p in folder.iterdir()] == ["step-10.pt"]
    assert (folder / "step-10.pt").read_bytes() == b"weights at 10"

    linked = export_until_done(runs["linked"], exporting, client)
    assert client.list_artifacts(linked.run_id) == []
    assert "never follows a link" in client.get_run(linked.run_id).data.tags["trainyard.checkpoint"]


class ExporterDied(BaseException):
    """The API process killed mid-pass: nothing of the pass's own error handling runs."""


def test_an_exporter_that_dies_mid_pass_leaves_the_export_to_another_within_one_requests_hold(
    database: WorkerDb, exporting: Settings
) -> None:
    real = tracking_client(exporting.mlflow_uri or "")
    calls = {"metrics": 0}

    class DiesAtSecondChunk:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def log_batch(self, run_id: str, metrics: Any = (), **kwargs: Any) -> None:
            if metrics:
                calls["metrics"] += 1
                if calls["metrics"] == 2:
                    raise ExporterDied
            real.log_batch(run_id, metrics=metrics, **kwargs)

    job_id = database.add_job(tracked_spec(database))
    start(job_id)
    report(job_id, *metrics(1, 500))  # 1,500 points: two requests
    end(job_id, JobStatus.SUCCEEDED)
    with pytest.raises(ExporterDied):
        export_due(DiesAtSecondChunk(), exporting)
    with session_scope() as session:
        row = session.get(MlflowExport, job_id)
        assert row is not None and not row.done
        held_for = as_utc(row.next_attempt_at) - utcnow()
        assert held_for <= CLAIM_HOLD  # renewed after the first request, not held for a whole pass
        assert row.exported_through == {"eval:acc@1": 500, "loss": 500}  # the first request's, recorded
        row.next_attempt_at = utcnow()  # the hold has passed
    row = export_until_done(job_id, exporting, real)
    assert row.run_id is not None
    ours = trainyard_points(job_id)
    for name, points in ours.items():
        assert mlflow_points(real, row.run_id, mlflow_key(name)) == points  # each point once
