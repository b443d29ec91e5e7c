"""This host's probe (worker/executors/local/host_probe.py): what one eager CUDA operation costs the host,
measured in a process of its own, never the worker's; nothing runs without GPUs; a probe that fails or hangs
is absent and the log says why; the heartbeat reports it with each GPU, where the API's forecast reads it.
The probe's own process is stood in for by a line of Python: the real one needs a GPU (bench.forecast runs
it on one)."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from app.services.forecasts import target_for
from app.services.gpus import read_cluster
from core.config import Settings, get_settings
from core.db import session_scope
from core.hosts import HOST_OP_S
from core.models import Worker
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from tests.unit.conftest import job_body
from worker import gpus
from worker.executors.local import host_probe
from worker.executors.local.host_probe import HostProbe, gpus_to_probe, probe_host_op_s
from worker.executors.local.reaper import beat
from worker.gpus import GpuInfo

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

SECOND_GPU = GpuInfo(2, "GPU-2", "NVIDIA H200", 143_771, 0, 0)


def probe_runs(monkeypatch: pytest.MonkeyPatch, code: str) -> list[dict[str, str]]:
    """The probe's process made `python -c code`; the environment of each one started."""
    monkeypatch.setattr(host_probe, "probe_argv", lambda: [sys.executable, "-c", code])
    started: list[dict[str, str]] = []
    run = subprocess.run

    def recorded(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        started.append(kwargs["env"])
        return run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", recorded)
    return started


def test_nothing_runs_on_a_host_without_gpus(env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    started = probe_runs(monkeypatch, "print(7e-06)")
    monkeypatch.setattr(gpus, "nvml_gpus", list)  # NVML finds none: a CPU box
    assert gpus_to_probe(get_settings()) == []
    probe = HostProbe(gpus_to_probe(get_settings()))
    probe.start()
    probe.join()
    assert probe.op_s is None and started == []


def test_a_fake_inventory_has_no_gpu_to_probe(database: WorkerDb) -> None:
    assert get_settings().gpu_inventory is not None
    assert gpus_to_probe(get_settings()) == []


def test_the_probe_runs_on_the_least_used_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # What torch prints on the way is not the answer: the last line is.
    started = probe_runs(monkeypatch, "print('importing'); print(6.5e-06)")
    training = GpuInfo(1, "GPU-1", "NVIDIA H200", 143_771, 90_000, 97)  # a job outlived the last worker
    idle = GpuInfo(3, "GPU-3", "NVIDIA H200", 143_771, 0, 0)
    assert probe_host_op_s([training, SECOND_GPU, idle]) == 6.5e-06
    (environ,) = started
    assert (environ["CUDA_VISIBLE_DEVICES"], environ["CUDA_DEVICE_ORDER"]) == ("2", "PCI_BUS_ID")


@pytest.mark.parametrize(
    "code, said",
    [
        ("import sys; sys.exit('no CUDA device is visible to this process')", "no CUDA device is visible"),
        ("print('nan')", "nan"),
        ("print('cuInit failed')", "cuInit failed"),
    ],
)
def test_a_probe_that_fails_is_absent_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: str, said: str
) -> None:
    probe_runs(monkeypatch, code)
    assert probe_host_op_s([SECOND_GPU]) is None
    assert "the host probe failed" in caplog.text and said in caplog.text


def test_a_probe_that_hangs_is_stopped_and_absent(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    probe_runs(monkeypatch, "import time; time.sleep(600)")
    monkeypatch.setattr(host_probe, "PROBE_TIMEOUT_S", 0.5)
    assert probe_host_op_s([SECOND_GPU]) is None
    assert "the host probe took over 0.5 s" in caplog.text


def test_each_beat_reports_the_probe_with_the_gpus_and_the_forecast_targets_it(database: WorkerDb) -> None:
    settings = get_settings()
    gpu_plan = resolve_plan(JobSpec.model_validate(job_body(parallel={"num_gpus": 1})))
    with session_scope() as session:  # the fixture's first beat, before the probe answered
        assert target_for(read_cluster(session, settings).reports, gpu_plan).host_op_s is None
    beat(7e-06)
    with session_scope() as session:
        (worker,) = session.scalars(select(Worker)).all()
        assert [gpu[HOST_OP_S] for gpu in worker.gpus] == [7e-06] * len(database.gpus)
        assert target_for(read_cluster(session, settings).reports, gpu_plan).host_op_s == 7e-06
