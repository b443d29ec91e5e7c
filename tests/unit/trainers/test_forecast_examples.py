"""Every example job spec is forecast (issue 44): examples/*.json, the job specs of examples' folders (a code
bundle's, its folder as the bundle, as a worker unpacks it) and a sweep's spec, each traced on the CPU
against the device it asks for. A program has no step to trace, and says so; an example whose files are not
in the repository is skipped, naming them; one that cannot be traced yet says why, as the API's note will."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.services.forecast_check import NO_STEP
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from trainers.forecast.estimate import Target, forecast

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.json")) + sorted((ROOT / "examples").glob("*/*.json"))
H200 = Target("NVIDIA H200", 143_771 * 2**20, 16)
CPU_HOST = Target(None, 64 * 2**30, 16)
# What the repository does not hold, and the example needs to be forecast.
NOT_IN_REPO = {
    "hf_lora_local": "its model.path (models/llama, a Hugging Face config and tokenizer) is a download",
    "image_folder_stream": "its data.root (imagenet/train, whose class folders size the model) is a download",
}
# Traced, and failing in torch: MemTracker cannot take a sparse tensor, which the embedding table's
# gradient is (trainers/schedule.py::sparse_parameters). The API stores such a job without a forecast, with
# the error as its note.
UNTRACEABLE = {"embedding_bag_cpu_table": (NotImplementedError, "SparseTensorImpl")}
SLOW_S = 10.0  # an example slower than this is named in the test's output


def _name(path: Path) -> str:
    return path.stem if path.parent.name == "examples" else f"{path.parent.name}/{path.stem}"


def _spec(path: Path) -> tuple[dict[str, Any], Path | None]:
    """The job spec the file holds (a sweep's is its `spec`), and its bundle: the example's folder."""
    raw: dict[str, Any] = json.loads(path.read_text())
    raw = raw.get("spec", raw)
    if "code" not in raw:
        return raw, None
    return {**raw, "code": "sha256:" + "0" * 64}, path.parent


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An example bundle's modules (models, data, lm) and its sys.path entry are gone after its test, so
    that no other test imports them by their common names; torch's, imported on the way, stay."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    examples = ROOT / "examples"
    for name, module in list(sys.modules.items()):
        if Path(getattr(module, "__file__", None) or "/").is_relative_to(examples):
            del sys.modules[name]


@pytest.mark.usefixtures("isolated_imports")
@pytest.mark.parametrize("path", EXAMPLES, ids=[_name(p) for p in EXAMPLES])
def test_every_example_is_forecast_or_says_why_not(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if _name(path) in NOT_IN_REPO:
        pytest.skip(NOT_IN_REPO[_name(path)])
    raw, bundle = _spec(path)
    spec = JobSpec.model_validate(raw)
    if spec.program is not None:
        pytest.skip(NO_STEP)  # the note the API gives it (app/services/forecast_check.py)
    plan = resolve_plan(spec)
    config = RunConfig(
        job_id=0, attempt=1, spec=spec, plan=plan, code_dir=None if bundle is None else str(bundle)
    )
    target = H200 if plan.device == "cuda" else CPU_HOST
    if _name(path) in UNTRACEABLE:
        error, match = UNTRACEABLE[_name(path)]
        with pytest.raises(error, match=match):
            forecast(config, target, None)
        return
    started = time.monotonic()
    found = forecast(config, target, plan.max_steps or spec.train.max_steps)
    took = time.monotonic() - started
    assert found.peak_memory_bytes > 0 and found.step_time_s > 0, found
    assert int(found.breakdown["parameters"]) > 0 and found.fits, found
    assert ("CPU" in found.basis) == (plan.device == "cpu"), found.basis
    if took > SLOW_S:
        with capsys.disabled():
            print(f"\n{_name(path)}: forecast in {took:.0f} s")
