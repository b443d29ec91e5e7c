"""model.arch hf_causal_lm's directory, as the API checks it at submit and the job reads it: model.path under
TRAINYARD_DATA_DIR, holding config.json and the weights as *.safetensors (unless model.config_only). Nothing
is ever downloaded. No torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from jobspec.catalog.archs import Arch
from jobspec.datadir import DATA_DIR_ENV, resolve_data_root
from jobspec.files import inside
from jobspec.problems import Problem, SpecError, refuse
from jobspec.spec_inputs import ModelSpec

CONFIG_FILE = "config.json"
WEIGHTS_GLOB = "*.safetensors"
EXPORT_FILE = "export.tar"  # in the run directory: the merged weights a finished job leaves
_SAVE_HINT = "save the model there with save_pretrained(dir, safe_serialization=True)"
NO_PATH = Problem(
    "model.path",
    "model.arch hf_causal_lm is read from model.path, and it is not set",
    f"set it to a directory under {DATA_DIR_ENV} holding {CONFIG_FILE} and the weights as *.safetensors "
    "(or config.json alone, with model.config_only: true)",
)


def model_dir(model: ModelSpec, data_dir: Path) -> Path:
    """The real directory model.path names, with what the model is built from; raises SpecError naming
    model.path for each thing missing."""
    if model.path is None:
        raise SpecError([NO_PATH])
    try:
        directory = resolve_data_root(data_dir, model.path, "model.path")
    except ValueError as exc:
        raise refuse("model.path", str(exc), "") from exc
    problems = []
    # A link leading out of the data dir is refused like a missing file: the sandbox could not read it.
    config = inside(directory / CONFIG_FILE, data_dir)
    if config is None or not config.is_file():
        problems.append(
            Problem("model.path", f"model.path {model.path!r} holds no {CONFIG_FILE}", _SAVE_HINT)
        )
    weights = [path for path in directory.glob(WEIGHTS_GLOB) if inside(path, data_dir) is not None]
    if not model.config_only and not weights:
        problems.append(
            Problem(
                "model.path",
                f"model.path {model.path!r} holds no {WEIGHTS_GLOB} weights",
                f"{_SAVE_HINT}, or set model.config_only: true to train from random weights",
            )
        )
    if problems:
        raise SpecError(problems)
    return directory


def config_vocab(directory: Path) -> int:
    """The embedding's rows, from config.json: every token id the model is fed must be below it."""
    config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    if not isinstance(vocab, int) or vocab < 1:
        raise refuse("model.path", f"{CONFIG_FILE} of model.path has no vocab_size", _SAVE_HINT)
    return vocab


def check_model_dir(model: ModelSpec | None, data_dir: Path) -> None:
    """What the API can tell of an hf_causal_lm's directory at submit; the planner names a missing path."""
    if model is None or model.arch is not Arch.HF_CAUSAL_LM or model.path is None:
        return
    model_dir(model, data_dir.resolve())
