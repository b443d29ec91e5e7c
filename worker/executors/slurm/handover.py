"""Handing jobs to Slurm: each queued job is submitted with sbatch as soon as it is queued (Slurm's queue,
not Trainyard's, decides when it starts), and each attempt Slurm starts is written for its nodes."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update

from core.config import Settings
from core.db import session_scope
from core.models import Job
from core.project import PROJECT_ROOT
from core.queue_order import START_ORDER
from core.slurm_script import batch_script, slurm_folder
from core.states import JobStatus
from jobspec.plan import Plan, RunConfig
from jobspec.spec import JobSpec
from jobspec.startup import Mark
from worker.attempts.ends import Outcome
from worker.attempts.starting import begin_attempt
from worker.executors.slurm import commands, endings
from worker.executors.slurm.attempts import NodeAttempt, write_attempt
from worker.executors.slurm.commands import SlurmJob
from worker.resume import leased_plan
from worker.rundir import prepare_run_dir, set_aside_stale
from worker.sandbox import is_sandboxed, job_bundle

log = logging.getLogger(__name__)
SLURM_PENDING = "slurm_pending"


def pending_message(job: SlurmJob) -> str:
    return f"Slurm job {job.job_id} is {job.state.lower()}: {job.reason}"


def submit_queued(settings: Settings) -> list[int]:
    """sbatch every queued job that Slurm has not seen, in start order; the jobs submitted."""
    with session_scope() as session:
        rows = session.execute(
            select(Job.id, Job.spec, Job.plan)
            .where(Job.status == JobStatus.QUEUED, Job.slurm_job_id.is_(None))
            .order_by(*START_ORDER)
        ).all()
    submitted = []
    for job_id, spec, plan in rows:
        script = batch_script(
            Plan.model_validate(plan),
            JobSpec.model_validate(spec),
            job_id,
            settings,
            sys.executable,
            PROJECT_ROOT,
        )
        slurm_folder(settings.runs_dir, job_id).mkdir(parents=True, exist_ok=True)  # the batch log's
        try:
            slurm_id = commands.sbatch(script)
        except commands.SlurmError as refused:  # Slurm's words: a partition that does not exist, a limit
            endings.end_waiting(job_id, Outcome(JobStatus.FAILED, "slurm_refused", str(refused)))
            continue
        with session_scope() as session:
            taken = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == JobStatus.QUEUED, Job.slurm_job_id.is_(None))
                .values(
                    slurm_job_id=slurm_id,
                    status_reason=SLURM_PENDING,
                    message=f"handed to Slurm as job {slurm_id}",
                )
            )
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            commands.cancel(slurm_id)  # cancelled while being submitted
            continue
        log.info("job %s: submitted to Slurm as job %s", job_id, slurm_id)
        submitted.append(job_id)
    return submitted


@dataclass(frozen=True)
class Started:
    attempt: int
    run_dir: Path
    plan: Plan
    spec: JobSpec


def slurm_runs(job_id: int, slurm: SlurmJob) -> int | None:
    """queued -> starting as the next attempt, now that Slurm runs it (placed and launched at once); the
    attempt, or None if the job left the queue meanwhile (a cancel)."""
    message = f"Slurm job {slurm.job_id} runs on {slurm.nodes or slurm.batch_host}"
    with session_scope() as session:
        job = begin_attempt(
            session,
            job_id,
            message,
            slurm.batch_host,
            (Mark.PLACED, Mark.LAUNCHED),
            slurm_restarts=slurm.restarts,
        )
        return None if job is None else job.attempt


def write_for_nodes(job_id: int, attempt: int, restarts: int, settings: Settings) -> Started:
    """The run directory and the attempt file the nodes wait for: the plan resuming from the newest sound
    checkpoint, as a local worker's next attempt does."""
    with session_scope() as session:
        job = session.get_one(Job, job_id)
        spec = JobSpec.model_validate(job.spec)
        run_dir = settings.runs_dir / str(job_id)
        if attempt == 1:
            set_aside_stale(run_dir, job_id)
        plan = leased_plan(job, [], attempt, run_dir)
    bundle = job_bundle(settings, spec)
    sandboxed = is_sandboxed(settings, spec)
    config = RunConfig(
        job_id=job_id, attempt=attempt, spec=spec, plan=plan, code_dir=None if bundle is None else str(bundle)
    )
    root_with_sandbox = sandboxed and os.geteuid() == 0
    prepare_run_dir(run_dir, config, owner=settings.job_uid if root_with_sandbox else None)
    write_attempt(
        slurm_folder(settings.runs_dir, job_id), restarts, NodeAttempt(config=config, sandboxed=sandboxed)
    )
    return Started(attempt, run_dir, plan, spec)
