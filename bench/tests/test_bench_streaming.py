"""bench.streaming end to end at toy size on the CPU (--smoke): it writes its folder, runs the trainer
streamed and resident and the hand-written loop, and prints one table row each. Nothing is timed. Then its
pure parts: the worker counts it takes, the choice data.decode=auto logged, and issue 48's ratios."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.result import Result
from bench.streaming import FOLDER, chosen, worker_counts
from bench.streaming_tables import Row, tables
from tests.integration.trainer_helpers import ROOT


def test_the_smoke_run_writes_the_folder_and_fills_every_row(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.streaming", "--smoke", "--dir", str(tmp_path), "--workers", "1"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert len(list((tmp_path / FOLDER).rglob("*.jpg"))) == 64
    rows = {
        line.split(" | ")[0].lstrip("| "): line for line in done.stdout.splitlines() if line.startswith("| ")
    }
    for variant in (
        "streamed (loader workers)",
        "decoded once, resident",
        "hand-written ImageFolder loop (1 workers)",
    ):
        assert variant in rows and "—" not in rows[variant].split(" | ")[1], rows
    assert "streamed (data.decode=gpu) (skipped: needs a GPU)" in rows
    assert "streamed (data.decode=auto) (skipped: needs a GPU)" in rows
    assert "streamed: hand-written img/s" in rows and "streamed: resident img/s" in rows


def test_workers_is_one_count_or_a_list() -> None:
    assert worker_counts("14") == [14] and worker_counts("4,14") == [4, 14]
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        worker_counts("0,4")


def test_the_auto_row_names_its_choice_from_the_ranks_log() -> None:
    log = "data: data.placement=stream: ...\ndata: data.decode=auto: gpu: 4 loader workers decode 3 img/s\n"
    assert chosen("streamed (data.decode=auto)", log) == "streamed (data.decode=auto): gpu"
    split = "data: data.decode=auto: split (workers 31%, GPU 69%): 4 loader workers decode 3 img/s\n"
    assert chosen("streamed (data.decode=auto)", split).endswith("auto): split (workers 31%, GPU 69%)")
    assert chosen("streamed (loader workers)", "data: data.placement=stream\n") == "streamed (loader workers)"


def test_auto_is_weighed_against_cpu_resident_and_the_better_of_cpu_and_gpu() -> None:
    rates = {"cpu": 100.0, "gpu": 160.0, "auto": 150.0, "resident": 200.0, "hand": 100.0}
    text = tables([Row(Result(variant, rate, None)) for variant, rate in rates.items()])
    cells = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    found = {row[0].lstrip("| "): row[1] for row in cells}
    assert found["data.decode=auto: cpu decode img/s"] == "1.50x"
    assert found["data.decode=auto: resident img/s"] == "0.75x"
    assert found["data.decode=auto: better of cpu and gpu img/s"] == "0.94x"
