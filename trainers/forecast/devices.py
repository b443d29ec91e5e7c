"""Each device's share of a traced step under the plan's strategy: what `single` holds on one device, moved,
sharded or split as the strategy does it (trainers/strategies/ are the layouts)."""

from __future__ import annotations

from jobspec.plan import Plan
from jobspec.spec import Precision, Strategy
from trainers.forecast.trace import Phase, Traced

_BYTES = {Precision.FP32: 4, Precision.BF16: 2, Precision.FP16: 2}  # a parameter as computed with
FP32 = 4  # a parameter, its gradient, as stored


def state_bytes(phase: Phase) -> int:
    """Parameters, their gradients and the optimizer's state: what sharding divides."""
    return phase.params + phase.grads + phase.optimizer


def per_device(traced: Traced, plan: Plan, layers: int | None) -> tuple[int, dict[str, int]]:
    """The peak bytes of the busiest device, and what the strategy added to or took from `single`'s."""
    strategy, peak = plan.strategy, traced.peak
    if strategy is Strategy.DDP:
        # Gradient buckets (gradient_as_bucket_view) are made with the wrapper and stay: a peak inside the
        # backward, before the gradients exist, does not hold them yet.
        buckets = max(traced.trained_count * FP32 - peak.grads, 0)
        return peak.total + buckets, {"ddp_gradient_buckets": buckets}
    if strategy is Strategy.FSDP:
        state = state_bytes(peak)
        sharded = state - state // plan.data_parallel_size
        # A block gathered whole to compute, and the next one prefetched meanwhile.
        gathered = 2 * traced.parameter_count // max(layers or 1, 1) * _BYTES[plan.precision]
        return peak.total - sharded + gathered, {"fsdp_sharded_away": -sharded, "fsdp_gathered": gathered}
    if strategy in (Strategy.PIPELINE, Strategy.MODEL_PARALLEL):
        # Each stage holds its share of the state and of the activations (the micro-batches in flight among
        # them).
        held = state_bytes(peak) + peak.activations
        split_away = held - held // plan.stages
        return peak.total - split_away, {"stages_split_away": -split_away}
    if strategy is Strategy.DP:
        # One process: each GPU runs a replica on its slice of the batch.
        sliced = peak.activations - peak.activations // max(plan.num_gpus, 1)
        return peak.total - sliced, {"dp_batch_sliced_away": -sliced}
    return peak.total, {}


def compute_share(plan: Plan) -> float:
    """The share of the traced step's FLOPs the busiest device runs: a stage's for pipeline (its bubble
    aside), a replica's slice for dp; model_parallel's stages run one after another, each the whole time."""
    if plan.strategy is Strategy.PIPELINE:
        bubble = (plan.stages - 1) / max(plan.microbatches, 1)
        return (1 + bubble) / plan.stages
    if plan.strategy is Strategy.DP:
        return 1 / max(plan.num_gpus, 1)
    return 1.0
