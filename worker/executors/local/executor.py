"""The local executor behind the Protocol (worker/executors/api.py): the doorbell claims and runs jobs here
(worker/executors/local/runner.py), a node placed here by another worker runs here, and the reaper runs beside
them."""

from __future__ import annotations

from core.config import get_settings
from core.executors import LOCAL, ExecutorTraits
from worker.executors.api import Background
from worker.executors.local import runner
from worker.executors.local.host_probe import HostProbe, gpus_to_probe
from worker.executors.local.reaper import ReaperThread


class LocalExecutor:
    @property
    def traits(self) -> ExecutorTraits:
        return LOCAL

    def start(self) -> list[Background]:
        runner.warm_launcher().prepare()  # the first job's torchrun, importing torch ahead of it
        probe = HostProbe(gpus_to_probe(get_settings()))
        probe.start()
        reaper = ReaperThread(probe)
        reaper.start()
        return [reaper]

    def submit(self, job_id: int) -> None:
        runner.run_job(job_id)

    def run_node(self, job_id: int, attempt: int, node_rank: int) -> None:
        runner.run_node(job_id, attempt, node_rank)

    def shutting_down(self) -> None:
        # Supervisors see this, stop their jobs and requeue them, and their tasks return.
        runner.SHUTDOWN.set()
