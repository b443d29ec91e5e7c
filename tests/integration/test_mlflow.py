"""MLflow through the real service: a job run by the shared embedded stack's worker is exported by its API's
exporter to a real `mlflow server` on loopback as one run whose params, metric points, status and checkpoint
are the job's own. (The exporter's paths, the server going away mid-job included, are in
tests/unit/app/test_mlflow_export.py.)"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from app.services.integrations.mlflow_params import spec_params
from app.services.integrations.mlflow_runs import tracking_client
from tests.integration.jobs import submit, wait_status
from tests.integration.servers import Stack
from tests.unit.mlflow_fixtures import MlflowServer

TRACKED = {
    "name": "tracked",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "num_samples": 64},
    "train": {"max_steps": 4, "batch_size": 8},
    "metrics": {"every_n_steps": 1},
    "parallel": {"strategy": "single"},
    "tracking": {"mlflow": {"experiment": "e2e", "log_checkpoint": True}},
}


def finished_run(client: Any, job_id: int, timeout: float = 60) -> Any:
    experiment = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        experiment = experiment or client.get_experiment_by_name("e2e")
        if experiment is not None:
            by_job = f"tags.`trainyard.job_id` = '{job_id}'"
            runs = client.search_runs([experiment.experiment_id], by_job)
            if runs and runs[0].info.status != "RUNNING":
                assert len(runs) == 1
                return runs[0]
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} has no finished MLflow run after {timeout:.0f}s")


def test_a_job_becomes_one_mlflow_run_with_its_params_metrics_status_and_checkpoint(
    embedded_stack: Stack, mlflow_server: MlflowServer
) -> None:
    with embedded_stack.client() as client:
        job_id = submit(client, TRACKED)["id"]
        job = wait_status(client, job_id, {"succeeded"}, timeout=120)
        rows = client.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10000}).json()["data"]
    ours: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        ours[row["name"]].append((row["step"], row["value"]))
    assert len(ours["loss"]) == 4

    mlflow = tracking_client(mlflow_server.uri)
    run = finished_run(mlflow, job_id)
    assert run.info.status == "FINISHED" and run.info.run_name == f"tracked-{job_id}"
    assert run.data.params == spec_params(job["spec"])
    assert run.data.tags["trainyard.strategy"] == "single"
    assert set(run.data.metrics) == set(ours)
    for name, points in ours.items():
        history = mlflow.get_metric_history(run.info.run_id, name)
        assert sorted((m.step, m.value) for m in history) == sorted(points), name
    (checkpoint,) = mlflow.list_artifacts(run.info.run_id, "checkpoints")
    assert checkpoint.path.endswith(".pt") and checkpoint.file_size > 0
