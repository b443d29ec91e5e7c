"""model.lora: low-rank adapters through peft on a Hugging Face model, and the state a LoRA job saves.

Only the adapters train; the model under them stays frozen as model.path holds it. A checkpoint keeps what
trains (adapters, and the optimizer's state of them): the frozen weights are read from model.path again on
resume, so they are left out of every checkpoint rather than written again each time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import nn

from jobspec.problems import refuse
from jobspec.spec_inputs import LoraSpec


def add_adapters(model: nn.Module, lora: LoraSpec) -> nn.Module:
    """The model with LoRA adapters on lora.target_modules (peft's default for its type when unset)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # peft's own words for target modules that match nothing, or no default
        linear = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}
        raise refuse(
            "model.lora.target_modules",
            f"model.lora.target_modules {lora.target_modules} cannot be adapted: {exc}",
            f"name some of the model's Linear layers: {', '.join(sorted(linear))}",
        ) from exc


def merged(model: nn.Module) -> nn.Module:
    """The plain model, each adapter added into the weight under it: what an export holds."""
    from peft import PeftModel

    return model.merge_and_unload() if isinstance(model, PeftModel) else model


def frozen_names(model: nn.Module) -> set[str]:
    return {name for name, parameter in model.named_parameters() if not parameter.requires_grad}


def trainable_state(model: nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """The state without the frozen parameters, which the model's builder makes again."""
    frozen = frozen_names(model)
    return {key: value for key, value in state.items() if key not in frozen}


def check_loaded(model: nn.Module, missing: Iterable[str], unexpected: Iterable[str]) -> None:
    """A checkpoint may leave out frozen parameters (trainable_state), nothing else: strict otherwise."""
    lacking = sorted(set(missing) - frozen_names(model))
    extra = sorted(unexpected)
    if lacking or extra:
        raise RuntimeError(
            f"the checkpoint does not fit the model: missing {lacking[:5]}, unexpected {extra[:5]}; resume "
            "from a checkpoint of this job's model"
        )
