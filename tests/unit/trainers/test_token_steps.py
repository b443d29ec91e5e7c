"""Token windows through the loop's DataLoader path: the ranks' shares of an epoch never overlap, a run
resumed mid-epoch reads exactly the windows an uninterrupted one would have read next, and the real loop
(one CPU process, the examples/tokens_lm bundle's model and next-token loss) continues the same loss curve
from a mid-epoch checkpoint."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import torch

from jobspec.events import MetricsEvent, parse_event
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import DataSpec, JobSpec
from tests.unit.trainers.token_corpus import write_ids
from trainers.data.steps import Batching, SampledSteps
from trainers.data.tokens import load_tokens, make_demo
from trainers.dist_env import DistEnv
from trainers.loop import train

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[3]
BUNDLE = ROOT / "examples" / "tokens_lm"
# 401 ids 0..400 in windows of 8: 50 windows, each named by its first id.
IDS = DataSpec(dataset="tokens", root="ids", block_size=8, val_fraction=0, vocab_size=401)


def steps(rank: int, world_size: int, workers: int = 0) -> SampledSteps:
    data = load_tokens(IDS)
    env = DistEnv(rank=rank, local_rank=rank, world_size=world_size, device=CPU)
    return SampledSteps(data, env, Batching(4, 4, seed=3, workers=workers, device=CPU))


def window_starts(source: SampledSteps, done: int, count: int) -> list[list[int]]:
    """The first id of every window of `count` steps after `done`, a list per step."""
    taken = itertools.islice(source.from_step(done), count)
    return [[int(x[0]) for micro in step for x in micro[0]] for step in taken]


def test_two_ranks_never_share_a_window_within_an_epoch(data_dir: Path) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(401))
    ranks = [steps(rank, 2, workers=2) for rank in range(2)]
    per_epoch = ranks[0].steps_per_epoch
    assert per_epoch == 6 == ranks[1].steps_per_epoch, "25 windows a rank, whole steps of 4"
    seen = [window_starts(rank, 0, 2 * per_epoch) for rank in ranks]
    for epoch in range(2):
        shares = [
            {w for step in rank[epoch * per_epoch : (epoch + 1) * per_epoch] for w in step} for rank in seen
        ]
        assert not shares[0] & shares[1]
        assert len(shares[0] | shares[1]) == 48 and all(w % 8 == 0 for w in shares[0] | shares[1])
    assert seen[0][:per_epoch] != seen[0][per_epoch:], "each epoch in an order of its own"


def test_a_run_resumed_mid_epoch_reads_exactly_the_remaining_windows(data_dir: Path) -> None:
    write_ids(data_dir / "ids" / "train.bin", range(401))
    full = window_starts(steps(0, 1), 0, 24)
    for done in (5, 14):  # mid-epoch in the first and the second epoch of 12 steps
        assert window_starts(steps(0, 1), done, 24 - done) == full[done:]


def lm_spec(**checkpoint: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "code": "sha256:" + "0" * 64,
            "model": {"factory": "lm:build", "kwargs": {"vocab_size": 16, "width": 8}},
            "data": {
                "dataset": "tokens",
                "root": "demo",
                "block_size": 8,
                "vocab_size": 16,
                "loader_workers": 0,
            },
            "train": {"loss": "lm:loss", "max_steps": 14, "batch_size": 8, "optimizer": "adamw", "lr": 0.02},
            "parallel": {"strategy": "single"},
            "checkpoint": {"every_n_epochs": 0, "keep_last": 5, **checkpoint},
            "metrics": {"every_n_steps": 1},
        }
    )


def losses(run_dir: Path) -> list[tuple[int, float]]:
    events = [parse_event(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [(e.step, e.values["loss"]) for e in events if isinstance(e, MetricsEvent) and "loss" in e.values]


def run(run_dir: Path, spec: JobSpec, resume_path: Path | None = None) -> list[tuple[int, float]]:
    plan = resolve_plan(spec)
    plan.resume_path = None if resume_path is None else str(resume_path)
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=plan, code_dir=str(BUNDLE))
    run_dir.mkdir()
    # A world of one, built directly: rank_env() would also take over this process's SIGTERM.
    assert train(config, run_dir, DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    return losses(run_dir)


def test_a_resume_from_a_mid_epoch_checkpoint_continues_the_loss_curve(
    data_dir: Path, tmp_path: Path
) -> None:
    make_demo(data_dir / "demo", tokens=800, vocab_size=16)  # 99 windows of 8: 12 steps an epoch
    whole = run(tmp_path / "whole", lm_spec(every_n_steps=5))
    assert [step for step, _ in whole] == list(range(1, 15))
    assert whole[-1][1] < 0.8 * whole[0][1], whole
    checkpoint = tmp_path / "whole" / "checkpoints" / "step-00000005.pt"
    resumed = run(tmp_path / "resumed", lm_spec(every_n_steps=0), resume_path=checkpoint)
    assert [step for step, _ in resumed] == list(range(6, 15))
    for (step, a), (_, b) in zip(resumed, whole[5:], strict=True):
        assert math.isclose(a, b, rel_tol=1e-6), f"step {step}: {a} vs {b}"
