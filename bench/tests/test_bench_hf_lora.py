"""bench.hf_lora end to end at toy size on the CPU (--smoke): each variant asked for fills its row of the
table. Nothing is timed; the compiled variants are left out, as compiling costs minutes on the CPU."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.trainer_helpers import ROOT

VARIANTS = ["full fine-tune, fsdp + AC", "LoRA (r 16, attention), fsdp + AC", "full fine-tune, fsdp"]


def test_the_smoke_run_fills_every_row() -> None:
    argv = [sys.executable, "-m", "bench.hf_lora", "--smoke", "--only", "ac,lora-ac,eager"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and "fsdp" in line]
    assert [row[0].lstrip("| ") for row in rows] == VARIANTS
    assert all(row[1] != "—" and row[4] != "—" for row in rows), rows
