"""What a micro-batch costs: the loss to backpropagate, and the metrics reported next to it.

Built in, on (input, target) batches: cross_entropy (classification; evaluation reports accuracy too; for a
language model next-token cross entropy, evaluation reporting perplexity) and mse. Or the user's own
`loss(model, batch) -> loss | (loss, {name: metric})`, which calls the model itself; its metrics are reduced
over the ranks like the loss and reported next to it. Evaluation runs the same function under
torch.no_grad() on the bare model.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from jobspec.spec import Loss
from trainers.data.batches import Batch, batch_size, describe
from trainers.loss_carrier import LossCarrier
from trainers.user_code import Bundle, type_name
from trainers.user_errors import UserCodeError

Model = Callable[..., Any]  # the module as the strategy runs it: wrapped, compiled, placed
LossOutput = tuple[torch.Tensor, dict[str, torch.Tensor]]
# What the loop reports itself; a loss's own metrics take other names.
RESERVED = frozenset(
    {"loss", "lr", "samples_per_s", "step_time_s", "peak_mem_mb", "peak_reserved_mb", "tokens_per_s", "mfu"}
)
# Targets of this value count in no loss: padding, and whatever a language model's data masks out.
IGNORE_INDEX = -100
# How many logits evaluation casts to fp32 at once (256 MB of them): a held-out batch's whole (tokens, vocab)
# fp32 copy would be a language model's largest tensor (3.3 GB for GPT-2 at 16 x 1024), above the training
# step's memory peak.
EVAL_CHUNK_ELEMENTS = 2**26
METRIC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,63}")


@dataclass(frozen=True)
class LossValues:
    """A micro-step's mean loss and the loss function's metrics, detached, on the device they were made."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]


class Objective(ABC):
    @abstractmethod
    def __call__(self, model: Model, batch: Batch) -> LossOutput:
        """The micro-batch's mean loss, with its gradient, and the metrics to report next to it."""

    @abstractmethod
    def eval_sums(self, model: Model, batch: Batch) -> torch.Tensor:
        """float64 [samples, summed loss, summed metrics...]: sums add up over batches and ranks."""

    @abstractmethod
    def eval_values(self, totals: Sequence[float]) -> dict[str, float]:
        """The reported evaluation metrics from the totals of eval_sums over the held-out set."""

    def compile_loss(  # noqa: B027 - most have nothing to compile
        self, with_forward: bool, carrier: LossCarrier | None = None
    ) -> None:
        """performance.compile: compile the training step's loss where that pays, with_forward in one graph
        with the model's forward (the strategy says whether it may), or inside the wrapped module through
        its carrier where the strategy wraps one (ddp). A user's loss calls the model itself, which the
        strategy compiled already."""


class Criterion(Objective):
    """A built-in loss of the model's output and the batch's target, on (input, target) batches. A pipeline
    computes it on its last stage from that stage's output alone."""

    name: Loss
    width: int  # of eval_sums

    def __init__(self) -> None:
        # The training step's loss and its forward-then-loss, either compiled by compile_loss.
        self._loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = self.loss
        self._step: Callable[[Model, torch.Tensor, torch.Tensor], torch.Tensor] = self._forward_loss

    def split(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        if (
            isinstance(batch, list | tuple)
            and len(batch) == 2
            and all(isinstance(t, torch.Tensor) for t in batch)
        ):
            return batch[0], batch[1]
        raise UserCodeError(
            f"train.loss={self.name} takes (input, target) batches, and the data yields {describe(batch)}; "
            "yield (input, target) pairs, or name your own loss in train.loss"
        )

    @abstractmethod
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def sums(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor: ...

    def __call__(self, model: Model, batch: Batch) -> LossOutput:
        x, y = self.split(batch)
        return self._step(model, x, y), {}

    def _forward_loss(self, model: Model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        output = model(x)
        # Placement may leave the output on another device than the batch (the last stage's).
        return self._loss(output, y.to(output.device))

    @staticmethod
    def _carried_loss(model: Model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return model(x, loss_target=y)

    def eval_sums(self, model: Model, batch: Batch) -> torch.Tensor:
        x, y = self.split(batch)
        output = model(x)
        return self.sums(output, y.to(output.device))


class CrossEntropy(Criterion):
    name, width = Loss.CROSS_ENTROPY, 3

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

    def sums(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(output.float(), target, reduction="sum")
        correct = (output.argmax(1) == target).sum()
        return torch.stack(
            [loss.new_tensor(len(target), dtype=torch.float64), loss.double(), correct.double()]
        )

    def eval_values(self, totals: Sequence[float]) -> dict[str, float]:
        count, loss, correct = totals
        return {"eval_loss": loss / count, "eval_accuracy": correct / count}


class NextTokenCrossEntropy(Criterion):
    """train.loss=cross_entropy for a language model: (batch, seq, vocab) logits against (batch, seq) next
    token ids, averaged over the tokens whose target is not IGNORE_INDEX."""

    name, width = Loss.CROSS_ENTROPY, 2

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.flatten(0, -2), target.flatten(), ignore_index=IGNORE_INDEX)

    def compile_loss(self, with_forward: bool, carrier: LossCarrier | None = None) -> None:
        # Eager, autocast runs cross_entropy in fp32: the (tokens, vocab) logits are copied to fp32, their
        # log-softmax kept for backward and its gradient written in fp32 too, GPT-2's largest tensors and a
        # tenth of its step (bench/RESULTS.md, issue 34). Compiled, a kernel reads the bf16 logits each way;
        # in the forward's graph, the logits' gradient also takes the logits' memory.
        if carrier is not None:
            carrier.loss = self.loss  # compiled with the wrapped module's forward, by the strategy
            self._step = self._carried_loss
        elif with_forward:
            self._step = torch.compile(self._forward_loss)
        else:
            self._loss = torch.compile(self.loss)

    def sums(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # Summed over tokens, not samples: a held-out split's windows may hold unequal counts of real tokens.
        flat, logits = target.flatten(), output.flatten(0, -2)
        rows = max(1, EVAL_CHUNK_ELEMENTS // logits.shape[-1])
        loss = sum(
            (
                F.cross_entropy(chunk.float(), ids, ignore_index=IGNORE_INDEX, reduction="sum").double()
                for chunk, ids in zip(logits.split(rows), flat.split(rows), strict=True)
            ),
            start=torch.zeros((), dtype=torch.float64, device=logits.device),
        )
        tokens = (flat != IGNORE_INDEX).sum()
        return torch.stack([tokens.double(), loss])

    def eval_values(self, totals: Sequence[float]) -> dict[str, float]:
        tokens, loss = totals
        mean = loss / tokens if tokens else math.nan
        # exp overflows a float above ~709: such a model predicts nothing, and inf says so.
        return {"eval_loss": mean, "eval_perplexity": math.exp(mean) if mean < 700 else math.inf}


class MeanSquaredError(Criterion):
    name, width = Loss.MSE, 2

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if output.shape != target.shape:  # mse_loss would broadcast them silently
            raise UserCodeError(
                f"train.loss=mse needs targets shaped like the model's output: the output is "
                f"{list(output.shape)} and the target {list(target.shape)}"
            )
        return F.mse_loss(output, target)

    def sums(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        per_sample = max(output[0].numel(), 1) if len(output) else 1
        loss = F.mse_loss(output.float(), target.float(), reduction="sum") / per_sample
        return torch.stack([loss.new_tensor(len(target), dtype=torch.float64), loss.double()])

    def eval_values(self, totals: Sequence[float]) -> dict[str, float]:
        count, loss = totals
        return {"eval_loss": loss / count}


class UserLoss(Objective):
    """train.loss as `module:function` of the code bundle. Its metric names are fixed by its first call:
    every rank reduces the same metrics at every report."""

    def __init__(self, function: Callable[..., Any], entry: str) -> None:
        self.function = function
        self.entry = entry
        self.names: tuple[str, ...] | None = None

    def __call__(self, model: Model, batch: Batch) -> LossOutput:
        return self._checked(self.function(model, batch))

    def _checked(self, returned: Any) -> LossOutput:
        loss, metrics = returned if isinstance(returned, tuple) and len(returned) == 2 else (returned, {})
        if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.is_floating_point()):
            shape = f" of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
            raise UserCodeError(
                f"train.loss {self.entry!r} returned {type_name(loss)}{shape} as its loss; return a 0-d "
                "floating-point tensor (the batch's mean loss), or (loss, {name: 0-d tensor})"
            )
        if not isinstance(metrics, dict) or not all(
            isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values()
        ):
            raise UserCodeError(
                f"train.loss {self.entry!r} returned {type_name(metrics)} as its metrics; return a dict of "
                "names to 0-d tensors"
            )
        names = tuple(sorted(metrics))
        if self.names is None:
            self.names = self._named(names)
        elif names != self.names:
            raise UserCodeError(
                f"train.loss {self.entry!r} returned metrics {', '.join(names) or 'none'} after "
                f"{', '.join(self.names) or 'none'}; return the same names at every call"
            )
        return loss, metrics

    def _named(self, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not isinstance(name, str) or not METRIC_NAME.fullmatch(name) or name in RESERVED:
                raise UserCodeError(
                    f"train.loss {self.entry!r} returned a metric named {name!r}; use letters, digits, '_' "
                    f"and '.' (up to 64, starting with a letter), other than {', '.join(sorted(RESERVED))}"
                )
        return names

    def eval_sums(self, model: Model, batch: Batch) -> torch.Tensor:
        loss, metrics = self(model, batch)
        count = batch_size(batch)
        values = [loss, *(metrics[name] for name in self.names or ())]
        summed = [value.to(loss.device, torch.float64) * count for value in values]
        return torch.stack([loss.new_tensor(count, dtype=torch.float64), *summed])

    def eval_values(self, totals: Sequence[float]) -> dict[str, float]:
        count, loss, *metrics = totals
        named = {f"eval_{name}": value / count for name, value in zip(self.names or (), metrics, strict=True)}
        return {"eval_loss": loss / count, **named}


def build_objective(loss: str, bundle: Bundle | None, language_model: bool = False) -> Objective:
    """train.loss: a built-in, or a function of the job's code bundle (the planner made sure it has one).
    language_model: the model predicts every next token of its input (ArchInfo.language_model)."""
    if loss == Loss.CROSS_ENTROPY:
        return NextTokenCrossEntropy() if language_model else CrossEntropy()
    if loss == Loss.MSE:
        return MeanSquaredError()
    if bundle is None:
        raise ValueError(f"train.loss {loss!r} names user code, and the job has no code bundle; set code")
    return UserLoss(bundle.function("train.loss", loss), loss)
