"""What tracing cannot see, per GPU model: how much the caching allocator reserves over the traced peak
(rounding, fragmentation, cuBLAS workspaces), what torch.compile's fusions save, how much of the GPU's peak
FLOP rate each kind of model reaches, and the cost of launching an eager step's operations one by one on the
host those were fitted on (another host's probe scales it, estimate.py). The figures were fitted to `python -m
bench.forecast` on the GPU named (bench/RESULTS.md, "forecast"), and hold under ddp (`--strategy ddp --gpus
2`: its compiled model computes the loss inside, as single's does, trainers/loss_carrier.py); a GPU model not
measured yet takes the H200's, and says so in the forecast's basis. Steps were timed after 20-30 warm-up
steps: after 8, ResNet-50's were still a third slower than they settle at, which had set its launch cost too
high (bench/RESULTS.md, 2026-11-30)."""

from __future__ import annotations

from dataclasses import dataclass

from trainers.forecast.trace import ModelKind

MiB = 2**20


@dataclass(frozen=True)
class DeviceCalibration:
    source: str
    reserved_per_traced: float  # max_memory_reserved over the traced peak, eager
    reserved_base: int  # bytes reserved beyond that: workspaces
    # A compiled step's reservation over its eager trace: fusions keep fewer activations (a language
    # model's fp32 logits above all). Kinds not measured compiled take the eager figures.
    compiled_per_traced: dict[ModelKind, float]
    # The same where the loss is compiled as a graph of its own (fsdp over several GPUs, trainers/strategies/
    # base.py's loss_in_forward_graph): its backward writes the logits' gradient beside the logits.
    compiled_loss_apart_per_traced: dict[ModelKind, float]
    compiled_base: int
    # The share of the GPU's dense bf16 peak a step reaches, by kind of model and whether compiled.
    efficiency: dict[tuple[ModelKind, bool], float]
    # An eager operation's launch from Python (cuDNN's cost more): a step of many small ones is bound by
    # them, and the GPU's work overlaps them only in part. A rank's own, as one GPU alone runs it.
    launch_s: dict[ModelKind, float]
    # What ddp's or fsdp's ranks, one per GPU of a host, multiply a language model's launches by: measured,
    # not explained. fsdp's rows over two GPUs were fitted with these launches (beside its hooks per group,
    # fsdp_group_s), and ddp's LoRA at batch 2 stepped in 274 ms on two GPUs (2026-11-29) against 156-245 on
    # one on five leases, where its all-reduce of LoRA's few gradients takes well under a millisecond.
    ranks_launch_factor: dict[ModelKind, float]
    # What host_probe.py reads (seconds per tiny eager operation) on the host launch_s and fsdp_group_s hold
    # for: on two leases of one kind those host-bound steps differed by 1.3-1.6x while the GPU-bound ones
    # did not, so the forecast scales both by a host's own probe over this (estimate.py).
    reference_op_s: float
    # The bytes per second one device sends in NCCL's collectives of a ddp step, measured between two GPUs of
    # one host (16.5 GB/s for ddp's all-reduce, although those two H200s had 18 NVLinks between them): the
    # step computes meanwhile, so the longer of the two bounds it.
    collective_bytes_per_s: float
    # The same for fsdp's all-gathers and reduce-scatters, from the time NCCL's kernels ran in profiles of
    # its steps: ddp's rate, fitted to whole steps, holds more than its collectives.
    fsdp_collective_bytes_per_s: float
    # What fsdp over several GPUs adds per group it shards (each block, and the root), compiled or not: its
    # hooks gather and reshard each group before and after its forward and backward, from Python, one group
    # at a time. A step of many small groups (ResNet-50's 20, GPT-2's 13) is bound by them.
    fsdp_group_s: dict[bool, float]
    # The share of single's compute time an eager language model's step takes under fsdp over several ranks
    # gathering bf16 parameters (trainers/strategies/fsdp.py's MixedPrecisionPolicy): the model then runs in
    # bf16 from its embedding on, its residual stream and the elementwise work on it too, where single's
    # autocast beside fp32 weights keeps those in fp32. Kinds not measured so take single's.
    fsdp_bf16_compute: dict[tuple[ModelKind, bool], float]


H200 = DeviceCalibration(
    source="fitted on an H200 (bench.forecast, 2026-11-29, 13 configurations)",
    reserved_per_traced=1.12,
    reserved_base=256 * MiB,
    compiled_per_traced={ModelKind.TRANSFORMER: 0.545},
    # Fitted on GPT-2 under ddp at batches 8-32 per GPU, before ddp's loss moved inside its module
    # (trainers/loss_carrier.py); fsdp on two H200s read 1.04-1.07x with it (2026-11-30).
    compiled_loss_apart_per_traced={ModelKind.TRANSFORMER: 0.67},
    compiled_base=356 * MiB,
    efficiency={
        (ModelKind.TRANSFORMER, True): 0.385,
        (ModelKind.TRANSFORMER, False): 0.27,
        (ModelKind.ADAPTED, True): 0.28,
        (ModelKind.ADAPTED, False): 0.20,
        (ModelKind.CONVOLUTIONAL, True): 0.13,
        (ModelKind.CONVOLUTIONAL, False): 0.115,
        (ModelKind.OTHER, True): 0.05,
        (ModelKind.OTHER, False): 0.05,
    },
    # The language models' fitted on the eager Llamas at batch 2 (and LoRA's at 4 and 8) on one H200 on four
    # leases, each at its host's probe (bench/RESULTS.md, 2026-11-30 21:12 and 2026-12-01): full 6.2 us, LoRA
    # 5.5, where fsdp's steps over two GPUs had set both at 7.5 and put these rows at 0.99-1.35x.
    launch_s={
        ModelKind.TRANSFORMER: 6.2e-6,
        ModelKind.ADAPTED: 5.5e-6,
        ModelKind.CONVOLUTIONAL: 7e-6,
        ModelKind.OTHER: 11e-6,
    },
    ranks_launch_factor={ModelKind.TRANSFORMER: 7.5 / 6.2, ModelKind.ADAPTED: 7.5 / 5.5},
    # The mean of 13 probes on the lease of the fsdp run at 2026-11-30 20:35 (bench/RESULTS.md; one CPU
    # each, 7.1-10.5 us), whose host-bound rows ran as those of the lease launch_s was fitted on (09:34:
    # GPT-2 at batch 8 78.8 and 79.0 ms, LoRA at batch 2 341.7 and 346.1): with it, the launch costs
    # above put that run's eager Llamas at batches 2 and 4 at 0.94-1.09x, and the 18:12 lease's, probed at
    # 6.0-6.6 us, at 0.94-1.12x, where unprobed they read 0.85-1.00x and 1.05-1.31x.
    reference_op_s=8.8e-6,
    collective_bytes_per_s=16.5e9,
    # Profiles of one step on two H200s (bench/forecast_profile.py, bench/RESULTS.md 2026-11-30 17:50):
    # GPT-2 at batch 8 sent 194 GB/s, LoRA at batch 8 154; a kernel's time includes its wait for the
    # other rank, so these are floors, and the lower is taken.
    fsdp_collective_bytes_per_s=150e9,
    # Fitted with reference_op_s on the fsdp runs of 2026-11-30 18:12 and 20:35 together, each at its
    # host's probe (ResNet-50's and GPT-2's steps, bound by these hooks): 0.87-1.07x on both, where 2.75
    # and 4.9 ms, fitted at 08:59 unprobed, read 0.64-0.87x at 20:35.
    fsdp_group_s={False: 4.1e-3, True: 5.5e-3},
    # Fitted on the two rows whose step the GPU bounds, fsdp on two H200s at batch 8 (bench/RESULTS.md,
    # 2026-11-30 09:34): the compute that, beside each one's host side, gives its measured step. The LoRA
    # row's GPU was busy for 0.76 of that forecast's compute in a profile of its step (17:50).
    fsdp_bf16_compute={(ModelKind.TRANSFORMER, False): 0.85, (ModelKind.ADAPTED, False): 0.75},
)
GPUS: dict[str, DeviceCalibration] = {"H200": H200}
FP32_SLOWDOWN = 2.0  # fp32 matrix products run on TF32 tensor cores, at half the bf16 rate

# A CPU rank's process: the interpreter with torch and the trainer imported, before any tensor.
CPU_PROCESS_BYTES = 600 * MiB
# A CPU step runs its operations one after another on the cores it has, each computing what it computes
# beside a cost of its own (dispatch, autograd, allocation), and ddp's gloo all-reduce beside them: a sum,
# where a GPU's queue overlaps its host's launches with its work. Fitted on this project's 2-core machine to
# seven jobs run through the service (bench/RESULTS.md, "CPU forecasts", 2026-12-01): the products of a wide
# MLP ran at 80 GFLOP/s a core, a narrow one's operations at 4-9 us each, a 76 MB all-reduce between two
# ranks at 1 GB/s, and ddp's bucketing and rank sync cost a millisecond a step however small the gradients.
CPU_FLOPS_PER_CORE = 80e9
CPU_OP_S = 7e-6
CPU_COLLECTIVE_BYTES_PER_S = 1e9
CPU_COLLECTIVE_STEP_S = 1e-3


def device_calibration(gpu_name: str) -> tuple[DeviceCalibration, bool]:
    """The calibration of this GPU model, and whether it was measured on it (else the H200's stands in)."""
    found = next((c for fragment, c in GPUS.items() if fragment in gpu_name), None)
    return (found, True) if found is not None else (H200, False)
