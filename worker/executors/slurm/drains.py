"""A drained GPU's node, drained in Slurm too: Slurm places the jobs, so it is Slurm that must leave the node
(core/gpu_health.py records the drain; this carries it out). Slurm drains whole nodes, so a node drains while
any of its GPUs is drained, and resumes once none is.

What this worker told Slurm is kept in memory: a worker started anew drains again (Slurm takes it as a
no-op), and a node undrained while no worker ran stays drained in Slurm until an admin resumes it there
(`scontrol update NodeName=... State=RESUME`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from core.db import session_scope
from core.gpu_health import drained
from worker.executors.slurm import commands
from worker.executors.slurm.commands import SlurmError

log = logging.getLogger(__name__)


def _reason(by_gpu: dict[int, str]) -> str:
    return "trainyard: " + "; ".join(f"GPU {gpu} drained ({why})" for gpu, why in sorted(by_gpu.items()))


@dataclass
class NodeDrains:
    told: dict[str, str] = field(default_factory=dict)  # node -> the reason Slurm was given

    def reconcile(self) -> None:
        """Drain each node with a drained GPU, resume each that no longer has one. A node Slurm refuses (a
        host name it does not know) is logged, and asked again only once its reason changes."""
        with session_scope() as session:
            wanted = {node: _reason(by_gpu) for node, by_gpu in drained(session).items()}
        for node, reason in wanted.items():
            if self.told.get(node) != reason:
                _tell(commands.drain_node, node, reason)
                self.told[node] = reason
        for node in set(self.told) - set(wanted):
            _tell(commands.resume_node, node)
            del self.told[node]


def _tell(command: Callable[..., None], node: str, *args: str) -> None:
    try:
        command(node, *args)
    except SlurmError as exc:
        log.warning("slurm: %s of node %s refused: %s", command.__name__, node, exc)
