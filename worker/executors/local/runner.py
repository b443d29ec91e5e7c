"""One job from doorbell to end: place it on hosts, write the run directory, start torchrun on each, and hand
each node to a supervisor.

Each node runs with three threads: the task's (launch, then the supervisor's loop), its heartbeat for the
attempt, and its uploads for as long as the node stays on this host (restarts included)."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select, update

from core.config import ArtifactStore, Settings, get_settings
from core.data_credentials import data_env
from core.db import session_scope
from core.doorbell import dispatch_node
from core.launch import Launch, build_launch
from core.models import Job, JobNode, utcnow
from core.project import PROJECT_ROOT
from core.sandbox import Sandbox, confine
from core.secrets import ranks_env
from core.states import JobStatus
from jobspec.events import LAUNCHER_LOG, LOG_DIR
from jobspec.plan import Plan, RunConfig
from jobspec.spec import JobSpec
from jobspec.startup import Mark
from worker.attempts.ends import CANCELLED, Outcome, finish
from worker.attempts.events import catch_up
from worker.attempts.starting import worker_id
from worker.executors.local.disk import disk_limit
from worker.executors.local.heartbeat import Heartbeat
from worker.executors.local.kill import JobMark, kill_job, mark_for
from worker.executors.local.leases import claim_next
from worker.executors.local.nodes import NodeTask, claim_launch, dispatch_other_nodes, meet
from worker.executors.local.supervise import RunningJob, Supervisor, ring_others
from worker.executors.local.warm.factory_handle import JobProcess
from worker.executors.local.warm.launcher import WarmLauncher
from worker.resume import leased_plan
from worker.rundir import append_no_follow, prepare_run_dir, set_aside_stale
from worker.sandbox import check_starts, close_sandbox, is_sandboxed, job_bundle, sandbox_for
from worker.tail import add_marks
from worker.uploads import Uploads

log = logging.getLogger(__name__)

# Set when the worker starts a warm shutdown: supervisors stop their jobs and requeue them.
SHUTDOWN = threading.Event()


def run_job(job_id: int) -> None:
    """The shared queue's task, a doorbell rung for `job_id`: claim queued jobs in start order, whichever
    they are, and start each one's nodes on the hosts placed for it, until none can be placed now. A slot
    that a job's end frees here takes the next job at once: the broker's order never decides."""
    while not SHUTDOWN.is_set():  # else the jobs stay queued and the reaper of a live worker rings again
        claim = claim_next()
        if claim is None:
            log.info("doorbell for job %s: nothing queued can be placed now", job_id)
            return
        log.info("doorbell for job %s: claimed job %s", job_id, claim.job_id)
        here = get_settings().hostname
        local = [node for node in claim.nodes if node.host == here]
        for node in claim.nodes:
            if node not in local:
                dispatch_node(claim.job_id, claim.attempt, node.node_rank, node.host)
        if local:
            ring_others()  # this thread is taken now: the rest of the queue goes to a free one
        # Placed here: run it in this task rather than wait for a second message.
        for node in local:
            run_node(claim.job_id, claim.attempt, node.node_rank)


def run_node(job_id: int, attempt: int, node_rank: int) -> None:
    """This host's node of a placed job, through every restart that keeps it here."""
    if SHUTDOWN.is_set():
        return  # the node's heartbeat ages, and the reaper requeues the job for a live host
    settings = get_settings()
    task = NodeTask(job_id, attempt, node_rank)
    # The launcher's log of node 0 is the job's; the run directory is the one mark_for names.
    with Uploads(job_id, settings.runs_dir / str(job_id), launcher_log=node_rank == 0) as uploads:
        # Each pass is one attempt; a retryable failure hands back the next one, on the same leased GPUs.
        while True:
            with Heartbeat(task, settings.heartbeat_s):
                running = launch_or_finish(task, settings, uploads)
                next_attempt = None if running is None else Supervisor(running, uploads, SHUTDOWN).run()
            if running is None or next_attempt is None:
                return
            task = replace(task, attempt=next_attempt)
            if running.nnodes > 1:
                dispatch_other_nodes(task)


def launch_or_finish(task: NodeTask, settings: Settings, uploads: Uploads) -> RunningJob | None:
    """Start this node of the attempt; when it cannot start, record how the job ended and return None."""
    job_id = task.job_id
    mark = mark_for(job_id, task.attempt, settings.hostname, settings.runs_dir)
    try:
        running = launch(mark, task, settings, uploads)
    except Exception as exc:
        log.exception("job %s: could not launch", job_id)
        # The failure may have come after the process started (a failed commit): it must not run on.
        kill_job(mark, settings.cancel_grace_s)
        uploads.settle(settings.upload_drain_s)  # the launcher's log, whole before the job is seen to end
        finish(job_id, task.attempt, Outcome(JobStatus.FAILED, "launch_error", str(exc)))
        ring_others()
        return None
    # Cancelled while being dispatched, training never starts; a repeated or stale message changes nothing.
    if running is None and finish(job_id, task.attempt, CANCELLED):
        ring_others()
    return running


def _start_if_starting(
    task: NodeTask, plan: Plan, command: Launch, run_dir: Path, box: Sandbox | None = None
) -> JobProcess | None:
    """Start torchrun (in `box` when given) only if the job is still `starting` for this attempt and this
    node never started.

    The check is a write that holds the row until the process has started: a cancel lands either before
    (nothing starts) or after (the supervisor sees it on its first look).
    """
    with session_scope() as session:
        # Node 0's view of the plan (its argv) is the one the API shows, with the GPUs the spec asked for: the
        # leased ones are the job's gpu_ids, and a job requeued (preempted, its GPU drained, its worker lost)
        # is placed anew, not pinned to the GPUs it had.
        asked = session.scalar(select(Job.plan).where(Job.id == task.job_id)) or {}
        shown = (
            {"plan": plan.model_copy(update={"gpus": asked.get("gpus")}).public(), "worker_id": worker_id()}
            if task.node_rank == 0
            else {}
        )
        still_ours = session.execute(
            update(Job)
            .where(Job.id == task.job_id, Job.attempt == task.attempt, Job.status == JobStatus.STARTING)
            .values(heartbeat_at=utcnow(), **shown)
        )
        if still_ours.rowcount != 1 or not claim_launch(session, task):  # type: ignore[attr-defined]
            return None
        launcher_log = run_dir / LOG_DIR / LAUNCHER_LOG
        with os.fdopen(append_no_follow(launcher_log), "ab") as header:
            argv = plan.argv or command.argv  # in its sandbox, as the API shows it
            header.write(f"=== attempt {task.attempt} node {task.node_rank}: {' '.join(argv)}\n".encode())
        if task.node_rank == 0:
            add_marks(session.get_one(Job, task.job_id), {Mark.LAUNCHED: time.time()})
        return warm_launcher().start(command, launcher_log, box)


@functools.cache
def warm_launcher() -> WarmLauncher:
    """The worker's one launcher (see worker/executors/local/warm/launcher.py), shared by its supervising
    threads."""
    settings = get_settings()
    return WarmLauncher(
        sys.executable,
        PROJECT_ROOT,
        enabled=settings.warm_launcher,
        count=settings.warm_standbys,
        nice=settings.rank_nice,
    )


def cpu_share(settings: Settings, plan: Plan) -> int | None:
    """The cores a CPU job's processes divide into threads (OMP_NUM_THREADS): the host's over
    TRAINYARD_CPU_OVERCOMMIT, as up to that many CPU processes share each core, and threads beyond a job's
    share spin against its neighbours'; None (every core) for a GPU job, whose processes drive its GPUs."""
    if plan.device != "cpu":
        return None
    return max(1, int((os.cpu_count() or 1) / settings.cpu_overcommit))


def _tails_events(node_rank: int, settings: Settings) -> bool:
    """Global rank 0 writes the events, on whichever node the rendezvous put it. On a shared disk every node
    sees that one file, and node 0 alone reads it; otherwise each node reads its own disk's."""
    return node_rank == 0 or settings.artifact_store is not ArtifactStore.SHARED


def _start_sandboxed(
    task: NodeTask,
    spec: JobSpec,
    plan: Plan,
    command: Launch,
    run_dir: Path,
    box: Sandbox | None,
    bundle: Path | None,
) -> JobProcess | None:
    """Lay out the run directory and start torchrun, inside `box` when the job is sandboxed."""
    plan = plan.model_copy(update={"argv": (command if box is None else confine(command, box)).argv})
    code_dir = None if bundle is None else str(bundle)
    config = RunConfig(job_id=task.job_id, attempt=task.attempt, spec=spec, plan=plan, code_dir=code_dir)
    prepare_run_dir(run_dir, config, owner=None if box is None else box.run_as)
    if box is not None:
        check_starts(box)
    return _start_if_starting(task, plan, command, run_dir, box)


def launch(mark: JobMark, task: NodeTask, settings: Settings, uploads: Uploads) -> RunningJob | None:
    """Start torchrun for this node, or return None when the attempt left `starting` or is not this host's."""
    with session_scope() as session:
        job = session.get(Job, task.job_id)
        node = session.get(JobNode, (task.job_id, task.node_rank))
    if job is None or node is None or (node.attempt, node.host) != (task.attempt, settings.hostname):
        return None
    spec = JobSpec.model_validate(job.spec)
    bundle = job_bundle(settings, spec)
    if task.attempt == 1 and not node.launched:  # the attempt's own ranks have not written anything yet
        set_aside_stale(mark.run_dir, job.id)
    tail = (
        catch_up(job.id, mark.run_dir, uploads, settings) if _tails_events(task.node_rank, settings) else None
    )
    plan = leased_plan(job, node.gpu_ids, task.attempt, mark.run_dir)
    rendezvous = None
    if plan.nnodes > 1:
        rendezvous = meet(task, plan.nnodes, settings, SHUTDOWN)
        if rendezvous is None:
            return None
    sandboxed = is_sandboxed(settings, spec)
    job_env = ranks_env(settings, job.id, job.owner, spec)
    store = data_env(settings, job.id, job.owner, spec)
    command = build_launch(
        plan,
        job_id=task.job_id,
        attempt=task.attempt,
        host=settings.hostname,
        run_dir=mark.run_dir,
        data_dir=settings.data_dir,
        gpu_ids=node.gpu_ids,
        python=settings.environment_pythons[spec.environment] if spec.environment else sys.executable,
        cpu_count=cpu_share(settings, plan),
        rendezvous=rendezvous,
        compile_cache=None if sandboxed else settings.compile_cache_dir,
        job_env={**job_env.env, **store.env},
    )
    box = sandbox_for(settings, spec, plan, mark.run_dir, bundle, PROJECT_ROOT) if sandboxed else None
    try:
        process = _start_sandboxed(task, spec, plan, command, mark.run_dir, box, bundle)
    finally:
        close_sandbox(box)
    if process is None:
        return None
    # Not its pid: a standby may not be forked yet (the factory still imports), and nothing here may wait.
    log.info("job %s attempt %s node %s: started torchrun", job.id, task.attempt, task.node_rank)
    return RunningJob(
        job_id=job.id,
        attempt=task.attempt,
        mark=mark,
        process=process,
        tail=tail,
        started_at=job.started_at,
        max_runtime_s=spec.limits.max_runtime_s,
        max_restarts=spec.limits.max_restarts,
        node_rank=task.node_rank,
        nnodes=plan.nnodes,
        max_disk=disk_limit(spec, settings),
        secret_values=job_env.secret_values + store.secret_values,
    )
