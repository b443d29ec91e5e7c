"""Checkpoint writes under SIGKILL at arbitrary moments, in a real writer process; loads that refuse pickled
code, or bytes that changed since they were written. Through the running service: a corrupt newest
checkpoint passed over at a restart, checkpoint events whose paths lead out of the run directory, a corrupt
download refused, and a loss gone NaN failing its job."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from jobspec.events import EVENTS_FILE, CheckpointEvent, parse_event
from jobspec.files import corruption
from tests.integration.jobs import example_spec, rank_processes, submit, wait_status
from tests.integration.servers import ROOT, Stack, wait_for
from trainers.checkpoint import (
    CorruptCheckpoint,
    load_checkpoint,
    remove_temp_files,
    sidecar,
    write_atomically,
)

# Writes step-N.pt one after another, each big enough (8 MB) that a kill often lands mid-write.
WRITER = """
import sys, torch
from pathlib import Path
from trainers.checkpoint import write_atomically
directory = Path(sys.argv[1])
for step in range(1, 10_000):
    write_atomically({"step": step, "w": torch.full((2 << 20,), float(step))}, directory / "latest.pt")
    print(step, flush=True)
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.04, 0.17])
def test_a_writer_killed_at_any_moment_leaves_a_loadable_checkpoint(tmp_path: Path, delay_s: float) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    first = int(writer.stdout.readline())  # one complete checkpoint exists from here on
    time.sleep(delay_s)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    latest = tmp_path / "latest.pt"
    state = torch.load(latest, weights_only=True)
    assert state["step"] >= first
    assert torch.equal(state["w"], torch.full((2 << 20,), float(state["step"])))
    # The sidecar takes its name first: a kill between the two renames leaves a newer digest, which the
    # older file fails. Such a file is refused, never trusted.
    expected = sidecar(latest).read_text().partition(" ")[0]
    if corruption(latest, expected) is None:
        assert load_checkpoint(latest, torch.device("cpu"))["step"] == state["step"]
    else:
        with pytest.raises(CorruptCheckpoint):
            load_checkpoint(latest, torch.device("cpu"))
    remove_temp_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt", "latest.pt.sha256"]


class RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.pt"
    torch.save({"model": RunsCode()}, evil)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(evil, torch.device("cpu"))
    assert not (tmp_path / "pwned").exists()


def test_write_atomically_replaces_only_whole_files(tmp_path: Path) -> None:
    write_atomically({"step": 1}, tmp_path / "c.pt")
    write_atomically({"step": 2}, tmp_path / "c.pt")
    assert load_checkpoint(tmp_path / "c.pt", torch.device("cpu"))["step"] == 2


# Checkpoints every 20 steps, of ~4.5 MB each (room for the 1 MB the held-out test overwrote); 440 steps at
# ~100 a second, so the test has stopped the job long before its end.
CORRUPTIBLE = example_spec(
    "digits_ddp_cpu.json",
    model={"kwargs": {"hidden": 512, "depth": 3}},
    train={"epochs": 20},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 20, "keep_last": 3},
    limits={"max_restarts": 1},
)
# Diverges at once: lr at the spec's bound.
DIVERGING = example_spec(
    "digits_ddp_cpu.json", train={"lr": 1e4}, parallel={"strategy": "single", "nproc_per_node": 1}
)


def saved(run_dir: Path) -> list[CheckpointEvent]:
    """The checkpoints the trainer announced whose files are still there, oldest first."""
    text = (run_dir / EVENTS_FILE).read_text() if (run_dir / EVENTS_FILE).exists() else ""
    complete = text.split("\n")[:-1]  # the last line may be half written
    events = [event for line in complete if isinstance(event := parse_event(line), CheckpointEvent)]
    return [event for event in events if (run_dir / event.path).is_file()]


def overwrite_inside(path: Path, length: int) -> None:
    """`length` bytes in the middle of the file replaced, its size unchanged."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek((size - length) // 2)
        f.write(os.urandom(length))
    assert path.stat().st_size == size


def test_a_corrupt_newest_checkpoint_is_passed_over_and_never_served(embedded_stack: Stack) -> None:
    """The held-out cases: the newest checkpoint's bytes overwritten before a restart; checkpoint events a
    rank appended whose paths lead out of the run directory; a download of bytes that changed on disk."""
    runs = Path(embedded_stack.env["TRAINYARD_RUNS_DIR"])
    with embedded_stack.client() as client:
        job_id = submit(client, CORRUPTIBLE)["id"]
        run_dir = runs / str(job_id)
        wait_for(lambda: len(saved(run_dir)) >= 2, 180, "two checkpoints")
        ranks = [p for rank in (0, 1) for p in rank_processes(runs, job_id, rank)]
        for rank in ranks:
            rank.suspend()  # no step and no write while the run directory is changed under it
        *_, previous, newest = saved(run_dir)
        overwrite_inside(run_dir / newest.path, 1 << 20)
        (run_dir / "checkpoints/evil.pt").symlink_to("/etc/passwd")
        with (run_dir / EVENTS_FILE).open("a") as events:
            for step, path in ((998, "checkpoints/evil.pt"), (999, "../../../../../../etc/passwd")):
                hostile = {"kind": "checkpoint", "step": step, "epoch": 1, "path": path, "size_bytes": 1}
                events.write(json.dumps(hostile) + "\n")
        for rank in ranks:
            rank.kill()  # a crash: the job restarts
        job = wait_status(client, job_id, {"succeeded"}, timeout=300)
        events_shown = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        listed = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
        notes = [e for e in events_shown if e["reason"] == "checkpoint_skipped"]
        assert job["attempt"] == 2, job
        assert len(notes) == 1 and notes[0]["attempt"] == 2, notes
        message = notes[0]["message"]
        assert f"(step {previous.step}); passed over checkpoint " in message, message
        assert f"(step {newest.step}): its sha256 is " in message, message
        assert [c["step"] for c in listed][-1] == job["progress"]["total"], "no step 998 or 999 recorded"
        for checkpoint in listed:  # the step saved again after the restart is served with its new bytes
            assert client.get(checkpoint["download_url"]).status_code == 200, checkpoint

        overwrite_inside(run_dir / f"checkpoints/step-{listed[-1]['step']:08d}.pt", 1 << 20)
        refused = client.get(listed[-1]["download_url"])
    assert refused.status_code == 409, refused.text
    assert "is corrupt: its sha256 is" in refused.json()["detail"]


def test_a_loss_gone_nan_fails_the_job_naming_the_step(embedded_stack: Stack) -> None:
    with embedded_stack.client() as client:
        job = wait_status(client, submit(client, DIVERGING)["id"], {"failed"}, timeout=180)
    assert job["status_reason"] == "nonfinite_loss", job
    assert job["message"].startswith("NonFiniteLoss: the training loss was not finite (NaN or inf) at step ")
