"""The device a GPU job is forecast against (app/services/forecasts.py's target_for): the registered GPU with
the least memory, and what an eager operation costs that GPU's host, as its worker probed it at its start
(worker/executors/local/host_probe.py) and reported it with each GPU; no figure where that host was not
probed, and the forecast then rests on the calibration's host."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from app.services.forecasts import request_line, shape_key, target_for
from app.services.gpus import read_cluster
from core.config import Settings
from core.hosts import HOST_OP_S
from core.models import Worker
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from tests.unit.conftest import job_body

SPEC = JobSpec.model_validate(job_body(parallel={"num_gpus": 1}))
PLAN = resolve_plan(SPEC)


def report(session: Session, host: str, memory_mb: int, host_op_s: float | None) -> None:
    probed = {} if host_op_s is None else {HOST_OP_S: host_op_s}
    gpus = [{"index": i, "name": "NVIDIA H200", "memory_total_mb": memory_mb, **probed} for i in range(2)]
    session.add(Worker(id=f"{host}:1", host=host, gpus=gpus, cpus=16))
    session.commit()


def test_a_gpu_job_takes_the_probe_of_the_host_of_the_gpu_it_is_forecast_against(
    session: Session, settings: Settings
) -> None:
    report(session, "fast", 143_771, 5e-06)
    report(session, "small", 81_559, 9e-06)
    target = target_for(read_cluster(session, settings).reports, PLAN)
    assert (target.memory_bytes, target.host_op_s) == (81_559 * 2**20, 9e-06)
    # The forecaster is asked with it, and a forecast made for another host's figure is not reused.
    assert '"host_op_s": 9e-06' in request_line(settings, [], target)
    config = RunConfig(job_id=0, attempt=1, spec=SPEC, plan=PLAN)
    elsewhere = replace(target, host_op_s=5e-06)
    assert shape_key(config, target, settings.data_dir) != shape_key(config, elsewhere, settings.data_dir)


def test_a_host_not_probed_gives_no_figure(session: Session, settings: Settings) -> None:
    report(session, "old", 143_771, None)
    assert target_for(read_cluster(session, settings).reports, PLAN).host_op_s is None
