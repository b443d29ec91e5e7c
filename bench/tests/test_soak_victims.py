"""The soak kills only its own service's processes: `make test` runs other services beside it, whose
standbys (and whatever their ranks fork, which keeps a standby's environment) carry standby ids too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.soak.processes import Tracker, waiting_standbys
from jobspec.startup import STANDBY_ID_ENV


@pytest.fixture
def standby_like() -> Iterator[subprocess.Popen[bytes]]:
    """A process that looks like a waiting standby: a standby id no run directory names."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, STANDBY_ID_ENV: "f" * 32}
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_standby_of_another_service_is_never_a_victim(
    standby_like: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    others = Tracker(lambda: [], tmp_path)
    assert standby_like.pid not in [proc.pid for proc in waiting_standbys(tmp_path, others)]
    ours = Tracker(lambda: [standby_like.pid], tmp_path)
    assert [proc.pid for proc in waiting_standbys(tmp_path, ours)] == [standby_like.pid]
