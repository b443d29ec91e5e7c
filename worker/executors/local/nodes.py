"""A job's nodes in SQL: one row per host of the current attempt, which its supervisor heartbeats.

Node 0 publishes the rendezvous port it will host; the other nodes wait for it before starting torchrun.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from core.config import Settings
from core.db import session_scope
from core.doorbell import dispatch_node
from core.launch import Rendezvous
from core.models import Job, JobNode, utcnow
from core.states import JobStatus

POLL_S = 0.25


@dataclass(frozen=True)
class NodeTask:
    """One host's share of one attempt of a job."""

    job_id: int
    attempt: int
    node_rank: int = 0


def _this_node(task: NodeTask) -> tuple[ColumnElement[bool], ...]:
    return (
        JobNode.job_id == task.job_id,
        JobNode.node_rank == task.node_rank,
        JobNode.attempt == task.attempt,
    )


def beat_node(session: Session, task: NodeTask) -> None:
    session.execute(update(JobNode).where(*_this_node(task)).values(heartbeat_at=utcnow()))


def claim_launch(session: Session, task: NodeTask) -> bool:
    """Mark the node launched; False when it already was (a repeated message) or is of another attempt."""
    result = session.execute(
        update(JobNode)
        .where(*_this_node(task), JobNode.launched.is_(False))
        .values(launched=True, heartbeat_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def unfinished_after(session: Session, task: NodeTask) -> int:
    """Mark this node's torchrun finished; how many nodes of the attempt still run."""
    session.execute(update(JobNode).where(*_this_node(task)).values(finished=True))
    query = select(func.count()).where(
        JobNode.job_id == task.job_id, JobNode.attempt == task.attempt, JobNode.finished.is_(False)
    )
    return session.scalar(query) or 0


def next_attempt_of_nodes(session: Session, job_id: int, attempt: int) -> None:
    """A restart keeps the hosts and their GPUs: the same rows, for the new attempt, none started yet."""
    session.execute(
        update(JobNode)
        .where(JobNode.job_id == job_id)
        .values(attempt=attempt, rdzv_port=None, launched=False, finished=False, heartbeat_at=utcnow())
    )


def dispatch_other_nodes(task: NodeTask) -> None:
    """After a restart: every other host starts its node of the new attempt."""
    with session_scope() as session:
        others = session.execute(
            select(JobNode.node_rank, JobNode.host).where(
                JobNode.job_id == task.job_id, JobNode.node_rank != task.node_rank
            )
        ).all()
    for rank, host in others:
        dispatch_node(task.job_id, task.attempt, rank, host)


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _still_starting(session: Session, task: NodeTask) -> bool:
    status = session.scalar(select(Job.status).where(Job.id == task.job_id, Job.attempt == task.attempt))
    return status == JobStatus.STARTING


def _node_zero(task: NodeTask) -> tuple[ColumnElement[bool], ...]:
    return _this_node(NodeTask(task.job_id, task.attempt, 0))


def meet(task: NodeTask, nnodes: int, settings: Settings, stop: threading.Event) -> Rendezvous | None:
    """Node 0 picks and publishes its rendezvous port; the others wait for it, heartbeating meanwhile.
    None when the attempt stopped starting (cancelled, requeued) or node 0 never published in time."""
    deadline = time.monotonic() + settings.rendezvous_timeout_s
    if task.node_rank == 0:
        port = _free_port(settings.advertise_address)
        with session_scope() as session:
            ours = _node_zero(task)
            if session.execute(update(JobNode).where(*ours).values(rdzv_port=port)).rowcount != 1:  # type: ignore[attr-defined]
                return None
            endpoint = f"{session.scalar(select(JobNode.address).where(*ours))}:{port}"
    else:
        endpoint = ""
        while not endpoint:
            with session_scope() as session:
                if not _still_starting(session, task) or time.monotonic() > deadline or stop.is_set():
                    return None
                beat_node(session, task)
                host = session.execute(
                    select(JobNode.address, JobNode.rdzv_port).where(*_node_zero(task))
                ).first()
            if host is not None and host.rdzv_port is not None:
                endpoint = f"{host.address}:{host.rdzv_port}"
            else:
                stop.wait(POLL_S)
    return Rendezvous(
        nnodes=nnodes,
        node_rank=task.node_rank,
        endpoint=endpoint,
        run_id=f"trainyard-{task.job_id}-{task.attempt}",
        local_addr=settings.advertise_address,
        join_timeout_s=int(settings.rendezvous_timeout_s),
    )
