"""Exports jobs to MLflow as runs: a thread in each API process, started by the app's lifespan when
TRAINYARD_MLFLOW_URI is set, so `make run` and the compose deployment export with no process of their own.

It runs in the API, outside the ranks and the worker: it sends the rows the service already keeps (the
metrics the worker tailed, the job's states), so a slow or absent tracking server never touches training,
and the worker's loops stay free of calls to a server they do not need. The API already reads a job's
checkpoints for downloads, from a shared runs directory or the object store, and reads them here the same
way. Several API processes share the work: each export is claimed before a pass
(core/integrations/mlflow_outbox.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.services.errors import InvalidSpec
from core.config import Settings
from jobspec.spec import JobSpec

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0  # a pass cut short at shutdown is claimed again once its hold lapses, and resent alike


def check_tracking(settings: Settings, spec: JobSpec) -> None:
    """A spec that asks for an MLflow run is refused by a server that sends none."""
    if spec.tracking.mlflow is not None and settings.mlflow_uri is None:
        raise InvalidSpec(
            "tracking.mlflow",
            "this server exports no runs to MLflow (TRAINYARD_MLFLOW_URI is not set); leave tracking.mlflow "
            "out, or ask the admin to set TRAINYARD_MLFLOW_URI to the tracking server",
        )


class MlflowExporter(threading.Thread):
    """Looks at the exports every mlflow_poll_s, sooner while there is a backlog."""

    def __init__(self, settings: Settings, uri: str) -> None:
        super().__init__(name="mlflow-exporter", daemon=True)
        self.settings = settings
        self.uri = uri
        self.stopping = threading.Event()

    def run(self) -> None:
        # Here, not at the top: MLflow loads (a second, and its settings) only where an export is configured.
        from app.services.integrations.mlflow_runs import BATCH, export_due, tracking_client

        client = tracking_client(self.uri)
        wait = 0.0
        while not self.stopping.wait(wait):
            try:
                backlog = export_due(client, self.settings) == BATCH
            except Exception:  # a database restart must not end the thread; the rows keep the state
                log.exception("MLflow exporter: a pass failed; trying again")
                backlog = False
            wait = 0.0 if backlog else self.settings.mlflow_poll_s

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=STOP_WAIT_S)


@contextmanager
def exporting(settings: Settings) -> Iterator[None]:
    """One exporter per API process while it serves (the app's lifespan), when TRAINYARD_MLFLOW_URI names a
    tracking server."""
    if settings.mlflow_uri is None:
        yield
        return
    exporter = MlflowExporter(settings, settings.mlflow_uri)
    exporter.start()
    try:
        yield
    finally:
        exporter.stop()
