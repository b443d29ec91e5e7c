"""The sandbox shows a job the data folders its spec names, read-only: model.path too, for hf_causal_lm."""

from __future__ import annotations

from pathlib import Path

from core.config import Settings
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from worker.sandbox import sandbox_for


def test_an_hf_jobs_model_path_is_bound_read_only(settings: Settings, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = settings.model_copy(update={"data_dir": data_dir})
    for folder in ("models/llama", "corpus"):
        (data_dir / folder).mkdir(parents=True)
    spec = JobSpec.model_validate(
        {
            "model": {"arch": "hf_causal_lm", "path": "models/llama"},
            "data": {"dataset": "tokens", "root": "corpus", "block_size": 8},
        }
    )
    box = sandbox_for(settings, spec, resolve_plan(spec), tmp_path / "run", None, Path.cwd())
    assert (data_dir / "models/llama").resolve() in box.read_only
    assert (data_dir / "corpus").resolve() in box.read_only
