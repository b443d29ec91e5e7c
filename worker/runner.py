"""One job from doorbell to end: claim, write the run directory, start torchrun, hand it to a supervisor."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

from sqlalchemy import select, update

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.models import Checkpoint, Job, utcnow
from app.states import JobStatus
from trainers.events import EVENTS_FILE, LAUNCHER_LOG, LOG_DIR, SPEC_FILE
from trainers.spec import JobSpec, Plan, RunConfig
from worker.failure import ERROR_FILE
from worker.gpus import host_gpus
from worker.kill import kill_job
from worker.launch import build_launch, job_token
from worker.leases import Claim, ClaimOutcome, claim_job
from worker.supervise import CANCELLED, Outcome, RunningJob, Supervisor, finish, ring_others, runtime_deadline
from worker.tail import EventTail

log = logging.getLogger(__name__)

# The directory holding the trainers package, so `-m trainers.run` imports in every rank.
PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Set when the worker starts a warm shutdown: supervisors stop their jobs and requeue them.
SHUTDOWN = threading.Event()


def run_job(job_id: int) -> None:
    if SHUTDOWN.is_set():
        return  # the job stays queued and the reaper of a live worker rings it again
    settings = get_settings()
    claim = claim_job(job_id, [gpu.index for gpu in host_gpus(settings)])
    log.info("job %s: %s", job_id, claim.outcome)
    if claim.outcome is not ClaimOutcome.CLAIMED:
        return
    try:
        running = launch(job_id, claim, settings)
    except Exception as exc:
        log.exception("job %s: could not launch", job_id)
        # The failure may have come after the process started (a failed commit): it must not run on.
        kill_job(job_token(job_id, claim.attempt, settings.hostname), settings.cancel_grace_s)
        finish(job_id, claim.attempt, settings.hostname, Outcome(JobStatus.FAILED, "launch_error", str(exc)))
        ring_others()
        return
    if running is None:  # cancelled while being dispatched: training never starts
        finish(job_id, claim.attempt, settings.hostname, CANCELLED)
        ring_others()
        return
    Supervisor(running, SHUTDOWN).run()


def _resume_path(job: Job, plan: Plan, attempt: int) -> str | None:
    """A requeued attempt resumes from the job's latest checkpoint; a first one from what the API chose."""
    if attempt > 1:
        with session_scope() as session:
            latest = session.scalars(
                select(Checkpoint.path)
                .where(Checkpoint.job_id == job.id)
                .order_by(Checkpoint.step.desc(), Checkpoint.id.desc())
                .limit(1)
            ).first()
        if latest is not None:
            return latest
    return plan.resume_path


def launch(job_id: int, claim: Claim, settings: Settings) -> RunningJob | None:
    """Start torchrun for a claimed job, or return None when the job left `starting` before it could."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
    run_dir = settings.runs_dir / str(job_id)
    spec = JobSpec.model_validate(job.spec)
    plan = Plan.model_validate(job.plan)
    plan = plan.model_copy(
        update={
            "gpus": claim.gpu_ids if plan.device == "cuda" else plan.gpus,
            "resume_path": _resume_path(job, plan, claim.attempt),
        }
    )
    command = build_launch(
        plan,
        job_id=job_id,
        attempt=claim.attempt,
        host=settings.hostname,
        run_dir=run_dir,
        gpu_ids=claim.gpu_ids,
        python=sys.executable,
    )
    plan = plan.model_copy(update={"argv": command.argv})
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    config = RunConfig(job_id=job_id, attempt=claim.attempt, spec=spec, plan=plan)
    (run_dir / SPEC_FILE).write_text(config.model_dump_json(indent=2), encoding="utf-8")
    # A previous attempt's root cause must not be reported as this one's.
    (run_dir / ERROR_FILE).unlink(missing_ok=True)
    events = run_dir / EVENTS_FILE
    # Events already in the file belong to earlier attempts, which tailed them.
    tail = EventTail(events, offset=events.stat().st_size if events.exists() else 0)
    with session_scope() as session:
        # Still `starting`, checked by a write that holds the row until the process is started: a cancel
        # lands either before (nothing starts) or after (the supervisor sees it on its first look).
        still_ours = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.attempt == claim.attempt, Job.status == JobStatus.STARTING)
            .values(plan=plan.public(), heartbeat_at=utcnow())
        )
        if still_ours.rowcount != 1:  # type: ignore[attr-defined]
            return None
        with (run_dir / LOG_DIR / LAUNCHER_LOG).open("ab") as launcher_log:
            launcher_log.write(f"=== attempt {claim.attempt}: {' '.join(command.argv)}\n".encode())
            launcher_log.flush()
            process = subprocess.Popen(
                command.argv,
                env=command.env,
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=launcher_log,
                stderr=subprocess.STDOUT,
                # Out of the worker's process group: a Ctrl-C at the worker's terminal reaches only the
                # worker, which then stops and requeues its jobs in order.
                start_new_session=True,
            )
    log.info("job %s attempt %s: started torchrun pid %s", job_id, claim.attempt, process.pid)
    return RunningJob(
        job_id=job_id,
        attempt=claim.attempt,
        token=job_token(job_id, claim.attempt, settings.hostname),
        process=process,
        run_dir=run_dir,
        tail=tail,
        deadline=runtime_deadline(job.started_at, spec.limits.max_runtime_s),
        max_runtime_s=spec.limits.max_runtime_s,
    )
