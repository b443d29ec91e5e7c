"""The embedding-bag model, the synthetic_bags data it learns from, and the SGD its sparse table needs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jobspec.events import MetricsEvent, parse_event
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import DataSpec, JobSpec, Optimizer, TrainSpec
from trainers.data import load_dataset
from trainers.dist_env import DistEnv
from trainers.loop import train
from trainers.models import build_model
from trainers.models.embedding_bag import EmbeddingBagClassifier
from trainers.schedule import build_optimizer, sparse_parameters

CPU = torch.device("cpu")
BAGS = DataSpec(dataset="synthetic_bags", num_samples=2048, num_classes=4, vocab_size=1000, bag_size=16)


def test_bags_are_seeded_token_ids_with_a_held_out_split() -> None:
    first, again = load_dataset(BAGS, seed=3), load_dataset(BAGS, seed=3)
    x, y = first.train
    assert first.tokens and x.dtype == torch.int64 and x.shape == (2048, 16)
    assert int(x.min()) >= 0 and int(x.max()) < 1000 and set(y.tolist()) == {0, 1, 2, 3}
    assert first.val[0].shape == (round(2048 * 0.1), 16)
    assert torch.equal(x, again.train[0]) and not torch.equal(x, load_dataset(BAGS, seed=4).train[0])


def bag_model(vocab_size: int, **kwargs: int) -> EmbeddingBagClassifier:
    model = build_model("embedding_bag", dict(kwargs), 16, 4, image_size=16, vocab_size=vocab_size)
    assert isinstance(model, EmbeddingBagClassifier)
    return model


def test_model_maps_bags_to_logits_with_sparse_table_gradients() -> None:
    model = bag_model(1000, embedding_dim=8)
    assert model.embedding.weight.shape == (1000, 8)
    model(torch.randint(1000, (5, 16))).sum().backward()
    assert model.embedding.weight.grad is not None and model.embedding.weight.grad.is_sparse
    assert sparse_parameters(model) == [model.embedding.weight]


def test_sparse_table_gets_plain_sgd_and_the_head_the_spec() -> None:
    model = bag_model(100)
    train = TrainSpec(optimizer=Optimizer.SGD, momentum=0.9, weight_decay=0.01)
    optimizer = build_optimizer(model.parameters(), train, 0.1, CPU, sparse=sparse_parameters(model))
    head, table = optimizer.param_groups
    assert table["params"] == [model.embedding.weight] and table["momentum"] == table["weight_decay"] == 0
    assert len(head["params"]) == 4 and head["momentum"] == 0.9 and head["weight_decay"] == 0.01
    model(torch.randint(100, (5, 16))).sum().backward()
    optimizer.step()


@pytest.mark.parametrize("name", [Optimizer.ADAM, Optimizer.ADAMW])
def test_adam_is_refused_for_a_sparse_table(name: Optimizer) -> None:
    model = bag_model(100)
    with pytest.raises(ValueError, match=r"use train\.optimizer sgd"):
        build_optimizer(
            model.parameters(), TrainSpec(optimizer=name), 0.1, CPU, sparse=sparse_parameters(model)
        )


def test_embedding_bag_learns_synthetic_bags_in_one_process(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "model": {"arch": "embedding_bag", "kwargs": {"embedding_dim": 16}},
            "data": BAGS.model_dump(),
            "train": {"epochs": 2, "batch_size": 64, "lr": 0.5, "momentum": 0.9},
            "parallel": {"strategy": "single"},
            "checkpoint": {"every_n_epochs": 0, "save_final": False},
        }
    )
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=resolve_plan(spec))
    # A world of one, built directly: rank_env() would also take over this process's SIGTERM.
    assert train(config, tmp_path, DistEnv(rank=0, local_rank=0, world_size=1, device=CPU))
    events = [parse_event(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    evals = [e.values for e in events if isinstance(e, MetricsEvent) and "eval_accuracy" in e.values]
    assert evals[-1]["eval_accuracy"] > 0.6, evals  # 4 classes: chance is 0.25
