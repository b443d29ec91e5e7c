"""Handing jobs to Slurm: each queued job is submitted with sbatch as soon as it is queued (Slurm's queue,
not Trainyard's, decides when it starts), and each attempt Slurm starts is written for its nodes.

A job waiting for its depends_on is handed over at once too, with --dependency=afterok, once every job it
still waits for is Slurm's and has not ended; until then (one still queued in Trainyard alone) it waits in
Trainyard, and is handed over when that one is or when it is released (core/dependencies.py)."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import aliased

from core.config import Settings
from core.db import session_scope
from core.models import Job, JobDependency
from core.project import PROJECT_ROOT
from core.queue_order import START_ORDER
from core.slurm_script import batch_script, slurm_folder
from core.states import TERMINAL, JobStatus
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


def _may_be_handed_over() -> ColumnElement[bool]:
    """A queued job waits for no other, or every one it still waits for is a Slurm job still live: one not
    handed over yet has no id to name, and slurmctld takes an id it has forgotten (an ended job, past
    MinJobAge) as met."""
    parent = aliased(Job)
    not_slurms = (
        select(JobDependency.job_id)
        .join(parent, parent.id == JobDependency.depends_on_id)
        .where(
            JobDependency.job_id == Job.id,
            or_(parent.slurm_job_id.is_(None), parent.status.in_(TERMINAL)),
        )
    )
    return or_(Job.waiting_on == 0, ~not_slurms.exists())


def _slurm_parents(job_ids: list[int]) -> dict[int, list[int]]:
    """The Slurm job ids of the dependencies each of `job_ids` still waits for."""
    parents: dict[int, list[int]] = {}
    if not job_ids:
        return parents
    with session_scope() as session:
        rows = session.execute(
            select(JobDependency.job_id, Job.slurm_job_id)
            .join(Job, Job.id == JobDependency.depends_on_id)
            .where(JobDependency.job_id.in_(job_ids))
            .order_by(JobDependency.job_id, Job.slurm_job_id)
        )
        for job_id, slurm_id in rows:
            parents.setdefault(job_id, []).append(slurm_id)
    return parents


def submit_queued(settings: Settings) -> list[int]:
    """sbatch every queued job that Slurm has not seen, in start order, one that waits for other jobs once
    they are all Slurm's; the jobs submitted."""
    with session_scope() as session:
        rows = session.execute(
            select(Job.id, Job.spec, Job.plan, Job.waiting_on)
            .where(Job.status == JobStatus.QUEUED, Job.slurm_job_id.is_(None), _may_be_handed_over())
            .order_by(*START_ORDER)
        ).all()
    parents = _slurm_parents([row.id for row in rows if row.waiting_on])
    submitted = []
    for job_id, spec, plan, _ in rows:
        script = batch_script(
            Plan.model_validate(plan),
            JobSpec.model_validate(spec),
            job_id,
            settings,
            sys.executable,
            PROJECT_ROOT,
            after_ok=parents.get(job_id, ()),
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
