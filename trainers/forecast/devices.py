"""Each device's share of a traced step under the plan's strategy: what `single` holds on one device, moved,
sharded or split as the strategy does it (trainers/strategies/ are the layouts)."""

from __future__ import annotations

from dataclasses import dataclass

from jobspec.plan import Plan
from jobspec.spec import Precision, Strategy
from trainers.forecast.trace import Phase, Traced

_BYTES = {Precision.FP32: 4, Precision.BF16: 2, Precision.FP16: 2}  # a parameter as computed with
FP32 = 4  # a parameter, its gradient, as stored


def state_bytes(phase: Phase) -> int:
    """Parameters, their gradients and the optimizer's state: what sharding divides."""
    return phase.params + phase.grads + phase.optimizer


@dataclass(frozen=True)
class Share:
    """The busiest device's peak bytes, the phase of the traced step it comes in, and what the strategy added
    to or took from `single`'s."""

    peak: int
    phase: Phase
    strategy: dict[str, int]


def per_device(traced: Traced, plan: Plan) -> Share:
    strategy, peak = plan.strategy, traced.peak
    if strategy is Strategy.DDP:
        # Gradient buckets (gradient_as_bucket_view) are made with the wrapper and stay: a phase whose peak
        # comes before the gradients exist (inside the backward) holds them beside it, so that phase may
        # become the busiest one (a large model at a small batch).
        def buckets(phase: Phase) -> int:
            return max(traced.trained_count * FP32 - phase.grads, 0)

        busiest = max((traced.backward, traced.update), key=lambda phase: phase.total + buckets(phase))
        held = buckets(busiest)
        return Share(busiest.total + held, busiest, {"ddp_gradient_buckets": held})
    if strategy is Strategy.FSDP:
        ranks = plan.data_parallel_size
        gathered = traced.gathered_count * _BYTES[plan.precision] if ranks > 1 else 0
        # Over several ranks the parameters are DTensors, whose optimizers take torch's foreach kernels, not
        # the fused ones: the step holds a list of temporaries as large as the trained shards (Adam's
        # denominators), which the trace, on fused or per-parameter kernels, does not.
        foreach = traced.trained_count * FP32 // ranks if ranks > 1 else 0

        def sharded_away(phase: Phase) -> int:
            # Frozen parameters (LoRA's base model) are sharded too; MemTracker counts them with the
            # buffers, which are small beside them.
            state = state_bytes(phase) + phase.buffers
            return state - state // ranks

        def kept(phase: Phase) -> int:
            return phase.total - sharded_away(phase) + (foreach if phase is traced.update else 0)

        # Sharding takes more from the phase that holds more state: the other may become the busiest.
        busiest = max((traced.backward, traced.update), key=kept)
        strategy_bytes = {"fsdp_sharded_away": -sharded_away(busiest), "fsdp_gathered": gathered}
        if busiest is traced.update and foreach:
            strategy_bytes["fsdp_foreach_step"] = foreach
        return Share(kept(busiest) + gathered, busiest, strategy_bytes)
    if strategy in (Strategy.PIPELINE, Strategy.MODEL_PARALLEL):
        # Each stage holds its share of the state and of the activations (the micro-batches in flight among
        # them).
        held = state_bytes(peak) + peak.activations
        split_away = held - held // plan.stages
        return Share(peak.total - split_away, peak, {"stages_split_away": -split_away})
    if strategy is Strategy.DP:
        # One process: each GPU runs a replica on its slice of the batch.
        sliced = peak.activations - peak.activations // max(plan.num_gpus, 1)
        return Share(peak.total - sliced, peak, {"dp_batch_sliced_away": -sliced})
    return Share(peak.total, peak, {})


def collective_bytes(traced: Traced, plan: Plan) -> int:
    """What one device sends in a step's collectives, as a ring sends them: ddp all-reduces the fp32
    gradients (2(n-1)/n of them); fsdp all-gathers every parameter in the compute precision for the forward
    and again for the backward, and reduce-scatters the fp32 gradients ((n-1)/n of each). None for the
    other strategies, whose communication the calibration's efficiency covers."""
    ranks = plan.data_parallel_size
    if ranks < 2:
        return 0
    gradients = traced.trained_count * FP32
    if plan.strategy is Strategy.DDP:
        return gradients * 2 * (ranks - 1) // ranks
    if plan.strategy is Strategy.FSDP:
        gathered = 2 * traced.parameter_count * _BYTES[plan.precision]
        return (gathered + gradients) * (ranks - 1) // ranks
    return 0


def compute_share(plan: Plan) -> float:
    """The share of the traced step's FLOPs the busiest device runs: a stage's for pipeline (its bubble
    aside), a replica's slice for dp; model_parallel's stages run one after another, each the whole time."""
    if plan.strategy is Strategy.PIPELINE:
        bubble = (plan.stages - 1) / max(plan.microbatches, 1)
        return (1 + bubble) / plan.stages
    if plan.strategy is Strategy.DP:
        return 1 / max(plan.num_gpus, 1)
    return 1.0
