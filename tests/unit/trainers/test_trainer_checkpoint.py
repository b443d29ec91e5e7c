"""Checkpoints: bare keys, an atomic write that loads with weights_only=True, exact restore, keep_last, a
background write that neither sees later updates nor announces a file before it is durable, and a sha256
beside each file that a load checks."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch import nn

from jobspec.events import CheckpointEvent, CheckpointRemovedEvent, parse_event
from jobspec.spec import Precision
from trainers import checkpoint
from trainers.checkpoint import (
    Checkpointer,
    CorruptCheckpoint,
    bare_keys,
    checkpoint_name,
    load_checkpoint,
    restore,
    write_atomically,
)
from trainers.dist_env import DistEnv
from trainers.metrics import EventLog
from trainers.precision import MixedPrecision
from trainers.strategies.single import SingleDeviceStrategy

CPU = torch.device("cpu")


class Wrapper(nn.Module):
    """Stands in for DistributedDataParallel, which names its child `module`."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def trained_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def checkpointer(run_dir: Path, keep_last: int = 2) -> Checkpointer:
    return Checkpointer(run_dir, keep_last=keep_last, name="unit", events=EventLog(run_dir, enabled=True))


def events(run_dir: Path) -> list[object]:
    return [parse_event(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_wrapper_prefixes_are_stripped() -> None:
    model, _ = trained_model()
    # torch.compile returns an nn.Module for a module; its stubs only promise a callable.
    wrapped = cast(nn.Module, torch.compile(Wrapper(cast(nn.Module, torch.compile(model)))))
    assert any(key.startswith("_orig_mod.module._orig_mod.") for key in wrapped.state_dict())
    assert list(bare_keys(wrapped.state_dict())) == list(model.state_dict())


def test_round_trip_restores_model_optimizer_rng_and_step(tmp_path: Path) -> None:
    model, optimizer = trained_model()
    fp32 = MixedPrecision(Precision.FP32, CPU)
    saver = checkpointer(tmp_path)
    path = saver.save(Wrapper(model).state_dict(), optimizer.state_dict(), fp32, 12, 2)
    saver.wait()
    expected_draw = torch.rand(3)

    assert path == tmp_path / "checkpoints" / checkpoint_name(12)
    raw = torch.load(path, weights_only=True)
    assert raw["step"] == 12 and raw["epoch"] == 2 and raw["name"] == "unit" and raw["scaler"] is None
    assert not any(key.startswith("module.") for key in raw["model"])

    fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(123)
    strategy = SingleDeviceStrategy(DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    strategy.setup_module(fresh)
    step = restore(load_checkpoint(path, CPU), strategy, fresh_optimizer, MixedPrecision(Precision.FP32, CPU))
    assert step == 12
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    for restored, original in zip(fresh.parameters(), model.parameters(), strict=True):
        momentum = fresh_optimizer.state[restored]["momentum_buffer"]
        assert torch.equal(momentum, optimizer.state[original]["momentum_buffer"])
    assert torch.equal(torch.rand(3), expected_draw)


def test_save_announces_the_file_relative_to_the_run_dir(tmp_path: Path) -> None:
    model, optimizer = trained_model()
    fp32 = MixedPrecision(Precision.FP32, CPU)
    saver = checkpointer(tmp_path)
    path = saver.save(model.state_dict(), optimizer.state_dict(), fp32, 5, 1)
    saver.wait()
    (event,) = events(tmp_path)
    assert isinstance(event, CheckpointEvent)
    assert (event.step, event.epoch, event.path) == (5, 1, "checkpoints/step-00000005.pt")
    assert event.size_bytes == path.stat().st_size > 0
    assert event.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-00000005.pt",
        "step-00000005.pt.sha256",
    ]
    # As `sha256sum` writes it, so `sha256sum -c step-00000005.pt.sha256` checks a copy.
    assert path.with_name("step-00000005.pt.sha256").read_text() == f"{event.sha256}  step-00000005.pt\n"


def test_keep_last_deletes_the_oldest_and_says_so(tmp_path: Path) -> None:
    model, optimizer = trained_model()
    saver = checkpointer(tmp_path, keep_last=2)
    for step in (10, 20, 30, 40):
        saver.save(model.state_dict(), optimizer.state_dict(), MixedPrecision(Precision.FP32, CPU), step, 1)
    saver.wait()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-00000030.pt",
        "step-00000030.pt.sha256",
        "step-00000040.pt",
        "step-00000040.pt.sha256",
    ]
    removed = [e.path for e in events(tmp_path) if isinstance(e, CheckpointRemovedEvent)]
    assert removed == ["checkpoints/step-00000010.pt", "checkpoints/step-00000020.pt"]


def test_other_ranks_write_no_events(tmp_path: Path) -> None:
    EventLog(tmp_path, enabled=False).append(CheckpointRemovedEvent(path="x"))
    assert not (tmp_path / "events.jsonl").exists()


def held_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make the writer thread wait for the returned event before it writes, as a slow disk would."""
    release = threading.Event()
    write = checkpoint.write_atomically

    def held(state: dict[str, Any], path: Path) -> str:
        release.wait(timeout=30)
        return write(state, path)

    monkeypatch.setattr(checkpoint, "write_atomically", held)
    return release


def test_training_on_while_the_write_is_pending_changes_nothing_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = held_writes(monkeypatch)
    model, optimizer = trained_model()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    saver = checkpointer(tmp_path)
    path = saver.save(model.state_dict(), optimizer.state_dict(), MixedPrecision(Precision.FP32, CPU), 7, 1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()  # updates the parameters in place while the checkpoint waits for the disk
    assert not (tmp_path / "events.jsonl").exists()  # nothing is announced before the file is durable
    release.set()
    saver.wait()
    saved = torch.load(path, weights_only=True)["model"]
    for key, value in before.items():
        assert torch.equal(saved[key], value), key
    assert [type(e) for e in events(tmp_path)] == [CheckpointEvent]


def test_a_failed_write_is_raised_by_wait_and_announces_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(state: dict[str, Any], path: Path) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_atomically", disk_full)
    model, optimizer = trained_model()
    saver = checkpointer(tmp_path)
    saver.save(model.state_dict(), optimizer.state_dict(), MixedPrecision(Precision.FP32, CPU), 3, 1)
    with pytest.raises(RuntimeError, match="writing a checkpoint failed") as raised:
        saver.wait()
    assert isinstance(raised.value.__cause__, OSError)
    assert not (tmp_path / "events.jsonl").exists()
    saver.wait()  # reported once


def test_a_load_refuses_bytes_changed_since_the_write(tmp_path: Path) -> None:
    state = {"step": 3, "w": torch.arange(300_000, dtype=torch.float32)}
    path = tmp_path / "step-00000003.pt"
    write_atomically(state, path)
    with path.open("r+b") as f:  # 64 KiB overwritten inside the tensor's bytes; the size unchanged
        f.seek(200_000)
        f.write(bytes(65_536))
    assert torch.load(path, weights_only=True)["step"] == 3, "torch alone loads it without a word"
    with pytest.raises(
        CorruptCheckpoint, match=r"step-00000003.pt is corrupt: its sha256 is [0-9a-f]{64}, not"
    ):
        load_checkpoint(path, CPU)
    path.with_name("step-00000003.pt.sha256").unlink()
    assert load_checkpoint(path, CPU)["step"] == 3, "a checkpoint from before checksums loads as it is"
