"""A job handed to a standby the factory never forked (the factory died while it still imported, as the soak's
kills of the warm start did): it never ran, so it is requeued to start again, as a job whose worker stopped
is, rather than failed as a launch error; and nothing waits for the fork meanwhile (issue 42's soak: the
launch waited up to a minute for a standby's pid, then failed a job whose standby went on to train it)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from core.project import PROJECT_ROOT
from tests.unit.worker.test_standby import TIMEOUT_S, torchrun
from worker.executors.local.warm.factory_handle import FACTORY_MODULE, ForkedStandby, never_ran
from worker.executors.local.warm.launcher import WarmLauncher


@pytest.fixture
def fresh_launcher() -> Iterator[WarmLauncher]:
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    yield launcher
    launcher.close()


def factories() -> list[psutil.Process]:
    return [child for child in psutil.Process().children() if FACTORY_MODULE in " ".join(child.cmdline())]


def test_a_standby_whose_factory_dies_before_the_fork_never_ran(
    tmp_path: Path, fresh_launcher: WarmLauncher
) -> None:
    fresh_launcher.prepare()  # the factory starts importing torch
    process = fresh_launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert isinstance(process, ForkedStandby) and not process.forked(0), "handed over before its fork"
    for factory in factories():
        factory.kill()
        factory.wait(TIMEOUT_S)
    assert process.wait(TIMEOUT_S) is not None
    assert never_ran(process), "the job never reached a process"
    assert not (tmp_path / "launcher.log").read_text().strip(), "nothing ran it"
