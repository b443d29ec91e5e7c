"""/v1/sweeps: hyperparameter searches whose trials are ordinary jobs (docs/sweeps.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, status
from fastapi.concurrency import run_in_threadpool

from app.api.deps import DB_INT_MAX, CallerDep, CanonicalInt, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problem, problems
from app.schemas import SweepPublic, SweepsPublic, TrialsPublic
from app.services import sweeps
from app.services.keys import Caller
from core.config import Settings
from core.db import new_session, run_in_session
from core.models import Sweep
from core.sweeps.asks import top_up
from core.sweeps.spec import SweepSpec

router = APIRouter(prefix="/sweeps", tags=["sweeps"])

SweepId = Annotated[int, CanonicalInt, Path(ge=1, le=DB_INT_MAX, description="sweep id")]


def owned_sweep(sweep_id: SweepId, session: SessionDep, caller: CallerDep) -> Sweep:
    """Another user's sweep is a 404, like a missing one."""
    return sweeps.owned_sweep(session, sweep_id, caller)


OwnedSweep = Annotated[Sweep, Depends(owned_sweep)]


def _check(settings: Settings, body: SweepSpec, caller: Caller) -> None:
    with new_session() as session:
        sweeps.check_space(session, settings, body, caller)


def _shown(sweep_id: int) -> SweepPublic:
    with new_session() as session:
        return sweeps.public_sweep(session, session.get_one(Sweep, sweep_id))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={**BODY_PROBLEMS, **problems(429)},
)
async def create_sweep(body: SweepSpec, settings: SettingsDep, caller: CallerDep) -> SweepPublic:
    # Planned first, a dry run per corner, in a pool thread of its own: planning only reads, so it neither
    # waits for nor holds one of the few units of work that write at once on SQLite (run_in_session), which
    # every submission and dry run needs. Then the sweep's row is written in one such unit; its first trials
    # are asked for after it commits, as a worker's reconciler asks for the next ones: Optuna and planning
    # hold no write, and each trial is one short write of its own.
    await run_in_threadpool(_check, settings, body, caller)
    sweep_id = await run_in_session(sweeps.create_sweep, settings, body, caller)
    await run_in_threadpool(top_up, sweep_id)
    return await run_in_threadpool(_shown, sweep_id)


@router.get("")
def list_sweeps(
    session: SessionDep,
    caller: CallerDep,
    cursor: Annotated[int | None, CanonicalInt, Query(ge=1, le=DB_INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> SweepsPublic:
    page, next_cursor = sweeps.list_sweeps(session, caller, cursor, limit)
    return SweepsPublic(data=[sweeps.public_sweep(session, sweep) for sweep in page], next_cursor=next_cursor)


@router.get("/{sweep_id}", responses=problems(404))
def get_sweep(sweep: OwnedSweep, session: SessionDep) -> SweepPublic:
    return sweeps.public_sweep(session, sweep)


@router.get("/{sweep_id}/trials", responses=problems(404))
def list_trials(sweep: OwnedSweep, session: SessionDep) -> TrialsPublic:
    return TrialsPublic(data=sweeps.trials(session, sweep))


@router.post(
    "/{sweep_id}/cancel",
    responses={**problems(404), 409: problem("the sweep has already ended")},
)
def cancel_sweep(sweep: OwnedSweep, session: SessionDep) -> SweepPublic:
    """No more trials are made; each running trial is cancelled as POST /v1/jobs/{id}/cancel does."""
    return sweeps.public_sweep(session, sweeps.cancel_sweep(session, sweep))
