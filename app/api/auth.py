"""Bearer API keys. With auth off (`make run` on loopback) every request acts as the local admin."""

from __future__ import annotations

from fastapi import HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.core.config import AuthMode, Settings
from app.services.keys import LOCAL_CALLER, Caller, caller_for_token

# auto_error=False: a missing header is answered below with 401 and a message, not HTTPBearer's bare 403.
bearer = HTTPBearer(auto_error=False, description="an API key from `trainyard keys create --user NAME`")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers=_CHALLENGE)


def authenticate(
    session: Session, settings: Settings, credentials: HTTPAuthorizationCredentials | None
) -> Caller:
    if settings.auth is AuthMode.OFF:
        return LOCAL_CALLER
    if credentials is None:
        raise unauthorized(
            "this route needs an API key: send 'Authorization: Bearer <key>'; "
            "an admin creates one with `trainyard keys create --user NAME`"
        )
    caller = caller_for_token(session, credentials.credentials)
    if caller is None:
        raise unauthorized("the API key is not valid; ask an admin for a new one")
    return caller
