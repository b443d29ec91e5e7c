"""One pass of a job's MLflow export (its row: core/integrations/mlflow_outbox.py), through MLflow's own
client: make the job's run once, send the metric rows past the watermark in batches, and once the job has
ended, its last checkpoint (when asked) and its end status. Rows are read, then the transaction ends before
MLflow is asked anything, so a slow tracking server holds no lock of the database.

A pass that fails (the server down, an answer lost) records why and is tried again after a backoff, from the
watermark: what it sent before it failed is sent again with the same step, value and timestamp, which
MLflow's database stores once. A run is made once: its tag trainyard.export_id finds it again when the answer
to its creation was lost.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.artifacts import checkpoint_content
from app.services.errors import CheckpointCorrupt, CheckpointNotFound
from app.services.integrations.mlflow_params import RUN_STATUS, mlflow_key, run_tags, spec_params
from app.services.keys import Caller
from core.clock import as_utc
from core.config import Settings
from core.db import new_session
from core.integrations.mlflow_outbox import (
    Point,
    asked_options,
    claim,
    discover,
    due_exports,
    record,
    through,
    unsent_metrics,
)
from core.models import Checkpoint, Job, MlflowExport, utcnow
from core.states import JobStatus
from jobspec.files import JobFileError
from jobspec.spec_tracking import MlflowTracking

# MLflow's own settings, unless the admin set them. Set before MLflow loads, which reads whether to send
# usage data as it does: none is sent to MLflow's makers from a training service. One retry of a request
# (the exporter's backoff does the rest, so a server that is down never holds the thread for minutes), a
# bounded wait for an answer, and no line on stdout per finished run.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

from mlflow import MlflowClient
from mlflow.entities import Metric as MlflowMetric
from mlflow.entities import Param, Run
from mlflow.exceptions import MlflowException

log = logging.getLogger(__name__)

METRICS_PER_PASS = 10_000  # points read and sent per pass; a longer backlog takes the next pass at once
METRICS_PER_REQUEST = 1_000  # MLflow's cap on metrics per log_batch; the claim is renewed after each
# Renewed after every request of a pass, so it needs to outlast only one: a request waits at most
# MLFLOW_HTTP_REQUEST_TIMEOUT, tried twice. An exporter that died (its API process killed) leaves the export
# to another within this hold, not after a whole pass's worth.
CLAIM_HOLD = timedelta(minutes=2)
UPLOAD_FLOOR_BYTES_PER_S = 5_000_000  # a checkpoint's upload is one request: its hold grows with its size
QUEUED_WAIT = timedelta(seconds=30)  # a job not started yet has nothing to send
MAX_BACKOFF_S = 300.0
ERROR_CHARS = 500
CHECKPOINT_FOLDER = "checkpoints"  # the artifact's folder in the run
BATCH = 16  # exports worked on per look at the rows


def tracking_client(uri: str) -> MlflowClient:
    return MlflowClient(tracking_uri=uri)


def _ms(at: datetime) -> int:
    return int(as_utc(at).timestamp() * 1000)


def _experiment_id(client: MlflowClient, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(client.create_experiment(name))
    except MlflowException:  # made meanwhile by another exporter (or anyone): use it
        again = client.get_experiment_by_name(name)
        if again is None:
            raise
        return str(again.experiment_id)


class ClaimLost(Exception):
    """The pass's claim lapsed and another exporter took the export over: this pass stops writing."""


@dataclass(frozen=True)
class Claim:
    """One pass's hold on a job's export: every write of the pass renews it (and core/integrations/
    mlflow_outbox.py's record writes only while the claim is still this pass's)."""

    session: Session
    job_id: int
    attempt: int

    def write(self, renew_for: timedelta = CLAIM_HOLD, **values: Any) -> None:
        """Record what the pass did, and hold the export for `renew_for` more."""
        values.setdefault("next_attempt_at", utcnow() + renew_for)
        if not record(self.session, self.job_id, self.attempt, **values):
            raise ClaimLost(f"job {self.job_id}: claim {self.attempt} was taken over")


def _open_run(
    client: MlflowClient,
    job: Job,
    row: MlflowExport,
    claim: Claim,
    options: MlflowTracking,
    settings: Settings,
) -> tuple[str, str]:
    """The job's run, made (with its tags and params) unless an earlier pass made it; (experiment, run)."""
    experiment_id = _experiment_id(client, options.experiment or settings.mlflow_experiment)
    claim.write()
    earlier: list[Run] = []
    if claim.attempt > 1:  # an earlier pass may have made the run and lost the answer
        by_token = f"tags.`trainyard.export_id` = '{row.token}'"
        earlier = client.search_runs([experiment_id], by_token, max_results=1)
    if earlier:
        run_id = earlier[0].info.run_id
    else:
        run = client.create_run(
            experiment_id,
            start_time=_ms(job.started_at or job.created_at),
            tags=run_tags(job, row.token, settings.public_url),
            run_name=options.run_name or f"{job.name}-{job.id}",
        )
        run_id = run.info.run_id
    claim.write()
    params = [Param(key, value) for key, value in spec_params(job.spec).items()]
    client.log_batch(run_id, params=params)  # the same values again, where the run was found: no change
    return experiment_id, run_id


def _send(client: MlflowClient, run_id: str, points: list[Point], claim: Claim, sent: dict[str, int]) -> None:
    """The points, a request at a time, the watermark recorded after each."""
    for start in range(0, len(points), METRICS_PER_REQUEST):
        chunk = points[start : start + METRICS_PER_REQUEST]
        metrics = [MlflowMetric(mlflow_key(p.name), p.value, _ms(p.at), p.step) for p in chunk]
        client.log_batch(run_id, metrics=metrics)
        sent = through(sent, chunk)
        claim.write(exported_through=sent)


def _log_checkpoint(settings: Settings, client: MlflowClient, job: Job, run_id: str, claim: Claim) -> None:
    """The job's last checkpoint, read as a download is (the confined opener, its sha256 checked), copied to
    a file of the service's own and uploaded from there: MLflow's client uploads a path, and the job's own
    path may be swapped for a link by the job meanwhile. One that is gone, corrupt or refused (a link, a
    FIFO) is not uploaded, and the run's tag trainyard.checkpoint says why."""
    session = claim.session
    last = select(Checkpoint.id).where(Checkpoint.job_id == job.id).order_by(Checkpoint.step.desc())
    checkpoint_id = session.scalar(last.order_by(Checkpoint.id.desc()).limit(1))
    if checkpoint_id is None:
        return
    try:
        _, content = checkpoint_content(session, settings, checkpoint_id, Caller(job.owner))
        session.rollback()
        with TemporaryDirectory(prefix="trainyard-mlflow-") as folder:
            copy = Path(folder) / content.name
            with copy.open("wb") as out:
                for chunk in content.chunks:
                    out.write(chunk)
            upload_s = copy.stat().st_size / UPLOAD_FLOOR_BYTES_PER_S
            claim.write(renew_for=CLAIM_HOLD + timedelta(seconds=upload_s))
            client.log_artifact(run_id, str(copy), CHECKPOINT_FOLDER)
    except (CheckpointNotFound, CheckpointCorrupt, JobFileError) as refused:
        client.set_tag(run_id, "trainyard.checkpoint", str(refused)[:ERROR_CHARS])


def _detached(session: Session, job_id: int) -> tuple[Job, MlflowExport] | None:
    """The job and its export row as they are now, kept readable once the transaction ends."""
    job = session.get(Job, job_id, populate_existing=True)
    row = session.get(MlflowExport, job_id, populate_existing=True)
    if job is None or row is None:  # the job was deleted, and its export row with it
        return None
    session.expunge(job)
    session.expunge(row)
    return job, row


def _pass(session: Session, job_id: int, attempt: int, client: MlflowClient, settings: Settings) -> None:
    found = _detached(session, job_id)
    if found is None:
        return
    job, row = found
    claim = Claim(session, job_id, attempt)
    status = JobStatus(job.status)  # read before the metric rows: a job ends after its last one is written
    options = asked_options(job.spec) or MlflowTracking()  # exported with the defaults under MLFLOW_ALL_JOBS
    run_id = row.run_id
    if run_id is None:
        if status is JobStatus.QUEUED:
            claim.write(renew_for=QUEUED_WAIT)
            return
        session.rollback()
        experiment_id, run_id = _open_run(client, job, row, claim, options, settings)
        claim.write(experiment_id=experiment_id, run_id=run_id)
    points = unsent_metrics(session, job_id, row.exported_through, METRICS_PER_PASS)
    session.rollback()
    _send(client, run_id, points, claim, row.exported_through)
    if len(points) == METRICS_PER_PASS or not status.is_terminal:
        wait = timedelta(0) if len(points) == METRICS_PER_PASS else timedelta(seconds=settings.mlflow_poll_s)
        claim.write(renew_for=wait, failures=0, last_error=None)
        return
    if options.log_checkpoint and not row.checkpoint_logged:
        _log_checkpoint(settings, client, job, run_id, claim)
        claim.write(checkpoint_logged=True)
    end = job.finished_at or utcnow()
    client.set_terminated(run_id, RUN_STATUS[status], end_time=_ms(end))
    claim.write(done=True, failures=0, last_error=None)


def _backoff(failures: int, settings: Settings) -> timedelta:
    return timedelta(seconds=min(settings.mlflow_poll_s * 2**failures, MAX_BACKOFF_S))


def export_job(session: Session, job_id: int, client: MlflowClient, settings: Settings) -> None:
    """Claim the job's export and run one pass of it; a failed pass is tried again after a backoff that
    doubles with each failure in a row."""
    attempt = claim(session, job_id, utcnow(), CLAIM_HOLD)
    if attempt is None:
        return
    try:
        _pass(session, job_id, attempt, client, settings)
    except ClaimLost:  # the exporter that took it over goes on from the rows
        session.rollback()
    except Exception as error:  # whatever MLflow or the network raised: the next pass starts from the rows
        session.rollback()
        failures = (
            session.scalar(select(MlflowExport.failures).where(MlflowExport.job_id == job_id)) or 0
        ) + 1
        # Once per outage and job: the row keeps the latest error, and the backoff the pace of retries.
        (log.warning if failures == 1 else log.debug)("job %s: MLflow export failed: %s", job_id, error)
        why = f"{type(error).__name__}: {error}"[:ERROR_CHARS]
        retry_at = utcnow() + _backoff(failures, settings)
        record(session, job_id, attempt, failures=failures, last_error=why, next_attempt_at=retry_at)


def export_due(client: MlflowClient, settings: Settings) -> int:
    """Find the jobs submitted since the last look, then run a pass of each export due now; returns how many
    were due."""
    with new_session() as session:
        discover(session, settings.mlflow_all_jobs, utcnow())
        due = due_exports(session, utcnow(), BATCH)
        session.rollback()
        for job_id in due:
            export_job(session, job_id, client, settings)
    return len(due)
