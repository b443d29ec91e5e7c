"""Bearer API keys. With auth off (`make run` on loopback) every request acts as the local admin."""

from __future__ import annotations

import time

from fastapi import HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.base import SecurityBase

from app.services.keys import LOCAL_CALLER, Caller, caller_for_token, hash_token
from core.config import AuthMode, Settings, get_settings
from core.db import read_in_session

# auto_error=False: a missing header is answered below with 401 and a message, not HTTPBearer's bare 403.
bearer = HTTPBearer(auto_error=False, description="an API key from `trainyard keys create --user NAME`")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
# A client polling its jobs sends the same key many times a second; one lookup per key per this many seconds
# serves them all. A key whose row is deleted therefore keeps working for at most this long.
KEY_TTL_S = 10.0
# Only keys found valid are kept, so this holds at most one entry per stored key, keyed by its hash.
_known_keys: dict[str, tuple[float, Caller]] = {}


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers=_CHALLENGE)


async def _caller_for(token: str) -> Caller | None:
    key_hash, now = hash_token(token), time.monotonic()
    known = _known_keys.get(key_hash)
    if known is not None and known[0] > now:
        return known[1]
    caller = await read_in_session(caller_for_token, token)
    if caller is not None:
        _known_keys[key_hash] = (now + KEY_TTL_S, caller)
    return caller


async def authenticate(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    if settings.auth is AuthMode.OFF:
        return LOCAL_CALLER
    if credentials is None:
        raise unauthorized(
            "this route needs an API key: send 'Authorization: Bearer <key>'; "
            "an admin creates one with `trainyard keys create --user NAME`"
        )
    caller = await _caller_for(credentials.credentials)
    if caller is None:
        raise unauthorized("the API key is not valid; ask an admin for a new one")
    return caller


class BearerKeyAuth(SecurityBase):
    """The dependency that names the caller: documented in OpenAPI as `bearer` is (the HTTPBearer scheme), and
    solved as one node with no sub-dependencies. FastAPI solves every node of a route's dependency tree on
    each request, again for each route that names it, and that was the largest part of a lookup's CPU time:
    settings, the bearer scheme and the caller as three nodes cost ~0.15 ms per GET /v1/jobs/{id}."""

    def __init__(self, scheme: HTTPBearer) -> None:
        self.scheme = scheme
        self.model = scheme.model
        self.scheme_name = scheme.scheme_name

    async def __call__(self, request: Request) -> Caller:
        return await authenticate(get_settings(), await self.scheme(request))
