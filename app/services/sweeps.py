"""Sweeps over the API: create one (its space checked through the submit path), list and show them with their
trials, cancel one. Asking for trials and telling their ends is core/sweeps/'s, shared with the worker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import BestTrial, SweepPublic, TrialCounts, TrialPublic
from app.services.errors import JobStateConflict, SweepEnded, SweepNotFound
from app.services.jobs import cancel_job
from app.services.keys import Caller
from app.services.quotas import check_job_room, check_quota
from app.services.submit import dry_run
from core.config import Settings
from core.models import Job, Sweep, SweepTrial, utcnow
from core.states import JobStatus, SweepStatus, TrialState
from core.sweeps.rows import reported, trials_of
from core.sweeps.spec import CategoricalParam, Goal, SamplerName, SweepSpec, config, trial_spec
from jobspec.problems import Problem, SpecError
from jobspec.spec import JobSpec

_RESUME = "checkpoint.resume_from"
_NO_RESUME = "a sweep's trials cannot resume from a checkpoint: each starts from scratch"


def _field(loc: str, message: str, body: SweepSpec) -> str:
    """The request field to blame for a trial spec's fault at `loc` (a dotted path in the job spec): the
    parameter that sets it, else the base spec's own field."""
    for path in body.parameters:
        if loc == path or loc.startswith(f"{path}.") or (path.startswith(f"{loc}.") and path in message):
            return f"parameters.{path}"
        if path.startswith(f"{loc}.") and path.rsplit(".", 1)[-1] in message:
            return f"parameters.{path}"
    return f"spec.{loc}" if loc else "spec"


def _validated(written: dict[str, Any], body: SweepSpec, corner: str) -> JobSpec:
    try:
        return JobSpec.model_validate(written)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = ".".join(str(part) for part in error["loc"])
            message = f"{corner}: {loc}: {error['msg']}"
            problems.append(Problem(_field(loc, message, body), message, "narrow the space or fix the spec"))
        raise SpecError(problems) from None


def _corner_names(settings: Settings, body: SweepSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    for index, params in enumerate(body.corners(settings.sweep_max_dry_runs)):
        name = "the space's low corner" if index == 0 else "its high corner" if index == 1 else "the trial"
        yield f"{name} {params}", params


def _space_problems(settings: Settings, body: SweepSpec) -> Iterator[Problem]:
    """What a new sweep's space may not be, counted (never listed): past the caps that keep its creation and
    each ask cheap, or resuming its trials from a checkpoint, which they cannot (a trial's plan has no resume
    path, and a parameter's values between its ends would reach no owner check)."""
    if _RESUME in body.parameters:
        yield Problem(f"parameters.{_RESUME}", _NO_RESUME, f"drop parameters.{_RESUME}")
    checkpoint = body.spec.get("checkpoint")
    if isinstance(checkpoint, dict) and checkpoint.get("resume_from") is not None:
        yield Problem(f"spec.{_RESUME}", _NO_RESUME, f"leave {_RESUME} out of the sweep's spec")
    # Every ask rebuilds the study, comparing and copying each trial's choices (core/sweeps/study.py): its
    # cost grows with the trials times the choices of all the parameters together, so their sum is capped.
    listed = 0
    for path, param in body.parameters.items():
        listed += len(param.choices) if isinstance(param, CategoricalParam) else 0
        if listed > settings.sweep_max_choices:
            yield Problem(
                f"parameters.{path}.choices",
                "takes the choices the sweep's parameters list together past TRAINYARD_SWEEP_MAX_CHOICES="
                f"{settings.sweep_max_choices}",
                "keep the likeliest, or sweep a range of numbers (type int or float) instead",
            )
            break
    if body.sampler is SamplerName.GRID:
        size = 1
        for path, count in body.grid_counts().items():
            size *= count
            if size > settings.sweep_max_grid_points:
                yield Problem(
                    f"parameters.{path}",
                    f"takes the grid past TRAINYARD_SWEEP_MAX_GRID_POINTS={settings.sweep_max_grid_points} "
                    f"points ({count} of its own)",
                    "give it a larger step, fewer grid_points or fewer choices; or use sampler tpe or "
                    "random, which sample the space without listing it",
                )
                return


def check_space(session: Session, settings: Settings, body: SweepSpec, caller: Caller) -> None:
    """The space's caps, then the spec at a bounded set of its corners, each checked and planned as a
    submission is (services/submit.py); a fault is a 422 naming the parameter that causes it, or the base
    spec's field. It only reads: the route runs it before it takes a write unit (core/db.py)."""
    problems = list(_space_problems(settings, body))
    if problems:
        raise SpecError(problems)
    for corner, params in _corner_names(settings, body):
        spec = _validated(trial_spec(body.spec, params), body, corner)
        try:
            plan = dry_run(session, settings, spec, caller)
        except SpecError as exc:
            raise SpecError(
                [
                    Problem(_field(p.field, p.message, body), f"{corner}: {p.message}", p.fix)
                    for p in exc.problems
                ]
            ) from None
        if not plan.runnable:
            reasons = "; ".join(plan.not_runnable_because)
            raise SpecError([Problem("spec", f"{corner} cannot run on this cluster: {reasons}")])
        check_quota(session, settings, caller.user, plan)


def create_sweep(session: Session, settings: Settings, body: SweepSpec, caller: Caller) -> int:
    """The sweep's row, for a space check_space passed, marked `trials_due`: its first trials are asked for
    once it has committed (core/sweeps/asks.py::top_up), outside this write. Its trials count against the
    caller's job quota: there must be room for one, and it starts as many of its `parallel` as there is
    room for."""
    sweep = Sweep(name=body.name, owner=caller.user, status=SweepStatus.RUNNING, config=body.model_dump())
    session.add(sweep)
    session.flush()
    # Counted after the flush, which on SQLite holds the one writer: no job is added meanwhile.
    check_job_room(session, settings, caller.user)
    session.commit()
    return sweep.id


def owned_sweep(session: Session, sweep_id: int, caller: Caller) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None or not caller.may_see(sweep.owner):
        raise SweepNotFound(sweep_id)
    return sweep


def list_sweeps(
    session: Session, caller: Caller, cursor: int | None, limit: int
) -> tuple[list[Sweep], int | None]:
    query = select(Sweep).order_by(Sweep.id.desc()).limit(limit + 1)
    if not caller.is_admin:
        query = query.where(Sweep.owner == caller.user)
    if cursor is not None:
        query = query.where(Sweep.id < cursor)
    rows = list(session.scalars(query))
    return rows[:limit], rows[limit - 1].id if len(rows) > limit else None


def trials(session: Session, sweep: Sweep) -> list[TrialPublic]:
    spec = config(sweep)
    rows = trials_of(session, sweep.id)
    job_ids = [trial.job_id for trial in rows if trial.job_id is not None]
    jobs = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(job_ids)))}
    summed = reported(session, spec.objective.metric, job_ids)
    minimize = spec.objective.goal is Goal.MINIMIZE
    shown = []
    for trial in rows:
        job = jobs.get(trial.job_id) if trial.job_id is not None else None
        found = summed.get(trial.job_id) if trial.job_id is not None else None
        running = trial.state == TrialState.RUNNING and job is not None
        shown.append(
            TrialPublic(
                number=trial.number,
                job_id=trial.job_id if job is not None else None,
                job_status=JobStatus(job.status) if job is not None else None,
                state=trial.state,
                params=trial.params,
                latest=found.latest if found else None,
                best=(found.lowest if minimize else found.highest) if found else None,
                value=trial.value,
                message=trial.message,
                steps=job.progress_step if running and job else trial.steps,
                total_steps=job.progress_total if running and job else trial.total_steps,
            )
        )
    return shown


def steps_spared(trials: Iterable[TrialPublic]) -> int:
    """The steps pruning spared: each pruned trial's, from where it stopped to its total. A running trial's
    steps still to come are not spared: they are still to run."""
    return sum(
        max((trial.total_steps or 0) - (trial.steps or 0), 0)
        for trial in trials
        if trial.state == TrialState.PRUNED
    )


def public_sweep(session: Session, sweep: Sweep) -> SweepPublic:
    spec = config(sweep)
    shown = trials(session, sweep)
    counts = TrialCounts()
    for trial in shown:
        setattr(counts, trial.state, getattr(counts, trial.state) + 1)
    done = [trial for trial in shown if trial.state == TrialState.COMPLETED and trial.value is not None]
    sign = 1 if spec.objective.goal is Goal.MINIMIZE else -1
    best = min(done, key=lambda trial: sign * (trial.value or 0.0), default=None)
    return SweepPublic(
        id=sweep.id,
        name=sweep.name,
        owner=sweep.owner,
        status=sweep.status,
        created_at=sweep.created_at,
        finished_at=sweep.finished_at,
        objective={"metric": spec.objective.metric, "goal": spec.objective.goal},
        sampler=spec.sampler,
        pruner=spec.pruner,
        max_trials=spec.max_trials,
        parallel=spec.parallel,
        trials=counts,
        best=None
        if best is None or best.value is None
        else BestTrial(trial=best.number, job_id=best.job_id, value=best.value, params=best.params),
        steps_used=(used := sum(trial.steps or 0 for trial in shown)),
        steps_if_unpruned=used + steps_spared(shown),
        config=sweep.config,
    )


def cancel_sweep(session: Session, sweep: Sweep) -> Sweep:
    """No trial is asked for once this commits; then each unfinished trial's job is cancelled, as
    POST /v1/jobs/{id}/cancel does, each in its own transaction (the sweep's row is never held meanwhile)."""
    if sweep.status != SweepStatus.RUNNING:
        raise SweepEnded(sweep)
    sweep.status = SweepStatus.CANCELLED
    sweep.finished_at = utcnow()
    session.commit()
    running = select(SweepTrial.job_id).where(
        SweepTrial.sweep_id == sweep.id,
        SweepTrial.state == TrialState.RUNNING,
        SweepTrial.job_id.is_not(None),
    )
    for job_id in [job_id for job_id in session.scalars(running) if job_id is not None]:
        try:
            cancel_job(session, job_id)
        except JobStateConflict:  # it ended meanwhile
            session.rollback()
    return sweep
