"""Where a job is recorded besides Trainyard's own rows. MLflow runs are exported by the API from the rows
the service already keeps (app/services/integrations/mlflow_exporter.py), never by the ranks: a slow or absent
tracking server cannot slow or fail training."""

from __future__ import annotations

from pydantic import Field

from jobspec.spec_fields import Section


class MlflowTracking(Section):
    experiment: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="the MLflow experiment, made if it does not exist; default: TRAINYARD_MLFLOW_EXPERIMENT",
    )
    run_name: str | None = Field(
        None,
        min_length=1,
        max_length=250,
        description="the run's name; default: the job's name, a dash, its id (digits-7)",
    )
    log_checkpoint: bool = Field(
        False, description="also upload the job's last checkpoint as an artifact of the run, once it ends"
    )


class TrackingSpec(Section):
    mlflow: MlflowTracking | None = Field(
        None,
        description="export the job to MLflow as a run: its spec as params, every metric with its step, its "
        "end status; the server must have TRAINYARD_MLFLOW_URI set",
    )
