"""Every examples/*.json is a valid job spec that plans, runs on bundled data by default (or names in its
`name` the data.root under TRAINYARD_DATA_DIR it reads, and its model.path), and is indexed in
docs/examples.md; those named for CIFAR-10 still plan with data pointed at it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec, Precision, Strategy

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
BUNDLED_DATA = {"synthetic", "digits", "synthetic_bags", "synthetic_tokens"}


def _load(path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_plans_on_bundled_data_and_is_in_the_examples_index(path: Path) -> None:
    raw = _load(path)
    spec = JobSpec.model_validate(raw)
    resolve_plan(spec)
    assert spec.data.dataset in BUNDLED_DATA or f"(data.root={spec.data.root})" in spec.name
    assert spec.model.path is None or f"(model.path={spec.model.path})" in spec.name
    assert f"examples/{path.name}" in (ROOT / "docs" / "examples.md").read_text()
    if "CIFAR-10" in spec.name:
        assert "data.root=cifar10" in spec.name
        cifar = {**raw, "data": {**raw["data"], "dataset": "cifar10", "root": "cifar10"}}
        resolve_plan(JobSpec.model_validate(cifar))


def test_the_alexnet_grid_covers_every_strategy_and_precision_of_the_seed() -> None:
    grid = set()
    for path in EXAMPLES:
        spec = JobSpec.model_validate(_load(path))
        if spec.model.arch == "alexnet":
            assert spec.data.image_size == 227
            grid.add((resolve_plan(spec).strategy, spec.precision))
    strategies = (Strategy.SINGLE, Strategy.DP, Strategy.DDP)
    assert grid == {(s, p) for s in strategies for p in Precision}


def test_the_pipeline_example_is_the_measured_recipe() -> None:
    """bench/RESULTS.md measured the pipeline fast only compiled and split at layer2 (as docs/performance.md
    says)."""
    spec = JobSpec.model_validate(_load(ROOT / "examples" / "resnet50_pipeline.json"))
    assert spec.parallel.strategy is Strategy.PIPELINE
    assert spec.performance.compile
    assert spec.parallel.split_at == ["layer2"]
