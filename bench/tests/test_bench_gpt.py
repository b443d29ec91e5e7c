"""bench.gpt end to end at toy size on the CPU (--smoke): the trainer's gpt job and the hand-written loop each
fill their row of the table. Nothing is timed."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.trainer_helpers import ROOT


def test_the_smoke_run_fills_both_rows() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpt", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")
        for line in done.stdout.splitlines()
        if line.startswith("| ")
    }
    for variant in ("Trainyard trainer (model.arch gpt)", "hand-written nanoGPT loop"):
        assert variant in rows and rows[variant][1] != "—", rows
