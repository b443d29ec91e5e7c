"""Rank 0 of a sweep's trial never trains more than GATE_LAG_S past a report of its objective that its worker
has not judged (jobspec/pruner_gate.py): it waits at its next report, of whatever metric, until the verdict
comes. Nothing else waits: a trial whose worker keeps up, a job that is no pruned trial, a rank other than
0, or a trial told to stop (its SIGTERM's final checkpoint needs the time)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from jobspec.pruner_gate import GATE_DIR, GATE_FILE, PrunerGate
from trainers.dist_env import StopRequest
from trainers.pruner_wait import GateWait

LAG_S = 0.1  # GATE_LAG_S, shortened for the test
OPENED_AFTER_S = 0.5
EVAL, LOSS = {"eval_loss": 0.3}, {"loss": 0.5}


@pytest.fixture(autouse=True)
def short_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainers.pruner_wait.GATE_LAG_S", LAG_S)


def set_gate(run_dir: Path, judged: int) -> None:
    (run_dir / GATE_DIR).mkdir(exist_ok=True)
    staged = run_dir / GATE_DIR / "staged"
    staged.write_text(PrunerGate(metric="eval_loss", judged=judged).model_dump_json())
    staged.replace(run_dir / GATE_DIR / GATE_FILE)


def waited(gate: GateWait, step: int, values: dict[str, float]) -> float:
    started = time.monotonic()
    gate.after_report(step, values)
    return time.monotonic() - started


def test_a_trial_past_the_lag_waits_at_its_next_report_for_the_verdict(tmp_path: Path) -> None:
    set_gate(tmp_path, judged=-1)
    gate = GateWait(tmp_path, True, None)
    assert waited(gate, 179, EVAL) < LAG_S, "a fresh report is not waited on"
    time.sleep(2 * LAG_S)
    started = time.monotonic()
    threading.Timer(OPENED_AFTER_S, set_gate, (tmp_path, 179)).start()
    gate.after_report(180, LOSS)
    assert time.monotonic() - started >= OPENED_AFTER_S - 2 * LAG_S


def test_a_trial_whose_worker_keeps_up_never_waits(tmp_path: Path) -> None:
    gate = GateWait(tmp_path, True, None)
    for step in range(1, 6):
        set_gate(tmp_path, judged=step - 1)
        assert waited(gate, step, EVAL) < LAG_S
        time.sleep(LAG_S)


def test_nothing_else_waits(tmp_path: Path) -> None:
    no_gate = GateWait(tmp_path / "plain", True, None)
    set_gate(tmp_path, judged=-1)
    other_rank = GateWait(tmp_path, False, None)
    for gate in (no_gate, other_rank):
        gate.after_report(10, EVAL)
        time.sleep(2 * LAG_S)
        assert waited(gate, 11, LOSS) < LAG_S


def test_a_trial_told_to_stop_waits_no_more(tmp_path: Path) -> None:
    set_gate(tmp_path, judged=-1)
    stop = StopRequest()
    gate = GateWait(tmp_path, True, stop)
    gate.after_report(10, EVAL)
    time.sleep(2 * LAG_S)
    threading.Timer(OPENED_AFTER_S, setattr, (stop, "requested", True)).start()
    assert waited(gate, 11, LOSS) < 5 * OPENED_AFTER_S
