"""A drained GPU's node is drained in Slurm, once per reason, and resumed once no GPU of it is drained; a
node Slurm refuses is logged, not asked again each tick. scontrol is a stand-in on PATH noting its calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from core.config import Settings
from core.gpu_health import drain, undrain
from tests.unit.worker.test_slurm_commands import fake
from worker.executors.slurm.drains import NodeDrains


def calls(bin_dir: Path) -> list[str]:
    log = bin_dir / "calls"
    return log.read_text().splitlines() if log.exists() else []


def test_a_node_is_drained_while_a_gpu_of_it_is_and_resumed_after(
    settings: Settings, session: Session, bin_dir: Path
) -> None:
    fake(bin_dir, "scontrol", f'echo "$@" >> {bin_dir}/calls')
    drains = NodeDrains()
    drain(session, "tynode1", 1, "Xid 79")
    session.commit()
    drains.reconcile()
    drains.reconcile()
    assert calls(bin_dir) == ["update NodeName=tynode1 State=DRAIN Reason=trainyard: GPU 1 drained (Xid 79)"]
    drain(session, "tynode1", 0, "by hand")
    session.commit()
    drains.reconcile()
    undrain(session, "tynode1", 0)
    undrain(session, "tynode1", 1)
    session.commit()
    drains.reconcile()
    drains.reconcile()
    assert calls(bin_dir)[1:] == [
        "update NodeName=tynode1 State=DRAIN Reason=trainyard: GPU 0 drained (by hand); "
        "GPU 1 drained (Xid 79)",
        "update NodeName=tynode1 State=RESUME",
    ]


def test_a_node_slurm_refuses_is_not_asked_again_each_tick(
    settings: Settings, session: Session, bin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake(bin_dir, "scontrol", f'echo "$@" >> {bin_dir}/calls\necho "Invalid node name specified" >&2\nexit 1')
    drain(session, "nosuchnode", 0, "typo")
    session.commit()
    drains = NodeDrains()
    drains.reconcile()
    drains.reconcile()
    assert len(calls(bin_dir)) == 1
    assert (
        "drain_node of node nosuchnode refused: scontrol update: Invalid node name specified" in caplog.text
    )
