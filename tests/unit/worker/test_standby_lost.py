"""A job handed to a standby the factory never forked (the factory, its imports done, died before this fork,
as the soak's kills of the warm start did): it never ran, so it is requeued to start again, as a job whose
worker stopped is, rather than failed as a launch error; and nothing waits for the fork meanwhile (issue 42's
soak: the launch waited up to a minute for a standby's pid, then failed a job whose standby went on to train
it). A job launched while the factory still imports starts cold (test_standby.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from core.project import PROJECT_ROOT
from tests.unit.worker.test_standby import TIMEOUT_S, torchrun, waiting_standby
from worker.executors.local.warm.factory_handle import ForkedStandby, never_ran
from worker.executors.local.warm.launcher import WarmLauncher


@pytest.fixture
def fresh_launcher() -> Iterator[WarmLauncher]:
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    yield launcher
    launcher.close()


def test_a_standby_whose_factory_dies_before_the_fork_never_ran(
    tmp_path: Path, fresh_launcher: WarmLauncher
) -> None:
    factory = psutil.Process(waiting_standby(fresh_launcher).pid).parent()
    assert factory is not None
    factory.suspend()  # a fork asked of it now never comes
    (tmp_path / "first").mkdir()
    first = fresh_launcher.start(torchrun(tmp_path / "first"), tmp_path / "first.log")  # the forked one
    process = fresh_launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert isinstance(process, ForkedStandby) and not process.forked(0), "handed over before its fork"
    factory.kill()
    factory.wait(TIMEOUT_S)
    assert first.wait(TIMEOUT_S) is not None
    assert process.wait(TIMEOUT_S) is not None
    assert never_ran(process), "the job never reached a process"
    assert not (tmp_path / "launcher.log").read_text().strip(), "nothing ran it"
