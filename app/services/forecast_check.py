"""What a plan's forecast decides at submit (issue 44): a job that will not fit its GPU is refused with the
changes that would fit, each with its own forecast; a dry run says so instead (runnable false); under
`parallel.strategy: auto` the planner's choice gives way to fsdp when only that fits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.services.bundle_forecasts import bundle_forecasts, runs_bundle_code
from app.services.forecast_learning import calibrated
from app.services.forecasts import FORECASTER, Outcome, Target, target_for, total_steps
from app.services.gpus import Cluster
from core.config import Settings
from jobspec.cluster import Inventory
from jobspec.forecast import Forecast
from jobspec.plan import Plan, RunConfig, resolve_plan
from jobspec.problems import Problem, SpecError
from jobspec.spec import JobSpec, Precision, Strategy

GiB = 2**30
SHOWN_FIXES = 3
NO_STEP = "a program builds its own model and reads its own data: there is no step to trace before it runs"


@dataclass(frozen=True)
class Fix:
    change: str  # the fields to set, as a user writes them
    spec: JobSpec
    plan: Plan


def forecast_plan(
    session: Session, settings: Settings, spec: JobSpec, plan: Plan, cluster: Cluster, *, refuse: bool
) -> Plan:
    """The plan with its forecast (or why there is none); with `refuse`, a SpecError naming `forecast` when
    it will not fit. Returns the plan to store: under `auto`, fsdp's where only that fits."""
    if not settings.forecast:
        return plan
    if spec.program is not None:
        plan.forecast_note = NO_STEP
        return plan
    target = target_for(cluster.reports, plan)
    (outcome,) = _forecasts(session, settings, spec, [_config(spec, plan)], target)
    plan.forecast, plan.forecast_note = _with_job_time(outcome.forecast, spec, plan), outcome.note
    if plan.forecast is None or plan.forecast.fits:
        return plan
    fixes = _fitting(session, settings, spec, target, list(candidate_fixes(spec, plan, cluster.inventory)))
    auto = spec.parallel.strategy is Strategy.AUTO
    if auto and (fsdp := next((fix for fix in fixes if fix.plan.strategy is Strategy.FSDP), None)):
        assert fsdp.plan.forecast is not None
        fsdp.plan.strategy_reason = (
            f"the forecast: {plan.strategy} needs {_gib(plan.forecast)} a GPU, more than it has; "
            f"fsdp shards it to {_gib(fsdp.plan.forecast)}"
        )
        return fsdp.plan
    problem = _problem(plan.forecast, target, fixes)
    if refuse:
        raise SpecError([problem])
    plan.runnable = False
    plan.not_runnable_because.append(f"{problem.field}: {problem}")
    return plan


def _config(spec: JobSpec, plan: Plan) -> RunConfig:
    return RunConfig(job_id=0, attempt=1, spec=spec, plan=plan)


def _forecasts(
    session: Session, settings: Settings, spec: JobSpec, configs: list[RunConfig], target: Target
) -> list[Outcome]:
    """The forecasts of `spec`'s configs (its plan, its fixes'): those whose step calls the spec's code
    bundle in the sandbox, the others by the shared forecaster; their step times as the service's own runs
    have calibrated them."""
    ask = bundle_forecasts if runs_bundle_code(spec) else FORECASTER.forecasts
    return [
        Outcome(calibrated(session, found.forecast), found.note) for found in ask(settings, configs, target)
    ]


def _with_job_time(forecast: Forecast | None, spec: JobSpec, plan: Plan) -> Forecast | None:
    """The cached forecast is of the step; the job's length is this spec's own."""
    if forecast is None:
        return None
    steps = total_steps(spec, plan)
    return forecast.model_copy(update={"job_time_s": None if steps is None else forecast.step_time_s * steps})


def candidate_fixes(spec: JobSpec, plan: Plan, inventory: Inventory) -> Iterator[Fix]:
    """One change at a time that may lower the peak, then all of them at once."""
    changes: list[tuple[str, JobSpec]] = []
    if plan.device == "cuda" and spec.precision is Precision.FP32:
        changes.append(("precision: bf16", spec.model_copy(update={"precision": Precision.BF16})))
    if not spec.performance.activation_checkpointing:
        performance = spec.performance.model_copy(update={"activation_checkpointing": True})
        changes.append(
            (
                "performance.activation_checkpointing: true",
                spec.model_copy(update={"performance": performance}),
            )
        )
    if plan.data_parallel_size > 1 and plan.strategy in (Strategy.DDP, Strategy.DP):
        parallel = spec.parallel.model_copy(update={"strategy": Strategy.FSDP})
        changes.append(("parallel.strategy: fsdp", spec.model_copy(update={"parallel": parallel})))
    for more in (2, 4):
        if plan.micro_batch % more == 0 and plan.micro_batch // more >= 1:
            steps = spec.train.grad_accum_steps * more
            train = spec.train.model_copy(update={"grad_accum_steps": steps})
            changes.append(
                (
                    f"train.grad_accum_steps: {steps} (the same batch in smaller micro-batches)",
                    spec.model_copy(update={"train": train}),
                )
            )
    if len(changes) > 1:
        every = "all of: " + "; ".join(change for change, _ in changes)
        changes.append((every, _all_of(spec, [changed for _, changed in changes])))
    for change, changed in changes:
        try:
            yield Fix(change, changed, resolve_plan(changed, inventory))
        except SpecError:
            continue  # a change this spec cannot take


def _all_of(spec: JobSpec, changed: list[JobSpec]) -> JobSpec:
    """Every single change at once: each changed spec differs from `spec` in one section."""
    merged = spec
    for one in changed:
        sections = {
            name: getattr(one, name)
            for name in type(spec).model_fields
            if getattr(one, name) != getattr(spec, name)
        }
        merged = merged.model_copy(update=sections)
    return merged


def _fitting(
    session: Session, settings: Settings, spec: JobSpec, target: Target, fixes: list[Fix]
) -> list[Fix]:
    outcomes = _forecasts(session, settings, spec, [_config(fix.spec, fix.plan) for fix in fixes], target)
    return fitting_fixes(fixes, [outcome.forecast for outcome in outcomes])


def fitting_fixes(fixes: list[Fix], forecasts: list[Forecast | None]) -> list[Fix]:
    """The fixes whose own forecast (`forecasts`, in the same order) fits, each with it, quickest first."""
    fitting = []
    for fix, forecast in zip(fixes, forecasts, strict=True):
        if forecast is not None and forecast.fits:
            fix.plan.forecast = _with_job_time(forecast, fix.spec, fix.plan)
            fitting.append(fix)
    return sorted(fitting, key=lambda fix: fix.plan.forecast.step_time_s if fix.plan.forecast else 0.0)


def _gib(forecast: Forecast) -> str:
    return f"{forecast.peak_memory_bytes / GiB:.1f} GiB"


def _problem(forecast: Forecast, target: Target, fixes: list[Fix]) -> Problem:
    has = "" if forecast.device_memory_bytes is None else f"{forecast.device_memory_bytes / GiB:.1f} GiB"
    device = target.gpu_name or "each rank's share of the host's memory"
    message = (
        f"the forecast puts this job's peak at {_gib(forecast)} per device ({forecast.basis}), which with a "
        f"10 % margin does not fit {device}'s {has}"
    )
    if not fixes:
        return Problem(
            "forecast",
            message,
            (
                "none of bf16, activation checkpointing, fsdp or smaller micro-batches fits: use GPUs with "
                "more memory, more of them under fsdp, or a smaller model"
            ),
        )
    shown = [
        f"{fix.change} (peak {_gib(fix.plan.forecast)}, step {fix.plan.forecast.step_time_s:.3g} s)"
        for fix in fixes[:SHOWN_FIXES]
        if fix.plan.forecast is not None
    ]
    return Problem("forecast", message, "it would fit with " + ", or ".join(shown))
