"""`python -m worker`: one Celery worker for this host, a thread per supervised job."""

from __future__ import annotations

import logging

from core.config import get_settings
from core.doorbell import SHARED_QUEUE, get_celery, host_queue


def worker_argv() -> list[str]:
    settings = get_settings()
    return [
        "worker",
        # Threads, not prefork: a job's task only supervises a torchrun process, and the supervisors must
        # share the process that receives the shutdown signal.
        "--pool=threads",
        f"--concurrency={settings.worker_concurrency}",
        f"--hostname=trainyard@{settings.hostname}",
        # The shared queue to place jobs from, and this host's own for the nodes placed here.
        f"--queues={SHARED_QUEUE},{host_queue(settings.hostname)}",
        "--loglevel=INFO",
    ]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = get_celery()
    app.conf.include = ["worker.tasks"]  # the tasks and their signals: a worker's alone, never the API's
    app.worker_main(worker_argv())


if __name__ == "__main__":
    main()
