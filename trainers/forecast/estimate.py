"""The forecast of one job: its traced step (trainers/forecast/trace.py) per device under its strategy
(devices.py), with what tracing cannot see (calibration.py), against the device it will run on."""

from __future__ import annotations

from dataclasses import dataclass

from jobspec.forecast import CPU_DEVICE, EXECUTION, GPU_MODEL, MODEL_KIND, Execution, Forecast
from jobspec.plan import Plan, RunConfig
from jobspec.spec import Precision, Strategy
from trainers.forecast import calibration
from trainers.forecast.devices import Share, collective_bytes, compute_share, per_device
from trainers.forecast.trace import Traced, traced_step
from trainers.lm import peak_flops

# A forecast fits when its peak, grown by this share, still fits the device: the forecast's own error.
FIT_MARGIN = 0.10


@dataclass(frozen=True)
class Target:
    """The device the job will run on, as the workers' inventory describes it."""

    gpu_name: str | None  # None for a CPU job
    memory_bytes: int | None  # a GPU's memory, or the host's for a CPU job
    cpu_cores: int = 1
    # Seconds its host spends on one tiny eager CUDA operation (host_probe.py); None where not probed.
    host_op_s: float | None = None


@dataclass(frozen=True)
class Timing:
    step_s: float
    basis: str


def forecast(config: RunConfig, target: Target, total_steps: int | None) -> Forecast:
    spec, plan = config.spec, config.plan
    traced = traced_step(config)
    share = per_device(traced, plan)
    compiled = spec.performance.compile
    if plan.device == "cuda":
        gpu, measured = calibration.device_calibration(target.gpu_name or "")
        factors = gpu.compiled_loss_apart_per_traced if _shards_over_ranks(plan) else gpu.compiled_per_traced
        factor = factors.get(traced.kind) if compiled else None
        base = gpu.compiled_base if factor is not None else gpu.reserved_base
        reserved = int(share.peak * (factor or gpu.reserved_per_traced)) + base
        timing = _busiest_share(gpu_step_time(traced, gpu, target, compiled, plan), plan)
        timing = collectives_bound(timing, traced, plan, gpu)
        source = gpu.source if measured else f"{gpu.source}, standing in for {target.gpu_name or 'this GPU'}"
        source = f"{source}; {host_basis(target, gpu)}"
    else:
        reserved = share.peak + calibration.CPU_PROCESS_BYTES
        timing = _busiest_share(cpu_step_time(traced, target, plan), plan)
        source = "CPU defaults (trainers/forecast/calibration.py)"
    step_s = timing.step_s
    fits = target.memory_bytes is None or reserved * (1 + FIT_MARGIN) <= target.memory_bytes
    return Forecast(
        peak_memory_bytes=reserved,
        device_memory_bytes=target.memory_bytes,
        step_time_s=step_s,
        job_time_s=None if total_steps is None else step_s * total_steps,
        fits=fits,
        basis=f"{source}; {timing.basis}",
        breakdown={
            **breakdown(traced, share, reserved - share.peak),
            **_step_key(plan.device, target, compiled),
        },
    )


def breakdown(traced: Traced, share: Share, unseen: int) -> dict[str, int | float | str]:
    """The busiest phase's bytes by kind, what the strategy changes, what tracing cannot see."""
    peak = share.phase
    return {
        MODEL_KIND: str(traced.kind),
        "peak_phase": "backward" if peak is traced.backward else "optimizer step",
        "parameters": traced.parameter_count,
        "trained_parameters": traced.trained_count,
        "parameter_bytes": peak.params,
        "frozen_parameter_and_buffer_bytes": peak.buffers,
        "gradient_bytes": peak.grads,
        "optimizer_bytes": peak.optimizer,
        "activation_bytes": peak.activations,
        "temporary_bytes": peak.temporaries,
        **share.strategy,
        "unseen_by_tracing_bytes": unseen,
        "flops_per_step": traced.flops_per_step,
        "operations_per_step": traced.ops_per_step,
    }


def _step_key(device: str, target: Target, compiled: bool) -> dict[str, int | float | str]:
    """What the learned calibration keys a job's step time by (jobspec/forecast.py's StepKey): none for a
    GPU job whose GPU has no name."""
    execution = Execution.COMPILED if compiled else Execution.EAGER
    if device != "cuda":
        return {GPU_MODEL: CPU_DEVICE, EXECUTION: execution}
    return {GPU_MODEL: target.gpu_name, EXECUTION: execution} if target.gpu_name else {}


def gpu_step_time(
    traced: Traced, gpu: calibration.DeviceCalibration, target: Target, compiled: bool, plan: Plan
) -> Timing:
    peak = peak_flops(target.gpu_name or "")
    if peak is None:
        return Timing(0.0, f"no peak FLOP rate known for {target.gpu_name or 'an unnamed GPU'}: no step time")
    efficiency = gpu.efficiency[(traced.kind, compiled)]
    slowdown = calibration.FP32_SLOWDOWN if plan.precision is Precision.FP32 else 1.0
    compute = traced.flops_per_step * slowdown / (peak * efficiency)
    if _gathers_bf16(plan):
        compute *= gpu.fsdp_bf16_compute.get((traced.kind, compiled), 1.0)
    # What the host does one thing after another while the GPU runs the earlier work: an eager step's
    # operations launched from Python, fsdp's hooks around each group. The longer of the two bounds the
    # step, the other adds where they do not overlap.
    # Both are the host's own work, so they take as long as its probe says relative to the calibration's.
    slower = host_factor(target, gpu)
    hooks = traced.shard_groups * gpu.fsdp_group_s[compiled] * slower if _shards_over_ranks(plan) else 0.0
    launch_s = gpu.launch_s[traced.kind]
    if _ranks_of_one_model(plan):
        launch_s *= gpu.ranks_launch_factor.get(traced.kind, 1.0)
    launches = 0.0 if compiled else traced.ops_per_step * launch_s * slower
    host = launches + hooks
    if host > compute:
        bound = "fsdp's hooks per group" if hooks > launches else "launches"
    else:
        bound = f"{efficiency:.0%} of the {peak / 1e12:g} TFLOP/s peak"
    return Timing(soft_max(compute, host) if host else compute, f"step time mostly {bound}")


def host_factor(target: Target, gpu: calibration.DeviceCalibration) -> float:
    """How many times as long as the calibration's host this one takes over an eager operation; 1 where it
    was not probed."""
    return 1.0 if target.host_op_s is None else target.host_op_s / gpu.reference_op_s


def host_basis(target: Target, gpu: calibration.DeviceCalibration) -> str:
    reference = f"{gpu.reference_op_s * 1e6:.1f} us on the calibration's host"
    if target.host_op_s is None:
        return f"host side as calibrated ({reference}; this host not probed)"
    return f"host side at this host's probe, {target.host_op_s * 1e6:.1f} us an operation ({reference})"


def _ranks_of_one_model(plan: Plan) -> bool:
    """ddp's or fsdp's ranks, a process each, training one model together."""
    return plan.strategy in (Strategy.DDP, Strategy.FSDP) and plan.data_parallel_size > 1


def _shards_over_ranks(plan: Plan) -> bool:
    return plan.strategy is Strategy.FSDP and plan.data_parallel_size > 1


def _gathers_bf16(plan: Plan) -> bool:
    """fsdp gathers bf16 parameters for bf16 jobs alone (trainers/strategies/__init__.py, build_strategy)."""
    return _shards_over_ranks(plan) and plan.precision is Precision.BF16


def _busiest_share(timing: Timing, plan: Plan) -> Timing:
    return Timing(timing.step_s * compute_share(plan), timing.basis)


def collectives_bound(
    timing: Timing, traced: Traced, plan: Plan, gpu: calibration.DeviceCalibration
) -> Timing:
    """ddp's and fsdp's collectives run while the step computes: the longer of the two bounds it."""
    sent = collective_bytes(traced, plan)
    per_s = gpu.fsdp_collective_bytes_per_s if plan.strategy is Strategy.FSDP else gpu.collective_bytes_per_s
    collectives_s = sent / per_s
    if collectives_s <= timing.step_s:
        return timing
    rate = per_s / 1e9
    return Timing(collectives_s, f"step time bound by its collectives ({sent / 1e9:.2f} GB at {rate:g} GB/s)")


def soft_max(a: float, b: float) -> float:
    """The larger of two partly overlapping durations, plus what of the smaller does not overlap."""
    return float((a**3 + b**3) ** (1 / 3))


def cpu_step_time(traced: Traced, target: Target, plan: Plan) -> Timing:
    """A CPU rank's step: its products on its cores, its operations' own cost, and its collectives, one
    after another (calibration.py)."""
    compute = traced.flops_per_step / (calibration.CPU_FLOPS_PER_CORE * max(target.cpu_cores, 1))
    operations = traced.ops_per_step * calibration.CPU_OP_S
    sent = collective_bytes(traced, plan)
    collectives = (
        sent / calibration.CPU_COLLECTIVE_BYTES_PER_S + calibration.CPU_COLLECTIVE_STEP_S if sent else 0.0
    )
    cores = target.cpu_cores
    basis = f"{cores} {'core' if cores == 1 else 'cores'} at the CPU defaults"
    if sent:
        basis += f", {sent / 1e6:.2g} MB of collectives a step"
    return Timing(compute + operations + collectives, basis)
