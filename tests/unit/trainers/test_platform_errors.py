"""A failure of the platform is never blamed on the user's code, even when the user's own line called it:
a program's `ty.restore` of a checkpoint the job's ranks cannot see raises PlatformError, which the worker
restarts (worker/failure.py) rather than failing the job as `user_code_error`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.checkpoint import load_checkpoint
from trainers.user_errors import PlatformError, UserCodeError, blaming


def test_a_checkpoint_missing_for_the_ranks_is_the_platform_s_fault(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match=r"step-00000004\.pt, is not there"):
        load_checkpoint(tmp_path / "runs" / "3" / "checkpoints" / "step-00000004.pt", torch.device("cpu"))


def test_blaming_lets_a_platform_error_raised_under_the_bundle_s_own_frames_through(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    script = bundle / "train.py"
    script.write_text("def restore(load):\n    return load()\n")
    namespace: dict[str, object] = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)

    def missing() -> None:
        raise PlatformError("the checkpoint to resume from is not there")

    with pytest.raises(PlatformError), blaming(str(bundle)):
        namespace["restore"](missing)  # type: ignore[operator]
    with pytest.raises(UserCodeError, match=r"train\.py, line 2"), blaming(str(bundle)):
        namespace["restore"](lambda: {}["x"])  # type: ignore[operator]
