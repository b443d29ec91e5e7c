"""The soak's invariants over what left the service: webhook deliveries to the healthy receiver and the
MLflow export of tracked jobs."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sqlalchemy import select

from app.services.integrations.mlflow_runs import tracking_client
from bench.soak.checks import Check, named, quantile
from bench.soak.receivers import Receiver
from bench.soak.specs import MLFLOW_EXPERIMENT
from bench.soak.stack import SoakStack
from core.clock import as_utc
from core.models import Job, WebhookDelivery


def _changes(soak: SoakStack, owners: list[str]) -> Counter[tuple[int, str]]:
    """Each state change of these owners' jobs, as the event a webhook is told of."""
    rows = soak.rows(
        "SELECT e.job_id, e.to_status, j.owner FROM job_events e JOIN jobs j ON j.id = e.job_id "
        "WHERE e.from_status IS NOT NULL"
    )
    return Counter((row.job_id, f"job.{row.to_status}") for row in rows if row.owner in owners)


def webhooks(soak: SoakStack, normal: Receiver, hooks: dict[str, int]) -> Check:
    """Every state change of the hooked users' jobs reached the normal receiver under a delivery id of its
    own, signed; a delivery id that arrived twice (at least once on the wire: a sender killed mid-send) is
    one delivery."""
    arrived = normal.deliveries()
    first: dict[int, float] = {}
    for received in arrived:
        first.setdefault(received.delivery, received.at)
    by_id = {received.delivery: (received.job_id, received.event) for received in arrived}
    delivered = Counter(by_id.values())
    expected = _changes(soak, list(hooks))
    offenders = [
        f"job {job} {event}: {n} not delivered" for (job, event), n in sorted((expected - delivered).items())
    ]
    offenders += [
        f"job {job} {event}: {n} never happened" for (job, event), n in sorted((delivered - expected).items())
    ]
    offenders += [f"delivery {r.delivery}: bad signature" for r in arrived if not r.signed]
    sent = select(WebhookDelivery.id, WebhookDelivery.at).where(
        WebhookDelivery.webhook_id.in_(hooks.values())
    )
    made = {row.id: row.at for row in soak.rows(sent)}
    lags = sorted(
        at - as_utc(made[delivery]).timestamp() for delivery, at in first.items() if delivery in made
    )
    redelivered = len(arrived) - len(first)
    lag = f"lag p50 {quantile(lags, 0.5):.1f} s, p99 {quantile(lags, 0.99):.1f} s"
    figure = (
        f"{sum(expected.values())} state changes, {len(first)} delivery ids ({redelivered} sent again); {lag}"
    )
    return Check(
        "every state change delivered to the healthy receiver",
        not offenders,
        figure,
        named(offenders),
        data={"lags_s": [round(lag, 3) for lag in lags]},
    )


def mlflow(soak: SoakStack) -> Check:
    """Each tracked job that ran is one MLflow run, ended, whose loss history is the job's rows, each once."""
    tracked = [
        row.id
        for row in soak.rows(select(Job.id, Job.spec).where(Job.running_at.is_not(None)))
        if "mlflow" in row.spec.get("tracking", {})
    ]
    client = tracking_client(soak.mlflow.uri)
    experiment = client.get_experiment_by_name(MLFLOW_EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], max_results=50000) if experiment else []
    by_job: defaultdict[int, list[Any]] = defaultdict(list)
    for run in runs:
        by_job[int(run.data.tags.get("trainyard.job_id", 0))].append(run)
    offenders = []
    for job_id in tracked:
        if len(by_job[job_id]) != 1 or by_job[job_id][0].info.status == "RUNNING":
            offenders.append(f"job {job_id}: runs {[run.info.status for run in by_job[job_id]]}")
            continue
        history = [m.step for m in client.get_metric_history(by_job[job_id][0].info.run_id, "loss")]
        rows = {
            row.step
            for row in soak.rows("SELECT step FROM metrics WHERE job_id = :id AND name = 'loss'", id=job_id)
        }
        if sorted(history) != sorted(rows):
            offenders.append(f"job {job_id}: loss steps in MLflow {sorted(history)} vs stored {sorted(rows)}")
    return Check(
        "every tracked job is one MLflow run with its metrics once",
        not offenders,
        f"{len(tracked)} tracked jobs, {len(runs)} runs",
        named(offenders),
    )
