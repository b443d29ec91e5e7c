"""/v1/secrets: users' secrets for their jobs' environment. A value is sent once and never shown again; jobs
name it in `env` ({"secret": NAME}) and the worker hands it to their ranks alone (docs/secrets.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from app.api.deps import CallerDep, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problem, problems
from app.secret_schemas import SecretCreate, SecretPublic, SecretsPublic
from app.services import secrets as service
from jobspec.spec_env import SECRET_NAME_PATTERN

router = APIRouter(prefix="/secrets", tags=["secrets"])

SecretName = Annotated[str, Path(pattern=SECRET_NAME_PATTERN, description="the secret's name")]
NO_KEY = problem(
    "the server has no TRAINYARD_SECRETS_KEY: secrets are refused rather than stored in the clear"
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={**BODY_PROBLEMS, **problems(403, 409), 503: NO_KEY},
)
def set_secret(
    body: SecretCreate, session: SessionDep, caller: CallerDep, settings: SettingsDep
) -> SecretPublic:
    return SecretPublic.model_validate(service.set_secret(session, settings, body, caller))


@router.get("")
def list_secrets(session: SessionDep, caller: CallerDep) -> SecretsPublic:
    return SecretsPublic(
        data=[SecretPublic.model_validate(s) for s in service.secrets_seen_by(session, caller)]
    )


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=problems(404))
def delete_secret(name: SecretName, session: SessionDep, caller: CallerDep) -> None:
    service.delete_secret(session, name, caller)
