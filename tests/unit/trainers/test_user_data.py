"""A data.factory's datasets through DataLoaders: disjoint equal shards per rank, steps of micro-batches of
any nesting, a resume that sees exactly the samples the run would have seen, and held-out shards that count
every sample once while every rank runs as many forwards."""

from __future__ import annotations

import subprocess
import time
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from jobspec.problems import SpecError
from trainers.data.batches import Batch, batch_size, describe, to_device
from trainers.data.held_out import LoaderHeldOut
from trainers.data.loader import data_loader
from trainers.data.steps import Batching, LoaderSteps, loader_steps
from trainers.data.user import UserData
from trainers.dist_env import DistEnv
from trainers.user_errors import UserCodeError

CPU = torch.device("cpu")


class Numbered(Dataset[dict[str, Any]]):
    """Item i is a dict holding i, so a batch shows which items it holds."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"id": torch.tensor(index), "pair": (torch.full((2,), float(index)), index)}


class Stream(IterableDataset[torch.Tensor]):
    def __init__(self, count: int) -> None:
        self.count, self.epoch = count, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(self.count) + 1000 * self.epoch)


def rank(r: int, world: int = 2) -> DistEnv:
    return DistEnv(rank=r, local_rank=r, world_size=world, device=CPU)


def data(train: Dataset[Any], val: Dataset[Any] | None = None) -> UserData:
    return UserData("data:build", Path("/nonexistent"), train, val, None)


def loader(train: Dataset[Any], env: DistEnv, workers: int = 0, max_steps: int | None = None) -> LoaderSteps:
    return loader_steps(data(train), env, Batching(8, 4, seed=3, workers=workers, device=CPU), max_steps)


def ids(step: list[Batch]) -> list[int]:
    return [int(i) for batch in step for i in (batch["id"] if isinstance(batch, dict) else batch)]


def steps(batches: LoaderSteps, done: int, count: int) -> list[list[int]]:
    stream = batches.from_step(done)
    return [ids(next(stream)) for _ in range(count)]


def test_ranks_get_disjoint_equal_shards_in_micro_batches_of_any_nesting() -> None:
    shards = [loader(Numbered(103), rank(r)) for r in (0, 1)]
    assert shards[0].steps_per_epoch == 51 // 8
    first = next(shards[0].from_step(0))
    assert [batch_size(b) for b in first] == [4, 4] and first[0]["pair"][0].shape == (4, 2)
    seen = [[i for step in steps(b, 0, b.steps_per_epoch) for i in step] for b in shards]
    assert len(seen[0]) == len(seen[1]) == 6 * 8 and not set(seen[0]) & set(seen[1])


@pytest.mark.parametrize(("done", "workers"), [(3, 0), (6, 0), (8, 2)])
def test_a_resume_sees_exactly_the_samples_of_the_uninterrupted_run(done: int, workers: int) -> None:
    """Across epoch ends too (6 steps an epoch here), and with loader worker processes."""
    uninterrupted = steps(loader(Numbered(103), rank(1), workers), 0, done + 5)
    assert steps(loader(Numbered(103), rank(1), workers), done, 5) == uninterrupted[done:]
    assert uninterrupted[:6] != uninterrupted[6:12], "each epoch is reshuffled"


def test_a_stream_is_sharded_by_rank_and_worker_and_replayed_on_resume() -> None:
    """48 items over 2 ranks x 2 workers: 12 each, 3 micro-batches of 4, so 3 steps of 8 a pass per rank."""
    shards = [loader(Stream(48), rank(r), workers=2, max_steps=10) for r in (0, 1)]
    both = [steps(b, 0, 4) for b in shards]
    first_pass = [i for shard in both for step in shard[:3] for i in step]
    assert sorted(first_pass) == list(range(48)), "every item once, on one rank"
    assert all(i >= 1000 for i in both[0][3]), "the next pass comes through set_epoch"
    assert steps(loader(Stream(48), rank(0), workers=2, max_steps=10), 2, 2) == both[0][2:]


def test_a_stream_needs_max_steps_and_a_batch_larger_than_the_data_is_refused() -> None:
    with pytest.raises(
        SpecError, match=r"train\.max_steps: .* whose length is unknown; set train\.max_steps"
    ):
        loader(Stream(40), rank(0))
    with pytest.raises(ValueError, match=r"larger than the 6 training samples .* lower train\.batch_size"):
        loader(Numbered(7), rank(0))


def test_a_failing_dataset_fails_as_the_data_factorys(tmp_path: Path) -> None:
    class Broken(Numbered):
        def __getitem__(self, index: int) -> dict[str, Any]:
            raise IndexError(f"no item {index}")

    with pytest.raises(
        UserCodeError, match=r"data.factory 'data:build''s dataset raised IndexError: no item"
    ):
        next(loader(Broken(16), rank(0)).from_step(0))


def test_held_out_shards_count_every_sample_once_and_keep_forwards_in_step() -> None:
    held_out = LoaderHeldOut(data(Numbered(1), Numbered(5)), workers=0, device=CPU)
    shards = [list(held_out.shard(rank(r), 2, bool)) for r in (0, 1)]
    assert [len(shard) for shard in shards] == [2, 2]
    counted = sorted(i for shard in shards for batch, kept in shard if kept for i in batch["id"].tolist())
    assert counted == [0, 1, 2, 3, 4]
    [only] = list(held_out.shard(rank(7, world=8), 2, bool))
    assert only[1] is False and only[0]["id"].tolist() == [0], "a rank without samples repeats sample 0"


def test_held_out_streams_agree_when_every_rank_has_run_out() -> None:
    held_out = LoaderHeldOut(data(Numbered(1), Stream(3)), workers=0, device=CPU)
    answers: list[bool] = []

    def others_have_two(has: bool) -> bool:
        answers.append(has)
        return len(answers) <= 2

    shard = list(held_out.shard(rank(1), 1, others_have_two))
    assert [(b.tolist(), kept) for b, kept in shard] == [([1], True), ([1], False)]
    assert answers == [True, False, False]


def test_batches_move_to_the_device_whatever_their_nesting() -> None:
    Pair = namedtuple("Pair", "x y")
    batch = {"a": [torch.ones(3, 2), (torch.zeros(3), "label")], "b": Pair(torch.ones(3), 7)}
    moved = to_device(batch, torch.device("meta"), non_blocking=False)
    assert moved["a"][0].is_meta and moved["a"][1][0].is_meta and moved["a"][1][1] == "label"
    assert isinstance(moved["b"], Pair) and moved["b"].x.is_meta and moved["b"].y == 7
    assert batch_size(batch) == 3
    assert describe((torch.ones(2, 3), {"k": 1})) == "a tuple of a tensor of shape [2, 3], a dict of k: a int"
    with pytest.raises(UserCodeError, match="a batch must hold a tensor with a batch dimension"):
        batch_size({"k": torch.tensor(1.0)})


def test_loader_workers_outlive_a_stop_s_sigterm_from_outside() -> None:
    """A cancel signals every process of the job (worker/executors/local/kill.py), loader workers too: they
    must keep serving batches until their rank reaches its final checkpoint. The SIGTERM comes from another
    process, as the worker's does; torch's worker loop would die on it."""
    batches = iter(data_loader(data(Numbered(64)), Numbered(64), 4, 2, CPU))
    first = [next(batches) for _ in range(2)]  # one from each worker: both past their start
    workers = [worker.pid for worker in batches._workers]  # type: ignore[attr-defined]
    subprocess.run(["kill", "-TERM", *map(str, workers)], check=True)
    time.sleep(0.5)  # for the workers to act on it: die, or not
    rest = [batch["id"] for batch in batches]
    assert torch.cat([batch["id"] for batch in first] + rest).tolist() == list(range(64))
