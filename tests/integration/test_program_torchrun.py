"""Program jobs under real torchrun, as the worker launches them (trainers.run with the bundle unpacked):
examples/program_ddp, a plain PyTorch script using trainyard.job, on 2 gloo ranks; its resume from a
checkpoint; the same under fsdp; a script using nothing of Trainyard; a script that raises or is missing;
and a Hugging Face and a Lightning trainer, each with its callback."""

from __future__ import annotations

import json
import tarfile
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from jobspec.events import DoneEvent, PhaseEvent, StartupEvent
from tests.integration.trainer_helpers import (
    TrainerRun,
    launch,
    spec_with,
    train,
    train_together,
    write_config,
)
from trainers.user_errors import MARKER

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "program_ddp"
HF = Path(__file__).parent / "bundles" / "hf_program"
LIGHTNING = Path(__file__).parent / "bundles" / "lightning_program"
CODE = "sha256:" + "0" * 64
SPEC: dict[str, Any] = {**json.loads((EXAMPLE / "spec.json").read_text()), "code": CODE}
MAX_STEPS, EVERY = SPEC["train"]["max_steps"], SPEC["metrics"]["every_n_steps"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    base = tmp_path_factory.mktemp("program")
    fsdp = spec_with(SPEC, parallel={"strategy": "fsdp"})
    full, plain, sharded = train_together(
        partial(train, base / "full", SPEC, 2, code_dir=EXAMPLE),
        partial(train, base / "plain", _plain_spec(base / "plain_code"), 2, code_dir=base / "plain_code"),
        partial(train, base / "fsdp", fsdp, 2, code_dir=EXAMPLE),
    )
    resumed = train(
        base / "resumed", SPEC, 2, resume_path=full.run_dir / "checkpoints/step-00000030.pt", code_dir=EXAMPLE
    )
    return {"full": full, "plain": plain, "resumed": resumed, "fsdp": sharded}


def _plain_spec(code_dir: Path) -> dict[str, Any]:
    code_dir.mkdir(parents=True)
    (code_dir / "hello.py").write_text(
        "import os, sys\nprint('hello from rank', os.environ['RANK'], 'args', sys.argv[1:])\n"
    )
    return {**SPEC, "program": {"entrypoint": ["python", "hello.py", "--x", "1"]}}


def test_metrics_arrive_every_n_steps_and_the_loss_falls(runs: dict[str, TrainerRun]) -> None:
    loss = runs["full"].metric("loss")
    assert [step for step, _ in loss] == list(range(EVERY, MAX_STEPS + 1, EVERY))
    assert loss[-1][1] < loss[0][1] / 2
    events = runs["full"].events()
    assert isinstance(events[0], PhaseEvent)
    assert isinstance(events[-1], DoneEvent) and events[-1].step == MAX_STEPS


def test_under_fsdp_the_script_follows_the_ddp_curve(runs: dict[str, TrainerRun]) -> None:
    """ty.prepare shards the model and rebuilds the optimizer over the shards: same data, same updates."""
    for (step, sharded), (_, replicated) in zip(
        runs["fsdp"].metric("loss"), runs["full"].metric("loss"), strict=True
    ):
        assert sharded == pytest.approx(replicated, rel=1e-5), step
    assert runs["fsdp"].parameter_sum() == pytest.approx(runs["full"].parameter_sum(), rel=1e-5)


def test_checkpoints_follow_the_spec_and_the_script_ran_with_its_args(runs: dict[str, TrainerRun]) -> None:
    assert runs["full"].checkpoint_steps() == [10, 20, 30, 40]
    assert runs["full"].final_checkpoint()["step"] == MAX_STEPS
    assert f"done after step {MAX_STEPS}" in runs["full"].log(0)


def test_a_resume_continues_at_the_next_step_and_ends_where_the_full_run_did(
    runs: dict[str, TrainerRun],
) -> None:
    resumed, full = runs["resumed"], runs["full"]
    assert [step for step, _ in resumed.metric("loss")] == list(range(35, MAX_STEPS + 1, EVERY))
    assert "resumed from" in resumed.log(0)
    assert resumed.parameter_sum() == pytest.approx(full.parameter_sum(), rel=1e-6)


def test_a_script_using_nothing_of_trainyard_runs_with_its_args_and_logs(runs: dict[str, TrainerRun]) -> None:
    plain = runs["plain"]
    for rank in (0, 1):
        assert f"hello from rank {rank} args ['--x', '1']" in plain.log(rank)
    # Set-up ends and its start-up marks follow; no metrics, as the script reports none.
    assert [type(event) for event in plain.events()] == [PhaseEvent, StartupEvent], plain.events()


@pytest.mark.parametrize(
    ("files", "entrypoint", "said"),
    [
        (
            {"boom.py": "def go():\n    raise KeyError('lr')\ngo()\n"},
            ["python", "boom.py"],
            "boom.py, line 2",
        ),
        ({}, ["python", "gone.py"], "gone.py is not in the code bundle"),
    ],
    ids=["raises", "missing"],
)
def test_a_failing_or_missing_script_leaves_a_user_code_error_with_its_traceback(
    tmp_path: Path, files: dict[str, str], entrypoint: list[str], said: str
) -> None:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    for name, text in files.items():
        (code_dir / name).write_text(text)
    spec = spec_with(
        SPEC, program={"entrypoint": entrypoint}, parallel={"strategy": "single", "nproc_per_node": 1}
    )
    write_config(tmp_path / "run", spec, code_dir=code_dir)
    done = launch(tmp_path / "run", 1)
    assert done.returncode != 0
    error = (tmp_path / "run" / "error.json").read_text()
    assert MARKER in error and said in error


def test_a_hugging_face_trainer_reports_metrics_and_checkpoints_through_its_callback(tmp_path: Path) -> None:
    spec = spec_with(
        SPEC,
        program={"entrypoint": ["python", "train.py"]},
        train={"max_steps": 10},
        checkpoint={"every_n_steps": 5, "keep_last": 1},
    )
    run = train(tmp_path / "run", spec, 2, code_dir=HF)
    assert [step for step, _ in run.metric("loss")] == [5, 10]
    assert run.checkpoint_steps() == [5, 10]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.tar")) == ["step-00000010.tar"]
    with tarfile.open(tmp_path / "run" / "checkpoints" / "step-00000010.tar") as tar:
        assert "checkpoint-10/model.safetensors" in tar.getnames()


def test_a_lightning_trainer_reports_metrics_and_checkpoints_through_its_callback(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="lightning is a test extra: `make install` installs it")
    spec = spec_with(
        SPEC,
        program={"entrypoint": ["python", "train.py"]},
        train={"max_steps": 10},
        checkpoint={"every_n_steps": 5, "keep_last": 1},
    )
    run = train(tmp_path / "run", spec, 2, code_dir=LIGHTNING)
    assert [step for step, _ in run.metric("loss")] == [5, 10]
    assert run.checkpoint_steps() == [5, 10]
    with tarfile.open(tmp_path / "run" / "checkpoints" / "step-00000010.tar") as tar:
        assert tar.getnames() == ["step-00000010.ckpt"]
